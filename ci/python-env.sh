#!/usr/bin/env bash
# The tests' Python dependencies (python/requirements-test.txt) in a virtual environment outside
# the checkout, reused across runs and clones:
#
#   ${ATTN_PYENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnbench}/venv-HASH
#
# HASH: the first 12 hex digits of the sha256 of the requirements file and the Python version,
# so an edited requirements file or another Python gets a venv of its own. A venv is reused only
# when complete: its marker (.attnbench-complete) is written after pip installed every
# requirement and `import torch, jax, numpy, nanobind, pytest` worked. One without it (an install
# that failed or was cut short) is removed and made again. Concurrent runs on one directory wait
# for each other (flock). Measured on a 2-core machine: 140 s from an empty directory (about 6 GB,
# most of it PyTorch's CUDA libraries, downloaded: pip's cache was empty), 0.1 s when reused.
#
# Prints the venv's path as the last line of stdout; every message goes to stderr. Exits non-zero
# when the venv cannot be made (no network, pip failing), naming the step.
#
#   venv=$(bash ci/python-env.sh) && "$venv/bin/python" ...
#
# PYTHON names the base interpreter (default python3). Where its venv module cannot bootstrap pip
# (Debian's python3 without python3-venv), python3-venv is installed with apt, as
# ci/install-peers.sh does.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
requirements=$root/python/requirements-test.txt
python=${PYTHON:-python3}
log() { echo "python-env: $*" >&2; }

[ -f "$requirements" ] || { log "no $requirements"; exit 1; }
version=$("$python" -c 'import platform; print(platform.python_version())') ||
  { log "cannot run $python"; exit 1; }
hash=$({ cat "$requirements"; printf 'python %s\n' "$version"; } | sha256sum | cut -c1-12)
base=${ATTN_PYENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnbench}
venv=$base/venv-$hash
marker=$venv/.attnbench-complete
mkdir -p "$base"

complete() { [ -f "$marker" ] && "$venv/bin/python" -c '' 2>/dev/null; }

# One installer at a time per venv; a second run waits, then finds it complete.
if command -v flock >/dev/null; then
  exec 9>"$venv.lock"
  if ! flock -n 9; then
    log "waiting for another run installing $venv"
    flock 9
  fi
fi

if complete; then
  log "reusing $venv (Python $version; complete since $(cat "$marker"))"
  echo "$venv"
  exit 0
fi

{
  if [ -e "$venv" ]; then
    log "$venv is incomplete (no marker: an earlier install failed or was cut short): making it again"
    rm -rf "$venv"
  fi
  # Debian's python3 ships venv's pip bootstrap (ensurepip) in a separate package.
  if ! "$python" -c "import venv, ensurepip" 2>/dev/null && command -v apt-get >/dev/null; then
    sudo=""
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null || { log "need root or sudo to install python3-venv"; exit 1; }
      sudo="sudo"
    fi
    log "installing python3-venv (ensurepip is missing)"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -qq
    $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
  fi
  log "creating $venv with Python $version"
  "$python" -m venv "$venv" || { log "python -m venv failed"; rm -rf "$venv"; exit 1; }
  log "installing $requirements (PyTorch and its CUDA libraries: a few GB on the first run)"
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-input -r "$requirements"; then
    log "pip install -r $requirements failed: $venv left incomplete (no marker)"
    exit 1
  fi
  if ! "$venv/bin/python" -c "import torch, jax, numpy, nanobind, pytest"; then
    log "the installed packages do not import: $venv left incomplete (no marker)"
    exit 1
  fi
  "$venv/bin/python" -m pip freeze --disable-pip-version-check >"$venv/requirements-installed.txt"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$marker"
  log "done: $venv"
} >&2

echo "$venv"
