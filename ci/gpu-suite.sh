#!/usr/bin/env bash
# The GPU suite, on a machine with an NVIDIA GPU: build the gpu preset, record the device, run
# the GPU-labelled tests, verify cuda_cublas and cuda_fused on the default case set (cuda_fused
# also: properties, 250 identical runs, SASS), run the GPU test binaries under compute-sanitizer
# (memcheck, racecheck; synccheck for cuda_fused), then benchmark on the GPU with the PyTorch peer.
#
#   bash ci/gpu-suite.sh OUTDIR [--prefix PREFIX]
#
# --prefix PREFIX: where ci/offline-deps.sh installed the libraries (an air-gapped machine);
# passed to CMake as CMAKE_PREFIX_PATH. Every step writes its own log under OUTDIR
# (NN-step.log) and OUTDIR/summary.txt lists each step's exit code and duration. A failing step
# does not stop the later ones (those that need the build are skipped when it failed); the exit
# code is 0 when every step passed, 1 when one failed, 2 for bad usage or no GPU. Needs no network.
set -uo pipefail

usage() {
  sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

outdir="" prefix=""
while [ $# -gt 0 ]; do
  case $1 in
    --prefix) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --prefix=*) prefix=${1#--prefix=}; shift ;;
    -h | --help) usage ;;
    -*) echo "gpu-suite: unknown option $1" >&2; usage ;;
    *) [ -z "$outdir" ] || usage; outdir=$1; shift ;;
  esac
done
[ -n "$outdir" ] || usage

cd "$(dirname "$0")/.." || exit 2
root=$PWD
mkdir -p "$outdir" || { echo "gpu-suite: cannot create $outdir" >&2; exit 2; }
outdir=$(cd "$outdir" && pwd)
if [ -n "$prefix" ]; then
  [ -d "$prefix" ] || { echo "gpu-suite: --prefix $prefix is not a directory (ci/offline-deps.sh install DIR PREFIX makes it)" >&2; exit 2; }
  prefix=$(cd "$prefix" && pwd)
fi
summary=$outdir/summary.txt
bindir=$root/build/gpu
attnbench=$bindir/cli/attnbench

# No GPU, no suite: say so before building anything.
no_gpu() {
  echo "gpu-suite: no GPU: $*" | tee "$summary" >&2
  echo "gpu-suite: this suite needs an NVIDIA GPU and its driver; CI without one compiles the CUDA targets and skips the GPU tests (cmake --preset ci)." >&2
  exit 2
}
command -v nvidia-smi >/dev/null 2>&1 || no_gpu "nvidia-smi is not on PATH (no NVIDIA driver on this machine)"
gpus=$(nvidia-smi -L 2>&1) || no_gpu "nvidia-smi -L failed: $gpus"
grep -q '^GPU [0-9]' <<<"$gpus" || no_gpu "nvidia-smi lists no device: $gpus"

sanitizer=$(command -v compute-sanitizer || true)
[ -n "$sanitizer" ] || [ ! -x /usr/local/cuda/bin/compute-sanitizer ] || sanitizer=/usr/local/cuda/bin/compute-sanitizer
jobs=$(nproc 2>/dev/null || echo 4)

{
  revision=$(git -C "$root" rev-parse --short HEAD 2>/dev/null) || revision="no git"
  [ "$revision" = "no git" ] || git -C "$root" diff --quiet HEAD 2>/dev/null || revision+=" (modified)"
  echo "# gpu-suite $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname), $revision"
  echo "# ${gpus//$'\n'/; }"
  echo "# prefix: ${prefix:-none}"
  printf '%-26s %5s %8s  %s\n' step exit seconds log
} >"$summary"

failed=0 total=0 n=0 built=1 last_log=""
# run_step NAME COMMAND...: runs COMMAND with its output in OUTDIR/NN-NAME.log (and on the
# terminal), records exit code and duration in the summary.
run_step() {
  local name=$1 log rc start secs cmdline note=""
  shift
  n=$((n + 1))
  log=$(printf '%s/%02d-%s.log' "$outdir" "$n" "$name")
  total=$((total + 1))
  cmdline=$(printf '%q ' "$@")
  echo "== gpu-suite [$n] $name: $cmdline"
  start=$(date +%s)
  {
    echo "\$ $cmdline"
    "$@"
  } 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  last_log=$log
  secs=$(($(date +%s) - start))
  [ "$rc" -eq 0 ] || failed=$((failed + 1))
  [ "$name" != gpu-tests ] || note=$(junit_note "$outdir/gpu-tests.xml")
  printf '%-26s %5s %8s  %s%s\n' "$name" "$rc" "$secs" "$(basename "$log")" "$note" >>"$summary"
  echo "== gpu-suite [$n] $name: exit $rc in ${secs}s"
  return "$rc"
}
# skip_step NAME WHY: a step that could not run; it counts as failed.
skip_step() {
  n=$((n + 1))
  total=$((total + 1))
  failed=$((failed + 1))
  printf '%-26s %5s %8s  %s\n' "$1" skip - "not run: $2" >>"$summary"
  echo "== gpu-suite [$n] $1: not run: $2"
}
# On a GPU machine a skipped GPU test means the test found no usable device: worth a look.
junit_note() {
  [ -f "$1" ] || return 0
  local skipped
  skipped=$(grep -o -m1 'skipped="[0-9]*"' "$1" | tr -dc 0-9)
  [ -z "$skipped" ] || [ "$skipped" -eq 0 ] || echo "  ($skipped skipped: look at why)"
}

