#!/usr/bin/env bash
# The SASS check of cuda_fused (label unit; runs without a GPU): disassembles the f16/bf16 kernels
# of the built library with cuobjdump -sass and checks that every tensor-core kernel (the forward's
# and the backward's dQ and dK/dV kernels) has HMMA instructions (HGMMA, warpgroup MMA, for the
# sm_90a wgmma kernels) inside its main loop: after a label that a later backward branch jumps to.
#   cuda_fused_sass.sh LIBRARY CUOBJDUMP
# Exit 0: every kernel checked; 1: a kernel lacks tensor-core instructions in a loop; 77 (CTest:
# skipped): no cuobjdump (CMake's ATTN_CUOBJDUMP; the toolkit's or pip's nvidia-cuda-cuobjdump).
set -uo pipefail
lib=${1:?library}
tool=${2:-}
if [ -z "$tool" ] || [ ! -x "$tool" ]; then
  echo "cuda_fused_sass: skipped: cuobjdump not found (configure with -DATTN_CUOBJDUMP=PATH)"
  exit 77
fi
[ -f "$lib" ] || { echo "cuda_fused_sass: $lib not found" >&2; exit 1; }
# cuobjdump -sass runs nvdisasm, which sits next to it (the toolkit's bin/, or pip's nvidia/cu13/bin).
PATH="$(dirname "$tool"):$PATH"
export PATH
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$tool" -sass "$lib" >"$sass" 2>&1 || { echo "cuda_fused_sass: $tool -sass failed:" >&2; tail -n 5 "$sass" >&2; exit 1; }
python3 - "$sass" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
# Split into functions: "Function : NAME" headers.
parts = re.split(r"^\s*Function : (\S+)\s*$", text, flags=re.M)
kernels = {parts[i]: parts[i + 1] for i in range(1, len(parts) - 1, 2)}
names = ("fused_forward_mma_kernel", "fused_forward_wgmma_kernel", "fused_backward_dq_kernel", "fused_backward_dk_dv_kernel")
mma = {n: body for n, body in kernels.items() if any(k in n for k in names)}
missing = [k for k in names if not any(k in n for n in mma)]
if missing:
    print("cuda_fused_sass: " + ", ".join(missing) + " missing from the disassembly")
    sys.exit(1)
bad = 0
for name, body in sorted(mma.items()):
    # Instruction lines: /*ADDR*/  OPCODE ... ;
    lines = re.findall(r"/\*([0-9a-f]{4,})\*/\s+([^;]*);", body)
    addr = [(int(a, 16), ins.strip()) for a, ins in lines]
    opcode = r"\bHGMMA\b" if "wgmma" in name else r"\bHMMA\b"
    hmma = [a for a, ins in addr if re.search(opcode, ins)]
    loops = []  # (target, branch address) of backward branches
    for a, ins in addr:
        m = re.search(r"\bBRA\b.*?0x([0-9a-f]+)", ins)
        if m and int(m.group(1), 16) < a:
            loops.append((int(m.group(1), 16), a))
    in_loop = [h for h in hmma if any(t <= h <= b for t, b in loops)]
    ok = len(hmma) > 0 and len(in_loop) > 0
    bad += not ok
    short = re.sub(r"^_ZN4attn10cuda_fused[0-9]+", "", name)[:90]
    kind = "HGMMA" if "wgmma" in name else "HMMA"
    print(f"{'ok ' if ok else 'BAD'} {short}: {len(hmma)} {kind}, {len(in_loop)} inside a loop (backward branches: {len(loops)})")
print(f"cuda_fused_sass: {len(mma)} tensor-core kernels, {bad} without HMMA in a loop")
sys.exit(1 if bad else 0)
PY
