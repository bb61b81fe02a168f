#!/usr/bin/env bash
# GPU benchmark: run the configurations named on the command line on this
# host's GPU 0, appending to OUTDIR/results.csv (see docs/benchmarks.md).
#
#   bench/gpu/run.sh OUTDIR launch offline timesliced-4 mps12-8 mps25-4 mps100-4 mps25-8 mix single
#
# Needs python3 with torch (CUDA), grpcio and protobuf, nvidia-smi, the
# gpubench binary (GPUBENCH, default bin/gpubench) and, for the mps*
# configurations, nvidia-cuda-mps-control (found on PATH or in the driver's
# folders). DUR and WARM set each point's measured and warm-up time.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"; shift
bench="${GPUBENCH:-$here/../../bin/gpubench}"
py="${PYTHON:-python3}"
dur="${DUR:-10s}"; warm="${WARM:-3s}"
server_args="${SERVER_ARGS:-}"
stats="$(mktemp -d)"
pipe=/tmp/fleetscribe-mps-pipe; mpslog=/tmp/fleetscribe-mps-log
mpsbin="$(command -v nvidia-cuda-mps-control || true)"
for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin /usr/lib/nvidia/bin; do
  [[ -z "$mpsbin" && -x "$d/nvidia-cuda-mps-control" ]] && mpsbin="$d/nvidia-cuda-mps-control"
done
pids=()

log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/run.log"; }

start_servers() { # count percentage(0: no MPS) extra-args...
  local n=$1 pct=$2; shift 2
  rm -f "$stats"/*.json
  for ((i = 0; i < n; i++)); do
    (
      if ((pct > 0)); then eval "$("$bench" mps env -gpu 0 -index "$i" -pct "$pct" -pipe "$pipe" -log "$mpslog")"; else export CUDA_VISIBLE_DEVICES=0; fi
      exec "$py" "$here/server.py" --port $((9100 + i)) --stats-file "$stats/stats-$i.json" $server_args "$@"
    ) >>"$out/servers.log" 2>&1 &
    pids+=($!)
  done
  addrs=$(seq -s, -f "127.0.0.1:%g" 9100 $((9100 + n - 1)))
}

stop_servers() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  pids=()
}

mps_on() {
  [[ -n "$mpsbin" ]] || { log "nvidia-cuda-mps-control not found"; return 1; }
  mkdir -p "$pipe" "$mpslog"
  "$bench" mps start -bin "$mpsbin" -pipe "$pipe" -log "$mpslog"
}
mps_off() { [[ -n "$mpsbin" ]] && "$bench" mps stop -bin "$mpsbin" -pipe "$pipe" -log "$mpslog" 2>/dev/null || true; }
mps_status() { "$bench" mps status -bin "$mpsbin" -pipe "$pipe" -log "$mpslog" | tee -a "$out/run.log" || true; }

sweep() { # config concurrencies
  log "sweep $1 over $2"
  "$bench" sweep -addrs "$addrs" -config "$1" -concurrency "$2" -duration "$dur" -warmup "$warm" \
    -stats "$stats/*.json" -out "$out/results.csv" | tee -a "$out/run.log"
}

trap 'stop_servers; mps_off' EXIT
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee -a "$out/run.log" || true

for c in "$@"; do
  case "$c" in
    offline) log "offline reference"; "$py" "$here/offline.py" --out "$out/offline.json" 2>&1 | tee -a "$out/run.log" ;;
    launch) log "launch overhead"; "$py" "$here/launch_overhead.py" "$out/launch.json" 2>&1 | grep -v -e Warning -e _VF | tee -a "$out/run.log" ;;
    single) start_servers 1 0 --ragged; sweep single 1,2,3,4,8,32; stop_servers ;;
    timesliced-4) start_servers 4 0 --ragged; sweep timesliced-4 4,8,12,16,32,128; stop_servers ;;
    mps*-*)
      pct="${c#mps}"; pct="${pct%-*}"; n="${c##*-}"
      mps_on; start_servers "$n" "$pct" --ragged
      sweep "$c" "$n,$((2 * n)),$((3 * n)),$((4 * n)),$((8 * n)),$((32 * n))"
      mps_status; stop_servers; mps_off ;;
    mix)
      mps_on
      start_servers 4 25 --ragged
      log "mix, batching (ragged)"
      "$bench" mix -addrs "$addrs" -config mix-batched -concurrency 8,32 -duration "$dur" -warmup "$warm" \
        -stats "$stats/*.json" -out "$out/results.csv" | tee -a "$out/run.log"
      stop_servers
      start_servers 4 25
      log "mix, no batching mode (chunks at their own length, batcher without ragged batching)"
      "$bench" mix -addrs "$addrs" -config mix-unbatched -concurrency 8,32 -duration "$dur" -warmup "$warm" \
        -stats "$stats/*.json" -out "$out/results.csv" | tee -a "$out/run.log"
      stop_servers; mps_off ;;
    *) log "unknown configuration $c"; exit 2 ;;
  esac
done
log "done"
