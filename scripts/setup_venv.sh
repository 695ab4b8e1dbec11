#!/usr/bin/env bash
# Creates the project's Python environment, .venv/ at the repository root, and installs a
# pinned requirements file into it (python/requirements.txt unless another is named):
#
#   scripts/setup_venv.sh                      # python/requirements.txt
#   scripts/setup_venv.sh python/OTHER.txt     # another pinned set, on top of the same venv
#
# The venv isolates the project's packages from the system Python's (Debian's python3
# never gets pip packages). Its interpreter is $KILN_PYTHON if set, else `python3` on PATH;
# on Debian, `python3 -m venv` needs the python3-venv package.
#
# Idempotent and fast when already satisfied: each requirements file's sha256 is stored
# in .venv/.kiln-<file name without .txt>.sha256 once pip has installed it, and pip is
# skipped while the file still matches.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${KILN_PYTHON:-python3}"

req="${1:-python/requirements.txt}"
[[ "$req" = /* ]] || req="$root/$req"
if [[ ! -f "$req" ]]; then
  echo "setup: no requirements file $req" >&2
  exit 1
fi
name="$(basename "$req")"
stamp="$venv/.kiln-${name%.txt}.sha256"
want="$(sha256sum "$req" | cut -d' ' -f1)"

# A venv counts as there when its interpreter runs and it has pip; anything else (none
# yet, a half-made one from a failed `-m venv`, one whose base interpreter is gone) is
# made anew.
if ! { [[ -x "$venv/bin/pip" ]] && "$venv/bin/python" -c '' 2>/dev/null; }; then
  rm -rf "$venv"
  if ! "$python" -m venv "$venv" >/dev/null 2>&1 || [[ ! -x "$venv/bin/pip" ]]; then
    rm -rf "$venv"
    echo "setup: '$python -m venv' failed: on Debian install the python3-venv package" \
      "(apt-get install python3-venv), or point KILN_PYTHON at a Python 3.11+ with venv" >&2
    exit 1
  fi
fi

if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
  rm -f "$stamp"
  "$venv/bin/python" -m pip install --disable-pip-version-check --no-input -q -r "$req"
  echo "$want" > "$stamp.tmp"
  mv "$stamp.tmp" "$stamp"
fi

shopt -s nullglob
dists=("$venv"/lib/python3*/site-packages/*.dist-info)
echo "setup: python venv .venv ready ($("$venv/bin/python" -c \
  'import sys; print("%d.%d.%d" % sys.version_info[:3])'), ${#dists[@]} packages, $name)"
