#!/usr/bin/env bash
# Packs, in .gpu/ (or $1), what a bare GPU machine (a driver, a python3.12
# with torch, no network) needs to run lab/bench/gpu/run.sh, read by
# lab/bench/gpu/env.sh there:
#
#   bins.tar.xz              static builds of the worker and gpubench
#   triton.tar.xz            the pinned Triton server of make deps, its
#                            Python backend and the stub for Python 3.12
#   numpy126.tar.xz          numpy 1.26 for the stub (Triton 2.51's Python
#                            backend cannot return strings with numpy 2)
#   nemosite.tar.xz          NeMo and what it needs (nemo-requirements.txt),
#                            with an empty stand-in for Hugging Face datasets
#                            (NeMo imports it; its pyarrow wants numpy 2)
#   libpython3.12.so.1.0.xz  with LIBPYTHON=1 only: a shared libpython 3.12
#                            (from nvidia-pytriton 0.5.5), for a machine that
#                            has none (the H200 machines had theirs)
#
# Needs make deps done here, Go, pip with network access, xz. About 58 MB
# (66 MB with LIBPYTHON=1).
set -euo pipefail
cd "$(dirname "$0")/../../.."
out="$(mkdir -p "${1:-.gpu}" && cd "${1:-.gpu}" && pwd)"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
pip=(python3 -m pip)
plat=(--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64
  --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64
  --platform manylinux2014_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64)

echo "carry: worker and gpubench"
CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o "$tmp/bin/" ./cmd/worker ./lab/bench/gpu/gpubench
tar -C "$tmp/bin" -cf - worker gpubench | xz -9 -T0 >"$out/bins.tar.xz"

echo "carry: Triton server"
site=$(echo .triton/venv/lib/python3*/site-packages)
ex=(); for v in 3.8 3.9 3.10 3.11 3.13; do ex+=(--exclude="*/python_backend_stubs/$v"); done
tar -C "$site" -cf - "${ex[@]}" --exclude='*libpython3-*.13.so.1.0' --exclude=__pycache__ \
  pytriton/tritonserver nvidia_pytriton.libs | xz -9 -T0 >"$out/triton.tar.xz"

echo "carry: numpy 1.26 for Python 3.12"
"${pip[@]}" download -q --no-deps "${plat[@]}" -d "$tmp/np" numpy==1.26.4
mkdir "$tmp/npx" && (cd "$tmp/npx" && python3 -m zipfile -e "$tmp"/np/numpy-*.whl . && tar -cf - . | xz -9 -T0 >"$out/numpy126.tar.xz")

echo "carry: NeMo"
mkdir -p "$tmp/nw"
while read -r req; do
  [[ -z "$req" || "$req" == \#* ]] && continue
  # Pure-Python packages published as source only are built into wheels here.
  "${pip[@]}" download -q --no-deps "${plat[@]}" -d "$tmp/nw" "$req" 2>/dev/null ||
    "${pip[@]}" wheel -q --no-deps -w "$tmp/nw" "$req"
done <lab/bench/gpu/nemo-requirements.txt
"${pip[@]}" install -q --no-deps --no-compile --target "$tmp/nemosite" "${plat[@]}" "$tmp"/nw/*.whl
mkdir -p "$tmp/nemosite/datasets"
cat >"$tmp/nemosite/datasets/__init__.py" <<'PY'
"""An empty stand-in for Hugging Face datasets, which NeMo imports for its
HF dataset loaders (never used by the benchmark): any name is a class that
cannot be made."""


class _Missing:
    def __init__(self, *args, **kwargs):
        raise ImportError("datasets is not installed here")


def __getattr__(name):
    return _Missing
PY
echo "from datasets import __getattr__  # noqa: F401" >"$tmp/nemosite/datasets/distributed.py"
(cd "$tmp/nemosite" && find . -name __pycache__ -prune -exec rm -rf {} + && tar -cf - . | xz -9 -T0 >"$out/nemosite.tar.xz")

if [[ "${LIBPYTHON:-0}" == 1 ]]; then
echo "carry: libpython 3.12"
"${pip[@]}" download -q --no-deps --only-binary=:all: --python-version 3.11 --platform manylinux_2_35_x86_64 -d "$tmp/pt" nvidia-pytriton==0.5.5
python3 - "$tmp"/pt/*.whl "$tmp/libpython3.12.so.1.0" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
name = next(n for n in z.namelist() if "libpython3" in n and ".12.so" in n)
open(sys.argv[2], "wb").write(z.read(name))
PY
xz -9 -T0 -c "$tmp/libpython3.12.so.1.0" >"$out/libpython3.12.so.1.0.xz"
fi
du -ch "$out"/* | tail -1
