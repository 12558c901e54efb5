# shellcheck shell=bash disable=SC2034
# The Debian 12 packages attnbench builds against: the one list that ci/install-deps.sh installs
# and ci/offline-deps.sh downloads for an air-gapped machine. Sourced, not run.

# Tools: a GPU machine is expected to have these already (compiler, CMake, Ninja).
attn_tool_packages=(
  build-essential cmake ninja-build pkg-config
)

# Libraries the build finds with find_package (headers, CMake config files, shared libraries).
attn_library_packages=(
  libbenchmark-dev      # Google Benchmark
  libgtest-dev          # GoogleTest (unit tests)
  librapidcheck-dev     # RapidCheck (property tests)
  libboost-dev          # Boost.Multiprecision (header-only) for the reference
  libeigen3-dev         # Eigen (the SGEMM peak probe of the benchmarks)
  libcli11-dev          # CLI11 (the attnbench command line)
  nlohmann-json3-dev    # JSON results and problem serialisation
  libfmt-dev            # formatting
  libseccomp-dev        # the plugin worker's seccomp filter (impls/sandbox)
)

# Test-time tools, optional to the build: bench-smoke loads our JSON in Google Benchmark's
# compare.py (/usr/share/benchmark/compare.py) and skips that check when it or scipy is missing.
attn_test_tool_packages=(
  libbenchmark-tools python3-scipy  # its compare.py (and what compare.py imports)
  clang-14 libclang-rt-14-dev       # the fuzz preset: clang and its libFuzzer runtime (ci/run-fuzz.sh)
  libdlpack-dev                     # dlpack.h: plugin_dlpack_test holds the plugin ABI's tensors to DLPack's layout
)

attn_packages=("${attn_tool_packages[@]}" "${attn_library_packages[@]}" "${attn_test_tool_packages[@]}")