# --- the machine -----------------------------------------------------------------------------
run_step nvidia-smi nvidia-smi
run_step device sh -c 'nvidia-smi --query-gpu=index,name,uuid,driver_version,memory.total,compute_cap,clocks.max.sm,clocks.max.mem,power.limit,persistence_mode --format=csv || nvidia-smi -q'
sed 1d "$last_log" >"$outdir/device.txt"
run_step toolchain sh -c 'nvcc --version || /usr/local/cuda/bin/nvcc --version; cmake --version | head -n 1; c++ --version | head -n 1; python3 -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else \"no device\")" || echo "python3: torch not importable"; true'

# --- build -----------------------------------------------------------------------------------
configure=(cmake --preset gpu)
[ -z "$prefix" ] || configure+=("-DCMAKE_PREFIX_PATH=$prefix")
run_step configure "${configure[@]}" || built=0
if [ "$built" -eq 1 ]; then
  run_step build cmake --build --preset gpu --parallel "$jobs" || built=0
else
  skip_step build "configure failed"
  built=0
fi

# --- tests, verification, sanitizers, benchmarks ---------------------------------------------
if [ "$built" -eq 1 ]; then
  run_step gpu-tests ctest --preset gpu -L gpu --output-junit "$outdir/gpu-tests.xml"
  run_step verify-cuda_cublas "$attnbench" verify --impl cuda_cublas --cases default --json "$outdir/verify-gpu.json"
  # cuda_fused: the default set in f16, bf16 and f32, the property suite, 250 identical runs (in
  # cuda_fused_test), and the SASS check (HMMA in the main loop; also in the gpu-tests' unit run).
  run_step verify-cuda_fused "$attnbench" verify --impl cuda_fused --cases default --json "$outdir/verify-fused.json"
  run_step properties-cuda_fused "$attnbench" properties --impl cuda_fused
  run_step validate-cuda_plugin "$attnbench" validate --plugin "$bindir/examples/cuda_plugin.so" --cases default --bench --out "$outdir/validate-cuda_plugin"
  run_step determinism-cuda_fused "$bindir/tests/cuda_fused_test" --gtest_filter='*RepeatedRunsAreBitwiseIdentical*'
  run_step sass-cuda_fused ctest --preset gpu -R '^cuda_fused_sass$' --output-on-failure

  # The GPU test binaries: cuda_cublas_test, and every other executable that a gpu-labelled
  # CTest test runs (its first command word, *_test).
  binaries=("$bindir/tests/cuda_cublas_test" "$bindir/tests/cuda_fused_test")
  while IFS= read -r b; do
    dup=0
    for have in "${binaries[@]}"; do
      [ "$(readlink -f "$have")" != "$(readlink -f "$b")" ] || dup=1
    done
    [ "$dup" -eq 1 ] || binaries+=("$b")
  done < <(ctest --preset gpu -L gpu --show-only=json-v1 2>/dev/null | python3 -c '
import json, sys
try:
    doc = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
seen = set()
for t in doc.get("tests", []):
    cmd = t.get("command") or []
    if cmd and cmd[0].endswith("_test") and cmd[0] not in seen:
        seen.add(cmd[0])
        print(cmd[0])
')
  for b in "${binaries[@]}"; do
    name=$(basename "$b")
    tools=(memcheck racecheck)
    [ "$name" != cuda_fused_test ] || tools+=(synccheck)
    for tool in "${tools[@]}"; do
      if [ -z "$sanitizer" ]; then
        skip_step "$tool-$name" "compute-sanitizer not found"
      elif [ ! -x "$b" ]; then
        skip_step "$tool-$name" "$b was not built"
      else
        # The test binaries' own problems are small, which is what the sanitizers need.
        run_step "$tool-$name" "$sanitizer" --tool "$tool" --error-exitcode 1 "$b"
      fi
    done
  done

  run_step bench-gpu "$attnbench" bench --impl cuda_cublas --dtype f32,f16,bf16 --json "$outdir/bench-gpu.json" \
    --peers 'python3 benchmarks/peers/torch_sdpa.py'
  # cuda_fused's target problem beside the torch peer and cuda_cublas, the cuBLAS bf16 GEMM rate
  # measured in the same run: bf16, d = 128, h = 16, b = 2, n up to 8192, causal and not.
  run_step bench-cuda_fused "$attnbench" bench --impl cuda_fused --impl cuda_cublas --dtype bf16 --d 128 --heads 16 --batch 2 \
    --masks none,causal --json "$outdir/bench-fused.json" --peers 'python3 benchmarks/peers/torch_sdpa.py'
else
  for s in gpu-tests verify-cuda_cublas verify-cuda_fused properties-cuda_fused determinism-cuda_fused sass-cuda_fused memcheck racecheck \
    synccheck bench-gpu bench-cuda_fused; do skip_step "$s" "the build failed"; done
fi

echo "# $failed of $total steps failed" >>"$summary"
echo "== gpu-suite: summary ($summary)"
cat "$summary"
[ "$failed" -eq 0 ]
