#!/usr/bin/env bash
# Installs every Debian package Kiln needs. Idempotent: when everything is present it only
# checks (dpkg-query) and returns in well under a second; otherwise it runs `apt-get update`
# once and installs what is missing. Nothing is downloaded from anywhere but Debian.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libdnnl-dev
  python3 python3-numpy python3-torch
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
