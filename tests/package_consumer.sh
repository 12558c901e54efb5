#!/usr/bin/env bash
# The installed package (cmake/install.cmake): installs this build to a scratch prefix, configures
# and builds examples/consumer against it with find_package(attnbench) alone, runs it (the
# correct attention passes, exit 0; --wrong is caught, exit 1) and checks with readelf that the
# consumer needs no CUDA library (libcuda, libcudart, libcublas), whatever ATTN_CUDA built.
# Usage: package_consumer.sh CMAKE BUILD_DIR SOURCE_DIR CXX_COMPILER BUILD_TYPE SANITIZE
# (SANITIZE: the build's ATTN_SANITIZE, e.g. address,undefined, or empty; the consumer is compiled
# with it too, as a project linking sanitized static libraries must be).
set -u
cmake_bin=${1:?usage}; build=${2:?usage}; source=${3:?usage}; cxx=${4:?usage}; build_type=${5:-Release}; sanitize=${6:-}
command -v readelf >/dev/null || { echo "SKIP: readelf (binutils) is not installed: the NEEDED check cannot run"; exit 77; }
tmp=$(mktemp -d /tmp/attn-package.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

"$cmake_bin" --install "$build" --prefix "$tmp/prefix" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; echo "FAIL: cmake --install"; exit 1; }
for f in include/attnbench/core/problem.hpp include/attnbench/judge/judge.hpp include/attnbench/reference/reference.hpp \
         include/attnbench/attnbench_plugin.h bin/attnbench bin/attnbench-plugin-host; do
  [ -f "$tmp/prefix/$f" ] || fail "the package lacks $f"
done
# The installed command runs on its own (not the build tree's), and says what it is.
"$tmp/prefix/bin/attnbench" --version >"$tmp/version.txt" 2>&1 || fail "the installed attnbench --version failed: $(cat "$tmp/version.txt")"
grep -q "^attnbench [0-9][0-9.]* (git " "$tmp/version.txt" || fail "attnbench --version printed: $(cat "$tmp/version.txt")"
config=$(find "$tmp/prefix" -name attnbenchConfig.cmake | head -n 1)
[ -n "$config" ] || fail "the package has no attnbenchConfig.cmake"
[ -f "$(dirname "$config")/attnbenchConfigVersion.cmake" ] || fail "the package has no attnbenchConfigVersion.cmake"

flags=""
[ -n "$sanitize" ] && flags="-fsanitize=$sanitize -fno-omit-frame-pointer"
# The consumer sees the prefix only: no package registry, no path into this build or source tree.
"$cmake_bin" -S "$source/examples/consumer" -B "$tmp/consumer" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE="$build_type" \
  -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DCMAKE_CXX_FLAGS="$flags" >"$tmp/configure.log" 2>&1 ||
  { cat "$tmp/configure.log"; echo "FAIL: configuring examples/consumer against the package"; exit 1; }
"$cmake_bin" --build "$tmp/consumer" >"$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; echo "FAIL: building examples/consumer"; exit 1; }

"$tmp/consumer/consumer" >"$tmp/pass.out" 2>&1
rc=$?
cat "$tmp/pass.out"
[ "$rc" -eq 0 ] || fail "consumer: exit $rc, expected 0 (its attention is correct)"
grep -q "PASS" "$tmp/pass.out" || fail "consumer printed no PASS"
"$tmp/consumer/consumer" --wrong >"$tmp/wrong.out" 2>&1
rc=$?
cat "$tmp/wrong.out"
[ "$rc" -eq 1 ] || fail "consumer --wrong: exit $rc, expected 1 (the judge must catch scale 1/d_k)"
grep -q "FAIL" "$tmp/wrong.out" || fail "consumer --wrong printed no FAIL"

needed=$(readelf -d "$tmp/consumer/consumer" | grep NEEDED)
echo "$needed"
if echo "$needed" | grep -Eq 'libcuda|libcudart|libcublas'; then fail "the consumer needs a CUDA library"; fi
echo "package_consumer: $failures failures"
[ "$failures" -eq 0 ]
