#!/usr/bin/env bash
# Can an MPS client raise the limits its server was given? The NVIDIA device
# plugin's MPS sharing starts one daemon per node and sets each GPU's
# default active thread percentage to 100/replicas and its pinned memory to
# 1/replicas; this asks what a client (a Triton partition) then gets when
# its own environment asks for more or less. On a GPU host with torch:
#
#   bash lab/bench/gpu/mps-client-limits.sh [PERCENT [MEMORY]]   (default 12 17G:
#                                                            8 replicas of an H200)
set -uo pipefail
pct="${1:-12}"; mem="${2:-17G}"
ctl="$(command -v nvidia-cuda-mps-control || echo /usr/local/nvidia/bin/nvidia-cuda-mps-control)"
py="${PYTHON:-python3}"
export CUDA_MPS_PIPE_DIRECTORY="${TMPDIR:-/tmp}/mps-limits-pipe" CUDA_MPS_LOG_DIRECTORY="${TMPDIR:-/tmp}/mps-limits-log"
mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
"$ctl" -d || exit 1
trap 'echo quit | "$ctl"' EXIT
sleep 1
# As the plugin does: defaults first, before any client starts a server.
echo "set_default_active_thread_percentage $pct" | "$ctl" >/dev/null
echo "set_default_device_pinned_mem_limit 0 $mem" | "$ctl" >/dev/null
sms() { "$py" -c 'import torch; print(torch.cuda.get_device_properties(0).multi_processor_count)' 2>&1 | tail -1; }
alloc() { "$py" -c 'import torch; torch.empty(int(20e9), dtype=torch.uint8, device="cuda"); print("ok")' >/dev/null 2>&1 && echo allowed || echo refused; }
line="RESULT default_pct=$pct sms_unset=$(sms)"
for p in 6 25 50 100; do line+=" sms_env$p=$(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=$p sms)"; done
line+=" alloc20g_unset=$(alloc) alloc20g_env30g=$(CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=30G alloc)"
echo "$line"
