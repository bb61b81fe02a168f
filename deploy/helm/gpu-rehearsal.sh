#!/usr/bin/env bash
# The chart's Triton container, on a real GPU: what the `mps` sharing mode
# runs in a pod (the pod's own MPS daemon and every partition of the plan,
# through `worker mps run`), started from the rendered chart's command on
# this host's GPUs, with the stand-in model of the GPU benchmark in place of
# /models; then the MPS servers and clients against the plan, each
# partition's readiness, and a load of 45-s clips through the project's
# pool at the addresses the rendered worker dials.
#
#   deploy/helm/gpu-rehearsal.sh render DIR [PLAN]   where helm is: render the chart
#                                                    (default plan gpus1-mps) and keep
#                                                    the Triton command and the worker's
#                                                    addresses in DIR
#   deploy/helm/gpu-rehearsal.sh run DIR [OUTDIR]    on the GPU host (what
#                                                    deploy/mps/gpu-check.sh needs)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
step=$1 dir=$2
case "$step" in
render)
  plan=${3:-deploy/helm/fleetscribe/plans/gpus1-mps.yaml}
  mkdir -p "$dir"
  helm=${FLEETSCRIBE_HELM:-$(go env GOPATH)/bin/helm}
  "$helm" template fs deploy/helm/fleetscribe --kube-version 1.29.0 -f deploy/helm/testdata/values.yaml -f "$plan" \
    --show-only templates/deployment.yaml >"$dir/deployment.yaml"
  # The triton container's command, one argument a line, and the worker's
  # FLEETSCRIBE_TRITON_ADDRS.
  awk '/- name: triton$/ {t=1} t && /command:/ {c=1; next} c && /^ *- / {sub(/^ *- /, ""); gsub(/"/, ""); print; next} c {exit}' \
    "$dir/deployment.yaml" >"$dir/command.txt"
  sed -n 's/.*name: FLEETSCRIBE_TRITON_ADDRS, value: "\([^"]*\)".*/\1/p' "$dir/deployment.yaml" >"$dir/addrs.txt"
  sed -n 's/.*name: FLEETSCRIBE_GPUS, value: "\([^"]*\)".*/\1/p' "$dir/deployment.yaml" >"$dir/gpus.txt"
  [[ -s "$dir/command.txt" && -s "$dir/addrs.txt" ]] || { echo "no triton command or addresses rendered" >&2; exit 1; }
  echo "rendered $(wc -l <"$dir/command.txt") arguments, $(tr ',' '\n' <"$dir/addrs.txt" | wc -l) addresses"
  ;;
run)
  out="$(mkdir -p "${3:-/tmp/fleetscribe-chart-gpu}" && cd "${3:-/tmp/fleetscribe-chart-gpu}" && pwd)"
  py="${PYTHON:-python3}"; carry="${CARRY:-$root/.gpu}"; work="${WORKDIR:-/tmp/fleetscribe-gpu}"
  worker="${WORKER:-bin/worker}"; bench="${GPUBENCH:-bin/gpubench}"
  log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/rehearsal.log"; }
  # shellcheck source=bench/gpu/env.sh
  source bench/gpu/env.sh
  prepare_carried
  for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin; do [[ -x "$d/nvidia-cuda-mps-control" ]] && PATH="$PATH:$d"; done
  command -v nvidia-cuda-mps-control >/dev/null || { echo "nvidia-cuda-mps-control not found" >&2; exit 1; }
  "$bench" repo -dir "$out/repo" -model-config deploy/triton/models/asr/config.pbtxt -model-dir deploy/triton/models/asr/1 \
    -engine bench/gpu/standin.py
  mkdir -p "$out/mps-pipe" "$out/mps-log"
  # The rendered command, with this host's paths for the pod's.
  mapfile -t argv <"$dir/command.txt"
  for i in "${!argv[@]}"; do
    case "${argv[$i]}" in
      /fleetscribe/bin/worker) argv[$i]="$worker" ;;
      tritonserver) argv[$i]="$root/scripts/tritonserver" ;;
      --model-repository=/models) argv[$i]="--model-repository=$out/repo" ;;
      -pipe-dir=/run/mps-pipe) argv[$i]="-pipe-dir=$out/mps-pipe" ;;
      -log-dir=/run/mps-log) argv[$i]="-log-dir=$out/mps-log" ;;
    esac
  done
  log "the chart's triton container: ${argv[*]}"
  "${argv[@]}" >"$out/run.log" 2>&1 &
  runner=$!
  trap 'kill -TERM $runner 2>/dev/null; wait $runner 2>/dev/null || true' EXIT
  # The plan flags of the command, for status.
  plan=(); for a in "${argv[@]}"; do [[ $a == -- ]] && break; [[ $a == -gpus=* || $a == -per-gpu=* || $a == -percentage=* || $a == -base-port=* || $a == -pipe-dir=* || $a == -log-dir=* ]] && plan+=("$a"); done
  ok=""
  for _ in $(seq 1 150); do
    if "$worker" mps status "${plan[@]}" -partitions >"$out/status.txt" 2>&1; then ok=1; break; fi
    kill -0 $runner 2>/dev/null || { tail -50 "$out/run.log" >&2; exit 1; }
    sleep 2
  done
  cat "$out/status.txt"
  [[ -n "$ok" ]] || { echo "the rendered plan did not come up" >&2; tail -50 "$out/run.log" >&2; exit 1; }
  addrs=$(cat "$dir/addrs.txt")
  log "load through the pool at the rendered worker's FLEETSCRIBE_TRITON_ADDRS"
  "$bench" sweep -addrs "$addrs" -concurrency "${CONC:-64,128}" -clip-seconds 45 -duration "${DUR:-8s}" -warmup 3s \
    -arrangement "chart-$(cat "$dir/gpus.txt")gpu" -out "$out/load.csv" 2>&1 | tee "$out/load.txt"
  kill -TERM $runner; wait $runner || true; trap - EXIT
  clients=$(grep -cE '^[0-9]+ +[0-9]+ +[0-9]+' "$out/status.txt" || true)
  echo "RESULT partitions=$(tr ',' '\n' <"$dir/addrs.txt" | wc -l) ready=$(grep -c ' ready$' "$out/status.txt") gpus_with_clients=$clients load_rows=$(($(wc -l <"$out/load.csv") - 1))"
  ;;
*) echo "usage: $0 render|run DIR" >&2; exit 2 ;;
esac
