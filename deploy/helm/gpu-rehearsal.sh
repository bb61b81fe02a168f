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
#   deploy/helm/gpu-rehearsal.sh run DIR [OUTDIR]    on the GPU host: deploy/mps/gpu-check.sh
#                                                    with CHART_DIR=DIR (what it needs)
set -euo pipefail
cd "$(dirname "$0")/../.."
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
  # deploy/mps/gpu-check.sh with the rendered container in place of its
  # own plan: the same checks, load and stop.
  CHART_DIR="$(cd "$dir" && pwd)" exec deploy/mps/gpu-check.sh "${3:-/tmp/fleetscribe-chart-gpu}"
  ;;
*) echo "usage: $0 render|run DIR" >&2; exit 2 ;;
esac
