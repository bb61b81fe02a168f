#!/usr/bin/env bash
# Installs the pinned real Triton Inference Server and its Python backend's
# environment (deploy/triton/requirements.txt) into .triton/venv, a virtual
# environment of Debian's python3 (the Python backend stub links that
# Python's libpython3.11). Does nothing when the installed set matches the
# requirements; safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

req=deploy/triton/requirements.txt
venv=.triton/venv
stamp=.triton/installed.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && [ -x "$venv/bin/python" ]; then
  exit 0
fi
py=/usr/bin/python3
ver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
echo "deps: real Triton (nvidia-pytriton) and its Python backend environment into $venv (python $ver)"
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: -r "$req"
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
server="$site/pytriton/tritonserver"
stub="$server/python_backend_stubs/$ver/triton_python_backend_stub"
if [ ! -x "$stub" ]; then
  echo "deps: the Triton wheel has no Python backend stub for Python $ver" >&2
  exit 1
fi
# The Python backend looks for its stub beside itself; the stub's library
# path is relative to where it lies, the same depth in both places.
cp "$stub" "$server/backends/python/triton_python_backend_stub"
echo "$want" > "$stamp"
