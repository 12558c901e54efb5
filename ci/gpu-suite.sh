#!/usr/bin/env bash
# The GPU suite, on a machine with an NVIDIA GPU: build the gpu preset, record the device, run
# the GPU-labelled tests, verify cuda_cublas and cuda_fused on the default case set, forward and backward (cuda_fused
# also: properties, SASS), compute-sanitizer's memcheck, racecheck, synccheck and initcheck on small
# problems of both, the Triton example compiled for the GPU, then cuda_fused's target benchmark
# beside PyTorch's SDPA backends. Under 6 minutes on one H100, build included.
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

n=0 built=1 last_log=""
# run_step NAME COMMAND...: runs COMMAND with its output in OUTDIR/NN-NAME.log (the last lines of
# a failing step's also on the terminal), records exit code and duration in the summary. bg_step: the same in the background
# (wait_steps waits for them): steps that share nothing run side by side, which is what keeps the
# suite within its 6 minutes.
run_step() {
  n=$((n + 1))
  run_numbered "$n" "$@"
}
bg_step() {
  n=$((n + 1))
  run_numbered "$n" "$@" &
}
wait_steps() { wait; }
run_numbered() {
  local index=$1 name=$2 log rc start secs cmdline note=""
  shift 2
  log=$(printf '%s/%02d-%s.log' "$outdir" "$index" "$name")
  cmdline=$(printf '%q ' "$@")
  echo "== gpu-suite [$index] $name: $cmdline"
  start=$(date +%s)
  {
    echo "\$ $cmdline"
    "$@"
  } >"$log" 2>&1
  rc=$?
  last_log=$log
  secs=$(($(date +%s) - start))
  [ "$name" != gpu-tests ] || note=$(junit_note "$outdir/gpu-tests.xml")
  [ "$rc" -ne 124 ] || note="  (timed out)"
  printf '%-26s %5s %8s  %s%s\n' "$name" "$rc" "$secs" "$(basename "$log")" "$note" >>"$summary"
  echo "== gpu-suite [$index] $name: exit $rc in ${secs}s"
  [ "$rc" -eq 0 ] || tail -n 15 "$log" | sed "s/^/   [$name] /"
  return "$rc"
}
# skip_step NAME WHY: a step that could not run; it counts as failed.
skip_step() {
  n=$((n + 1))
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
  # -k 0: a target that fails (the Python module, say) is named in the log without stopping the
  # others; the steps below need attnbench and the GPU test binaries.
  run_step build cmake --build --preset gpu --parallel "$jobs" -- -k 0
  for needed in "$attnbench" "$bindir/tests/cuda_cublas_test" "$bindir/tests/cuda_fused_test"; do
    [ -x "$needed" ] || built=0
  done
else
  skip_step build "configure failed"
  built=0
fi

# --- tests, verification, sanitizers, benchmarks ---------------------------------------------
# Every step after the build runs under `timeout`: a step that hangs fails with exit 124, named in
# the summary, and the suite goes on. The benchmark runs first and alone; the checks after it share
# nothing and run side by side (16 cores and one GPU hold them all).
if [ "$built" -eq 1 ]; then
  # First, alone on the GPU: cuda_fused's target problem beside cuda_cublas and the PyTorch peers
  # (flash, cuDNN, efficient, math) in one run: bf16, d = 128, h = 16, b = 2, n = 4096 and 8192, causal and not.
  run_step bench-cuda_fused timeout 150 "$attnbench" bench --impl cuda_fused --impl cuda_cublas --dtype bf16 --d 128 --heads 16 --batch 2 \
    --masks none,causal --min-n 4096 --max-n 8192 --fit-min-n 4096 --json "$outdir/bench-fused.json" \
    --peers 'python3 benchmarks/peers/torch_sdpa.py'
  # Then cuda_fused's kernels launched directly, side by side on the same problem (the wgmma
  # kernel with S in one product or in two halves, and the mma.sync kernel).
  run_step cuda_fused-variants timeout 60 "$bindir/benchmarks/cuda_fused_variants"
  # The GPU tests; both implementations on the default set (the reference computed once per case),
  # forward and backward,
  # and on the cases GPU runs once got wrong (ci/gpu-regression-cases.txt);
  # the property suite on cuda_fused; the SASS check; the Triton example compiled for the GPU
  # through the Python package, on the quick set.
  bg_step gpu-tests timeout 170 ctest --preset gpu -L gpu -j 2 --output-junit "$outdir/gpu-tests.xml"
  bg_step verify timeout 170 "$attnbench" verify --impl cuda_cublas --impl cuda_fused --cases default --threads 6 --json "$outdir/verify-gpu.json"
  bg_step verify-backward timeout 170 "$attnbench" verify --backward --impl cuda_cublas --impl cuda_fused --cases default --threads 4 \
    --json "$outdir/verify-gpu-backward.json"
  bg_step verify-regressions timeout 170 "$attnbench" verify --impl cuda_cublas --impl cuda_fused --cases "$root/ci/gpu-regression-cases.txt" \
    --threads 2 --json "$outdir/verify-gpu-regressions.json"
  bg_step properties-cuda_fused timeout 170 "$attnbench" properties --impl cuda_fused --property-cases 30 \
    --json "$outdir/properties-fused.json"
  # The SASS check calls its script itself: a second ctest in this build tree beside gpu-tests'
  # races on gtest_discover_tests' files.
  bg_step sass-cuda_fused bash "$root/tests/cuda_fused_sass.sh" "$bindir/impls/libattn_cuda_fused.a" "$(command -v cuobjdump || echo /usr/local/cuda/bin/cuobjdump)"
  bg_step python-triton-gpu timeout 170 env PYTHONPATH="$bindir/python" python3 -m pytest -q -p no:cacheprovider \
    "$root/python/tests/test_real_kernels.py" -k triton
  # compute-sanitizer on small problems built for it, ci/sanitizer-cases.txt (every kernel path of
  # both implementations at sizes each tool finishes in seconds), each tool over both
  # implementations through `attnbench verify`, which provokes no CUDA API error on purpose (the
  # test binaries do: cuda_cublas_test's CudaErrorsBecomeExceptionsNamingTheCall); initcheck also
  # on the quick set and a twelfth of the default set.
  if [ -z "$sanitizer" ]; then
    for s in memcheck racecheck synccheck initcheck initcheck-quick initcheck-default-sample; do skip_step "$s" "compute-sanitizer not found"; done
  else
    # --nvtx true: cuda_cublas marks what cuBLAS's GEMMs wrote (NVTX memory API), which initcheck
    # cannot see through the tensor memory accelerator's stores.
    san=("$sanitizer" --error-exitcode 1 --print-limit 20 --nvtx true)
    small=(verify --impl cuda_cublas --impl cuda_fused --json '' --no-diagnosis --threads 1)
    for tool in memcheck racecheck synccheck initcheck; do
      bg_step "$tool" timeout 170 "${san[@]}" --tool "$tool" "$attnbench" "${small[@]}" --cases "$root/ci/sanitizer-cases.txt"
    done
    bg_step initcheck-quick timeout 170 "${san[@]}" --tool initcheck "$attnbench" "${small[@]}" --cases quick
    bg_step initcheck-default-sample timeout 170 "${san[@]}" --tool initcheck "$attnbench" "${small[@]}" --cases default --shard 1/12
  fi
  wait_steps

else
  for s in bench-cuda_fused cuda_fused-variants gpu-tests verify verify-backward verify-regressions properties-cuda_fused sass-cuda_fused python-triton-gpu memcheck racecheck synccheck initcheck \
    initcheck-quick initcheck-default-sample; do
    skip_step "$s" "the build failed"
  done
fi

total=$(awk 'NR > 4 && NF >= 3' "$summary" | wc -l)
failed=$(awk 'NR > 4 && NF >= 3 && $2 != "0"' "$summary" | wc -l)
echo "# $failed of $total steps failed" >>"$summary"
echo "== gpu-suite: summary ($summary)"
cat "$summary"
[ "$failed" -eq 0 ]
