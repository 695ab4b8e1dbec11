#!/usr/bin/env bash
# Installs every Debian package Kiln needs. Idempotent and fast: when everything is present
# it is one dpkg-query call; otherwise it runs `apt-get update` once and installs only what
# is missing. Nothing is downloaded from anywhere but Debian. Arguments name extra packages
# a target needs beyond these (make fuzz: clang and its libFuzzer runtime).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev
  libfmt-dev libyaml-cpp-dev nlohmann-json3-dev libcli11-dev
  libssl-dev  # SHA-256 of tokenizer files against their published digests
  libdnnl-dev
  python3 python3-numpy python3-torch
  python3-venv  # the project's pinned PyPI environment .venv (scripts/setup_venv.sh)
  libsentencepiece-dev  # tokenizer_type=sentencepiece
  libopenmpi-dev openmpi-bin  # runtime: mpirun -np R across processes and hosts (docs/sharding.md)
  iproute2  # multi-host tests: hosts as network namespaces joined by veth pairs (docs/multihost.md)
  util-linux  # prlimit: the per-process memory cap of the bigger-than-one-process test
  libpcre2-dev  # tokenizer_type=tiktoken: the split patterns (Unicode properties)
  zlib1g-dev libzstd-dev  # dataset files: JSONL.gz and JSONL.zst (src/kiln/data/sources/)
  libicu-dev  # tokenizer_type=huggingface: the NFC normalizer of Qwen2/3 tokenizer.json files
  fortunes  # the default real-text corpus of make run (docs/data.md): /usr/share/games/fortunes
  python3-protobuf protobuf-compiler  # the independent TensorBoard event-file reader (tests/reference)
  libjs-chart.js  # report.html inlines Chart.js from /usr/share/javascript/chart.js (docs/report.md)
  chromium chromium-driver  # the report page's real-browser test (tests/report, Selenium from the venv)
  patchelf  # make gpu-bundle: the bundled kiln finds its libraries through its own rpath ($ORIGIN/lib)
  "$@"
)

# One query for all packages; a package that is not installed (or unknown to dpkg) is
# missing from the "installed" list.
installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${PACKAGES[@]}" 2>/dev/null |
  awk '$2 == "installed" { print $1 }' || true)
missing=()
for p in "${PACKAGES[@]}"; do
  if ! grep -qx "$p" <<<"$installed"; then missing+=("$p"); fi
done

if [ ${#missing[@]} -eq 0 ]; then exit 0; fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y --no-install-recommends "${missing[@]}"
