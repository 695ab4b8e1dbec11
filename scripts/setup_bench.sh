#!/usr/bin/env bash
# Extra Debian packages for `make bench` only: the OpenMP build of OpenBLAS, so the PyTorch
# side of the comparisons (Debian's python3-torch) runs on a real BLAS instead of the
# reference one (which is about 100x slower and would make every ratio meaningless).
# Idempotent and fast when present, like setup.sh.
set -euo pipefail
PACKAGES=(libopenblas0-openmp libtcmalloc-minimal4)  # tcmalloc: the allocator bench/peers.py gives the Python peers
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then missing+=("$p"); fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup_bench: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
