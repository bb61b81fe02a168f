#!/usr/bin/env bash
# Runs the MPS plan for every GPU of this host, as host processes, and
# checks it: one MPS control daemon, one MPS server, four clients per GPU,
# each a partition with its thread percentage, all serving gRPC; then a
# short load through the project's pool over every partition.
#
#   deploy/mps/gpu-check.sh [OUTDIR]
#
# Needs: nvidia-smi, nvidia-cuda-mps-control (PATH or the driver's
# folders), python3 with torch (CUDA), grpcio and protobuf, and static
# builds of the worker and gpubench in bin/ (CGO_ENABLED=0 go build -o bin/
# ./cmd/worker ./bench/gpu/gpubench). Partitions are bench/gpu/server.py,
# the PyTorch stand-in model with a dynamic batcher (no Triton needed).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="$(mkdir -p "${1:-/tmp/fleetscribe-gpu-check}" && cd "${1:-/tmp/fleetscribe-gpu-check}" && pwd)"
worker="${WORKER:-bin/worker}"; gpubench="${GPUBENCH:-bin/gpubench}"
mps="$(command -v nvidia-cuda-mps-control || true)"
for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin /usr/lib/nvidia/bin; do
  [[ -z "$mps" && -x "$d/nvidia-cuda-mps-control" ]] && mps="$d/nvidia-cuda-mps-control"
done
[[ -n "$mps" ]] || { echo "nvidia-cuda-mps-control not found" >&2; exit 1; }
pipe=/tmp/fleetscribe-mps-pipe; logdir=/tmp/fleetscribe-mps-log
mkdir -p "$pipe" "$logdir"
plan=(-gpus auto -per-gpu "${PER_GPU:-4}" -base-port "${BASE_PORT:-9001}" -pipe-dir "$pipe" -log-dir "$logdir")

echo "== GPUs"; nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$out/gpus.txt"
echo "== plan"; "$worker" mps plan "${plan[@]}" | tee "$out/plan.txt"
addrs=$("$worker" mps plan "${plan[@]}" -format addrs)

echo "== worker mps run (daemon + one server.py per partition)"
"$worker" mps run "${plan[@]}" -mps-control "$mps" -check-interval 2s -- \
  python3 bench/gpu/server.py --port '{grpc_port}' --warmup-seconds 3 --ragged >"$out/run.log" 2>&1 &
runner=$!
trap 'kill -TERM $runner 2>/dev/null; wait $runner 2>/dev/null || true' EXIT

ok=""
for i in $(seq 1 90); do
  if "$worker" mps status "${plan[@]}" -mps-control "$mps" -partitions >"$out/status.txt" 2>&1; then ok=1; break; fi
  kill -0 $runner 2>/dev/null || { echo "mps run exited" >&2; cat "$out/run.log" >&2; exit 1; }
  sleep 2
done
echo "== worker mps status -partitions"; cat "$out/status.txt"
[[ -n "$ok" ]] || { echo "the plan did not come up" >&2; tail -50 "$out/run.log" >&2; exit 1; }
"$worker" mps status "${plan[@]}" -mps-control "$mps" -format json >"$out/status.json"
echo "== each partition's view (CUDA_VISIBLE_DEVICES, CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, SMs)"
grep -h '"msg": "serving"' "$out/run.log" | sed 's/^\(gpu[0-9]*-p[0-9]*\) | .*"cuda_visible_devices": "\([^"]*\)", "thread_percentage": "\([^"]*\)", "sms": \([0-9]*\).*/\1 gpu=\2 pct=\3 sms=\4/' | sort | tee "$out/partitions.txt"

echo "== load through the pool over every partition (20 s, 45 s clips, concurrency 64)"
"$gpubench" sweep -addrs "$addrs" -concurrency 64 -clip-seconds 45 -duration 20s -warmup 5s \
  -config "plan-$(wc -l <"$out/gpus.txt")gpu" -out "$out/load.csv" 2>&1 | tee "$out/load.txt"

echo "== stop"
kill -TERM $runner; wait $runner || true; trap - EXIT
if echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$pipe" "$mps" >/dev/null 2>&1; then
  echo "the MPS daemon still answers after stop" >&2; exit 1
fi
echo "daemon stopped; partitions stopped"
