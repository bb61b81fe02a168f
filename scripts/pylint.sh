#!/usr/bin/env bash
# The Python lint of the Triton model: ruff (ruff.toml) over model.py, its
# engines and their tests and the lab's GPU benchmark (lab/bench/gpu), and
# mypy --strict (mypy.ini) over model.py, the diarize model's, the
# engines and the lab's GPU benchmark modules. Installs the pinned tools (tools/pylint/requirements.txt)
# into .tools/pylint first, once: safe to run again and again.
set -euo pipefail
cd "$(dirname "$0")/.."

req=tools/pylint/requirements.txt
venv=.tools/pylint
stamp=$venv/installed.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ] || [ ! -x "$venv/bin/mypy" ]; then
  echo "deps: ruff and mypy into $venv"
  rm -rf "$venv"
  /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --no-deps --require-hashes --only-binary=:all: -r "$req"
  echo "$want" >"$stamp"
fi
model=deploy/triton/models/asr/1
"$venv/bin/ruff" check deploy/triton lab/bench/gpu
"$venv/bin/mypy" "$model/model.py" "$model/fleetscribe_asr"
"$venv/bin/mypy" deploy/triton/models/diarize/1/model.py
# The lab's GPU benchmark, its modules (its tests are ruff's, as the model's are).
"$venv/bin/mypy" $(ls lab/bench/gpu/*.py | grep -v '/test_')
