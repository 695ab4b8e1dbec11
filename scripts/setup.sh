#!/usr/bin/env bash
# Installs every Debian package Kiln needs. Idempotent and fast: when everything is present
# it is one dpkg-query call; otherwise it runs `apt-get update` once and installs only what
# is missing. Nothing is downloaded from anywhere but Debian.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libdnnl-dev
  python3 python3-numpy python3-torch
  libsentencepiece-dev  # tokenizer_type=sentencepiece
  libopenmpi-dev openmpi-bin  # runtime: mpirun -np R across processes and hosts (docs/sharding.md)
  libpcre2-dev  # tokenizer_type=tiktoken: the split patterns (Unicode properties)
  fortunes  # the default real-text corpus of make run (docs/data.md): /usr/share/games/fortunes
  python3-protobuf protobuf-compiler  # the independent TensorBoard event-file reader (tests/reference)
)

# node and npm fetch the tiktoken encoder files (below) and run the tokenizer reference
# test. Only when the commands are missing: a node from another source ships its own npm,
# and Debian's npm package would conflict with it.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then PACKAGES+=(nodejs npm); fi

# tokenizer_type=tiktoken reads the encoder files (merge ranks, split pattern, special
# tokens) of the npm package tiktoken; it goes to an ignored folder, nothing is committed.
TIKTOKEN_VERSION=1.0.22
TIKTOKEN_PREFIX="$(cd "$(dirname "$0")/.." && pwd)/third_party_cache/npm"
install_tiktoken() {
  if grep -qs "\"version\": \"$TIKTOKEN_VERSION\"" "$TIKTOKEN_PREFIX/node_modules/tiktoken/package.json"; then
    return 0
  fi
  echo "setup: npm install tiktoken@$TIKTOKEN_VERSION into $TIKTOKEN_PREFIX"
  mkdir -p "$TIKTOKEN_PREFIX"
  npm install --prefix "$TIKTOKEN_PREFIX" --no-audit --no-fund --no-save --loglevel=error "tiktoken@$TIKTOKEN_VERSION"
}

# One query for all packages; a package that is not installed (or unknown to dpkg) is
# missing from the "installed" list.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null |
  awk '$2 == "installed" { print $1 }' || true)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! grep -qx "$p" <<<"$installed"; then missing+=("$p"); fi
done

if [ ${#missing[@]} -eq 0 ]; then
  install_tiktoken
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
install_tiktoken
