#!/usr/bin/env bash
# Runs the worker's default MPS plan on every GPU of this host, as host
# processes, and checks it: one MPS control daemon, one MPS server per GPU
# with the planned clients, each partition a real Triton Inference Server
# serving the shipped model.py with the GPU benchmark's stand-in model
# (lab/bench/gpu/standin.py, CUDA-graph decoding), all ready over gRPC; then a
# load of 45-s clips through the project's pool over every partition; then
# the stop, which must leave no daemon.
#
#   deploy/mps/gpu-check.sh [OUTDIR]
#
# Needs what lab/bench/gpu/run.sh needs (nvidia-smi, nvidia-cuda-mps-control,
# the pinned Triton server and a Python environment for it with torch and
# numpy 1.x, static builds of the worker and gpubench), or, on a bare GPU
# machine, the folder of lab/bench/gpu/carry.sh (CARRY, default .gpu).
# PER_GPU and PERCENTAGE override the plan's defaults; CONC and DUR the load.
# CHART_DIR, a folder that `deploy/helm/gpu-rehearsal.sh render` wrote, runs
# the Helm chart's rendered Triton container instead (its command, with this
# host's paths for the pod's) and loads the rendered worker's addresses.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out="$(mkdir -p "${1:-/tmp/fleetscribe-gpu-check}" && cd "${1:-/tmp/fleetscribe-gpu-check}" && pwd)"
py="${PYTHON:-python3}"
carry="${CARRY:-$root/.gpu}"
work="${WORKDIR:-/tmp/fleetscribe-gpu}"
worker="${WORKER:-bin/worker}"; bench="${GPUBENCH:-bin/gpubench}"
log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/check.log"; }
# shellcheck source=lab/bench/gpu/env.sh
source lab/bench/gpu/env.sh
prepare_carried

mps="$(command -v nvidia-cuda-mps-control || true)"
for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin /usr/lib/nvidia/bin; do
  [[ -z "$mps" && -x "$d/nvidia-cuda-mps-control" ]] && mps="$d/nvidia-cuda-mps-control"
done
[[ -n "$mps" ]] || { echo "nvidia-cuda-mps-control not found" >&2; exit 1; }
pipe=/tmp/fleetscribe-mps-pipe; logdir=/tmp/fleetscribe-mps-log
mkdir -p "$pipe" "$logdir"
echo "== GPUs"; nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$out/gpus.txt"
"$bench" repo -dir "$out/repo" -model-dir deploy/triton/models/asr/1 \
  -engine lab/bench/gpu/standin.py
if [[ -n "${CHART_DIR:-}" ]]; then
  mapfile -t argv <"$CHART_DIR/command.txt"
  for i in "${!argv[@]}"; do
    case "${argv[$i]}" in
      /fleetscribe/bin/worker) argv[$i]="$worker" ;;
      tritonserver) argv[$i]="$root/scripts/tritonserver" ;;
      --model-repository=/models) argv[$i]="--model-repository=$out/repo" ;;
      -pipe-dir=*) argv[$i]="-pipe-dir=$pipe" ;;
      -log-dir=*) argv[$i]="-log-dir=$logdir" ;;
    esac
  done
  # The container finds the daemon on its PATH.
  PATH="$PATH:$(dirname "$mps")"
  plan=(); for a in "${argv[@]}"; do [[ $a == -- ]] && break; [[ $a == -gpus=* || $a == -per-gpu=* || $a == -percentage=* || $a == -base-port=* || $a == -pipe-dir=* || $a == -log-dir=* ]] && plan+=("$a"); done
  addrs=$(cat "$CHART_DIR/addrs.txt")
  arrangement="chart-$(cat "$CHART_DIR/gpus.txt")gpu"
  echo "== the chart's triton container"
else
  plan=(-gpus auto -base-port "${BASE_PORT:-9001}" -pipe-dir "$pipe" -log-dir "$logdir")
  [[ -n "${PER_GPU:-}" ]] && plan+=(-per-gpu "$PER_GPU")
  [[ -n "${PERCENTAGE:-}" ]] && plan+=(-percentage "$PERCENTAGE")
  addrs=$("$worker" mps plan "${plan[@]}" -format addrs)
  argv=("$worker" mps run "${plan[@]}" -mps-control "$mps" -check-interval 2s -- \
    "$root/scripts/tritonserver" --model-repository="$out/repo" --grpc-address=127.0.0.1 --http-address=127.0.0.1 \
    '--grpc-port={grpc_port}' '--http-port={http_port}' '--metrics-port={metrics_port}' --allow-gpu-metrics=false \
    --exit-timeout-secs=5)
  arrangement="default-$(wc -l <"$out/gpus.txt")gpu"
  echo "== worker mps run (daemon + one tritonserver per partition)"
fi
echo "== plan"; "$worker" mps plan "${plan[@]}" | tee "$out/plan.txt"
echo "${argv[*]}" >"$out/command.txt"
"${argv[@]}" >"$out/run.log" 2>&1 &
runner=$!
trap 'kill -TERM $runner 2>/dev/null; wait $runner 2>/dev/null || true' EXIT

ok=""
for _ in $(seq 1 150); do
  if "$worker" mps status "${plan[@]}" -mps-control "$mps" -partitions >"$out/status.txt" 2>&1; then ok=1; break; fi
  kill -0 $runner 2>/dev/null || { echo "mps run exited" >&2; tail -50 "$out/run.log" >&2; exit 1; }
  sleep 2
done
echo "== worker mps status -partitions"; cat "$out/status.txt"
[[ -n "$ok" ]] || { echo "the plan did not come up" >&2; tail -50 "$out/run.log" >&2; exit 1; }
"$worker" mps status "${plan[@]}" -mps-control "$mps" -format json >"$out/status.json"

echo "== load through the pool over every partition (45-s clips)"
"$bench" sweep -addrs "$addrs" -concurrency "${CONC:-64,128}" -clip-seconds 45 -duration "${DUR:-8s}" -warmup 3s \
  -arrangement "$arrangement" -out "$out/load.csv" 2>&1 | tee "$out/load.txt"

echo "== stop"
kill -TERM $runner; wait $runner || true; trap - EXIT
if echo get_server_list | CUDA_MPS_PIPE_DIRECTORY="$pipe" "$mps" >/dev/null 2>&1; then
  echo "the MPS daemon still answers after stop" >&2; exit 1
fi
echo "daemon stopped; partitions stopped"
echo "RESULT partitions=$(tr ',' '\n' <<<"$addrs" | wc -l) ready=$(grep -c ' ready$' "$out/status.txt") gpus=$(grep -cE '^[0-9]+ +[0-9]+ +[0-9]+' "$out/status.txt") load_rows=$(($(wc -l <"$out/load.csv") - 1))"
