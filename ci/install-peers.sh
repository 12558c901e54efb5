#!/usr/bin/env bash
# Installs the peers that benchmarks/peers/cpu_peers.py times (ONNX Runtime, JAX on CPU, PyTorch's
# CPU scaled_dot_product_attention) and what it needs (numpy, onnx, and the attnbench package that
# judges them: pip install .) from PyPI into the git-ignored
# virtual environment .venv/. (ci/python-env.sh's venv, the tests' own, holds the same versions.)
# Optional: not part of the test command. Idempotent: when .venv/ already holds every pinned
# version it touches nothing (no network).
set -euo pipefail
cd "$(dirname "$0")/.."

# Versions verified together with cpu_peers.py (CPython 3.11, x86-64 Linux).
requirements=(
  "numpy==2.4.6"
  "onnxruntime==1.31.1"
  "onnx==1.23.2"
  "jax[cpu]==0.10.2"
  "torch==2.15.0"  # PyPI's default wheel: its CUDA libraries come along (a few GB); the peers use its CPU kernels
)
venv=.venv
python="${PYTHON:-python3}"

have_all() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "${requirements[@]}" <<'EOF'
import importlib.metadata as md, re, sys
for req in sys.argv[1:]:
    name, version = re.match(r"([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(.+)", req).groups()
    try:
        if md.version(name) != version:
            sys.exit(1)
    except md.PackageNotFoundError:
        sys.exit(1)
import attnbench  # the package judges the peers (cpu_peers.py); ImportError: not installed yet
EOF
}

if have_all; then
  echo "install-peers: $venv already has ${requirements[*]}"
  exit 0
fi

if [ ! -x "$venv/bin/python" ]; then
  # Debian's python3 ships venv's pip bootstrap (ensurepip) in a separate package.
  if ! "$python" -c "import venv, ensurepip" 2>/dev/null && command -v apt-get >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null || { echo "install-peers: need root or sudo to install python3-venv" >&2; exit 1; }
      sudo="sudo"
    fi
    echo "install-peers: installing python3-venv"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  echo "install-peers: creating $venv with $("$python" --version 2>&1)"
  "$python" -m venv "$venv"
fi
echo "install-peers: installing ${requirements[*]}"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${requirements[@]}"
# The attnbench package (python/, about two minutes to build on 2 cores): cpu_peers.py judges the
# peers with it. After changing the C++, `.venv/bin/pip install .` again.
if ! "$venv/bin/python" -c "import attnbench" 2>/dev/null; then
  echo "install-peers: installing the attnbench package (pip install .)"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check .
fi
have_all || { echo "install-peers: $venv does not hold the pinned versions after pip install" >&2; exit 1; }
echo "install-peers: done"
