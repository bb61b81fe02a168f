#!/usr/bin/env bash
# Installs a lab tool's pinned Python packages (a requirements file with
# hashes) into a virtual environment of Debian's python3 under .lab/NAME;
# does nothing when the installed set matches the file. Safe to run again
# and again. Usage: scripts/labvenv.sh NAME REQUIREMENTS
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 req=$2
venv=.lab/$name
stamp=$venv/installed.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
echo "deps: $req into $venv"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: -r "$req"
echo "$want" >"$stamp"
