#!/usr/bin/env bash
# Creates the virtualenv and installs the pinned dependencies plus the dev tools.
set -euo pipefail
python=${1:-python3}
venv=${2:-.venv}
if ! "$python" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "icegroup needs Python 3.11 (found $("$python" --version 2>&1)); set PYTHON=python3.11" >&2
  exit 1
fi
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install -q --upgrade pip
"$venv/bin/python" -m pip install -q -e '.[dev]'
