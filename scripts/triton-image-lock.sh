#!/usr/bin/env bash
# Resolves deploy/triton/gpu-requirements.in for the GPU Triton image's
# Python (the Triton 24.10 image's 3.10, manylinux_2_28 x86_64) into
# deploy/triton/gpu-requirements.txt, every package with its hashes. Needs
# the package index. Run it when an input changes; the Docker build
# installs exactly the result.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$(scripts/pytools.sh)
out=deploy/triton/gpu-requirements.txt
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
"$bin/uv" pip compile deploy/triton/gpu-requirements.in --python-version 3.10 --python-platform x86_64-manylinux_2_28 \
  --generate-hashes --no-header --quiet -o "$tmp"
{ sed -n '1,/^# cannot return strings/p' "$out"; cat "$tmp"; } >"$out.new"
mv "$out.new" "$out"
echo "$out: $(grep -cE '^[a-z]' "$out") packages"
