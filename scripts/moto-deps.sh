#!/usr/bin/env bash
# Installs the pinned moto server (tools/moto/requirements.txt) into
# .moto/venv, a virtual environment of Debian's python3, for the tests that
# need S3 and SQS behaviour the fast emulator lacks. Does nothing when the
# installed set matches the requirements; safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

req=tools/moto/requirements.txt
venv=.moto/venv
stamp=.moto/installed.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/moto_server" ]; then
  exit 0
fi
echo "deps: moto server into $venv"
rm -rf "$venv"
/usr/bin/python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: -r "$req"
echo "$want" > "$stamp"
