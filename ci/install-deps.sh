#!/usr/bin/env bash
# Installs the Debian packages attnbench builds against. Idempotent: when every package is
# already present it touches nothing (no apt-get update, no root needed).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libbenchmark-dev      # Google Benchmark
  libbenchmark-tools python3-scipy  # its compare.py (and what compare.py imports): bench-smoke loads our JSON in it
  libgtest-dev          # GoogleTest (unit tests)
  librapidcheck-dev     # RapidCheck (property tests)
  libboost-dev          # Boost.Multiprecision (header-only) for the reference
  libeigen3-dev         # Eigen (the SGEMM peak probe of the benchmarks)
  libcli11-dev          # CLI11 (the attnbench command line)
  nlohmann-json3-dev    # JSON results and problem serialisation
  libfmt-dev            # formatting
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
