#!/usr/bin/env bash
# GPU benchmark on this host's GPUs: real Triton Inference Server serving the
# shipped model.py, partitions started by `worker mps run`, load from the
# project's triton.Pool (lab/bench/gpu/gpubench). Results go to OUTDIR
# (docs/benchmarks/ for the committed run; see docs/benchmarks.md).
#
#   lab/bench/gpu/run.sh OUTDIR STEP...
#
# Steps, run in order:
#   check            GPU, Python with torch, the Python backend's stub and its
#                    libpython, MPS control, /dev/shm (prints, fails on none)
#   test             the stand-in's decoder tests, CUDA-graph replay against eager;
#                    the compiled encoder's tests (static shapes, regional
#                    compilation, CUDA graphs) on the tiny stand-in
#   offline          one process, no server, batch 1-256 -> OUTDIR/offline.json
#   anchor           real NeMo, Parakeet-TDT-shaped, random weights: transcribe()
#                    at batch 1-128 with and without CUDA graphs -> OUTDIR/nemo.json,
#                    and the model as $NEMO_MODEL for the nemo step
#   clips:A,B,...    45-s clips over arrangements (single, instances-N,
#                    timesliced-N, mpsP-N; /eager; /KEY=VALUE a model
#                    parameter; /study.KEY=VALUE a study knob of the
#                    encoder, FLEETSCRIBE_ENCODER_STUDY: /study.graphs=on)
#                    -> OUTDIR/results.csv
#   mix:A,B,...      the realistic length mix, chunked as the worker does
#   nemo:A,B,...     like clips, with the shipped engine (NeMo) serving $NEMO_MODEL
#                    (/phrase_boosting=on/vocabulary: a 1,000-phrase vocabulary,
#                    VOCAB_PHRASES, on every request)
#   nemomix:A,B,...  the length mix with the shipped engine serving $NEMO_MODEL
#   study            the compiled encoder against eager offline, NeMo's model
#                    (encoder_study.py; STUDY_BATCHES, STUDY_ARGS) -> OUTDIR/encoder-nemo.json
#   study-standin    the same for the stand-in -> OUTDIR/encoder-standin.json
#   profile          where the encoder's GPU time goes, eager and each way of
#                    compiling it (encoder_profile.py; PROFILE_ARGS) -> OUTDIR/profile-nemo.json
#   sfprofile        where a served Sortformer step's GPU time goes (the diarize
#                    engine, a batch of filled streams; sortformer_profile.py,
#                    SFPROFILE_ARGS) -> OUTDIR/sortformer-profile.json
#   model            builds the NeMo model the nemo steps serve, if missing
#   sftest           the tests that need NeMo: the GPU diarizer's
#                    (test_sortformer.py: NeMo's Sortformer built tiny, its
#                    compiled encoder on the GPU) and the parakeet engine's
#                    word confidence and phrase boosting (test_parakeet_options.py)
#   sortformer:A,..  with the shipped engine serving $NEMO_MODEL and the diarize
#                    model serving $SORTFORMER_MODEL (NeMo's Sortformer-shaped,
#                    random weights, built if missing): 45-s clips, each point
#                    with diarization off, on (every clip) and alone, side by side;
#                    an arrangement's /diar.KEY=VALUE suffixes are the diarize
#                    model's parameters over DIAR_PARAMS ("+" for a comma:
#                    mps50-8/maxbatch16/diar.batch_buckets=1+2+4+8+16)
#   sortformermix:A  the same on the length mix (chunks of 30 s)
#   vocabcost:A      what word confidence and phrase boosting cost: 45-s clips
#                    with the shipped engine, arrangement A as shipped, with
#                    word_confidence=max_prob, and with phrase_boosting=on and
#                    a 1,000-phrase vocabulary on every request (VOCAB_PHRASES)
#   confcost:A       what word confidence alone costs: 45-s clips with the shipped
#                    engine, arrangement A as shipped and with
#                    word_confidence=max_prob, side by side
#   vocabhost        what a request's vocabulary costs this host before the GPU
#                    starts (vocabulary_host.py: first seen against seen before)
#   coldcache        empties the compile cache: the next arrangement starts cold
#
# The encoder runs compiled (model.py's default; /eagerenc: eagerly), its
# artefacts in one cache that every step and partition shares,
# $FLEETSCRIBE_COMPILE_CACHE (default WORKDIR/compile-cache): the first to
# need a shape compiles it, the rest load it.
#
# Needs: nvidia-smi; python3 with torch (CUDA); the pinned Triton server
# (make deps, or FLEETSCRIBE_TRITONSERVER); a Python environment for its
# Python backend with torch and numpy 1.x (FLEETSCRIBE_TRITON_VENV; Triton
# 2.51's stub cannot return strings with numpy 2); nvidia-cuda-mps-control
# for mps arrangements; bin/gpubench and bin/worker (GPUBENCH, WORKER), built
# where Go is: CGO_ENABLED=0 go build -o bin/ ./lab/bench/gpu/gpubench ./cmd/worker.
#
# On a machine with none of that but the GPU, torch and the files of
# prepare_carried below (a folder CARRY, default .gpu), the step check
# unpacks them first.
#
# DUR and WARM set each point's measured and warm-up time; CONC and MIX_CONC
# the concurrencies; MIX_SPLIT=quietest chunks the mix by the rule before
# the worker cut at the last pause (gpubench -split, workload mix-quietest);
# GPUS the plan's GPUs; INSTANCE_KIND=KIND_CPU checks the steps on a host
# without GPUs (with a fake nvidia-smi, and PARAMS=size=tiny:
# PARAMS are further model parameters, key=value,...).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
out="$(mkdir -p "$1" && cd "$1" && pwd)"; shift
py="${PYTHON:-python3}"
dur="${DUR:-5s}"; warm="${WARM:-2s}"
conc="${CONC:-64,128,256,512}"; mixconc="${MIX_CONC:-8,32}"
gpus="${GPUS:-0}"
carry="${CARRY:-$root/.gpu}"
work="${WORKDIR:-/tmp/fleetscribe-gpu}"
export NEMO_MODEL="${NEMO_MODEL:-$work/parakeet-tdt-shaped.nemo}"
export SORTFORMER_MODEL="${SORTFORMER_MODEL:-$work/sortformer-4spk-v2-shaped.nemo}"
export FLEETSCRIBE_COMPILE_CACHE="${FLEETSCRIBE_COMPILE_CACHE:-$work/compile-cache}"
bench="${GPUBENCH:-$root/bin/gpubench}"
worker="${WORKER:-$root/bin/worker}"

log() { echo "[$(date +%H:%M:%S)] $*" | tee -a "$out/run.log"; }

mpsbin="$(command -v nvidia-cuda-mps-control || true)"
for d in /usr/local/nvidia/bin /usr/bin /usr/local/bin /usr/lib/nvidia/bin; do
  [[ -z "$mpsbin" && -x "$d/nvidia-cuda-mps-control" ]] && mpsbin="$d/nvidia-cuda-mps-control"
done

# shellcheck source=lab/bench/gpu/env.sh
source "$here/env.sh"

check() {
  nvidia-smi --query-gpu=index,name,driver_version,memory.total,clocks.max.sm --format=csv,noheader | tee -a "$out/run.log"
  "$py" -c 'import torch, numpy; print("torch", torch.__version__, "cuda", torch.version.cuda, "numpy", numpy.__version__, "gpus", torch.cuda.device_count())' | tee -a "$out/run.log"
  log "tritonserver: ${FLEETSCRIBE_TRITONSERVER:-scripts default}; stub env: ${FLEETSCRIBE_TRITON_VENV:-.triton/venv}; mps control: ${mpsbin:-none}"
  local server stub
  server=${FLEETSCRIBE_TRITONSERVER:-$(echo "$root"/.triton/venv/lib/python3*/site-packages/pytriton/tritonserver/bin/tritonserver)}
  stub=$(dirname "$server")/../backends/python/triton_python_backend_stub
  [[ -x "$stub" ]] && { ldd "$stub" | grep -E "python|not found" | tee -a "$out/run.log" || true; }
  if [[ -n "${FLEETSCRIBE_TRITON_VENV:-}" ]]; then
    "$FLEETSCRIBE_TRITON_VENV/bin/python3" -c 'import numpy, torch; print("stub env: numpy", numpy.__version__, "torch", torch.__version__)' | tee -a "$out/run.log"
  fi
  df -h /dev/shm | tail -1 | tee -a "$out/run.log"
  nproc | sed 's/^/cpus /' | tee -a "$out/run.log"
}

arrangements() { # workload list extra-args...
  local workload=$1 list=$2; shift 2
  local c="$conc" split=(); [[ $workload == mix ]] && { c="$mixconc"; split=(-split "${MIX_SPLIT:-worker}"); }
  log "$workload: ${list//,/ }"
  mkdir -p /tmp/fleetscribe-mps-pipe /tmp/fleetscribe-mps-log
  # shellcheck disable=SC2086
  "$bench" run -worker "$worker" -tritonserver "$root/scripts/tritonserver" -mps-control "${mpsbin:-nvidia-cuda-mps-control}" \
    -model-dir "$root/deploy/triton/models/asr/1" \
    -gpus "$gpus" -instance-kind "${INSTANCE_KIND:-KIND_GPU}" -workload "$workload" -concurrency "$c" -duration "$dur" -warmup "$warm" \
    -out "$out/results.csv" -log "$out/partitions" -ready-timeout "${READY_TIMEOUT:-5m}" ${PARAMS:+-param "$PARAMS"} "${split[@]}" "$@" ${list//,/ } 2>&1 | tee -a "$out/run.log" ||
    log "$workload: some arrangements failed (above); the others were measured"
}

prepare_carried
anchor() { # nemo_anchor.py arguments...
  PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/nemo_anchor.py" "$@" 2>&1 |
    { grep -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log"
}

nemo_model() {
  if [[ ! -f "$NEMO_MODEL" ]]; then
    log "building the NeMo model"; anchor --out "$work/nemo-build.json" --save "$NEMO_MODEL" --batches "" --eager-batches "" || log "NeMo model build failed"
  fi
}
sortformer_model() {
  if [[ ! -f "$SORTFORMER_MODEL" ]]; then
    log "building the Sortformer model"
    PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/sortformer_study.py" --save "$SORTFORMER_MODEL" 2>&1 |
      { grep -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log" || log "Sortformer model build failed"
  fi
}
study() { # encoder_study.py arguments...; all of its output in OUTDIR/study.log
  PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/encoder_study.py" --cache "$FLEETSCRIBE_COMPILE_CACHE" \
    --batches "${STUDY_BATCHES:-16,32}" ${STUDY_ARGS:-} "$@" 2>&1 | tee -a "$out/study.log" |
    { grep -a -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log"
}

# A step that fails is logged and the next one runs: one broken step should
# not cost the others' measurements.
for step in "$@"; do
  case "$step" in
    check) check || log "check failed" ;;
    test) log "stand-in decoder and compiled encoder tests"; (cd "$here" && "$py" -m unittest -v test_standin test_compiled 2>&1 | tee -a "$out/run.log") || log "tests failed" ;;
    offline) log "offline reference"; (cd "$here" && "$py" offline.py --out "$out/offline.json" 2>&1 | tee -a "$out/run.log") || log "offline failed" ;;
    anchor) log "NeMo anchor"; anchor --out "$out/nemo.json" --save "$NEMO_MODEL" || log "anchor failed" ;;
    # Each workload's encoder compiles the one length its chunks reach: 45-s
    # clips, or the worker's 30-s chunks (model.py's default); PARAMS may
    # name others.
    clips:*) arrangements clip "${step#clips:}" -param "length_buckets=45${PARAMS:+,$PARAMS}" ;;
    mix:*) arrangements mix "${step#mix:}" -param "length_buckets=30${PARAMS:+,$PARAMS}" ;;
    nemo:*)
      nemo_model
      # -param replaces the list: PARAMS (log_timings=N, ...) joins the model's;
      # an arrangement with /vocabulary sends VOCAB_PHRASES phrases a request.
      arrangements clip "${step#nemo:}" -engine "" -param "model=$NEMO_MODEL,warmup_seconds=45,length_buckets=45${PARAMS:+,$PARAMS}" \
        -vocabulary "${VOCAB_PHRASES:-1000}" ;;
    nemomix:*)
      nemo_model
      arrangements mix "${step#nemomix:}" -engine "" -param "model=$NEMO_MODEL,warmup_seconds=30,length_buckets=30${PARAMS:+,$PARAMS}" ;;
    model) nemo_model ;;
    vocabcost:*)
      nemo_model; a="${step#vocabcost:}"
      arrangements clip "$a,$a/word_confidence=max_prob,$a/phrase_boosting=on/vocabulary" -engine "" \
        -param "model=$NEMO_MODEL,warmup_seconds=45,length_buckets=45${PARAMS:+,$PARAMS}" -vocabulary "${VOCAB_PHRASES:-1000}" ;;
    vocabhost) log "a vocabulary's host cost (first seen, seen before)"
      PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/vocabulary_host.py" 2>&1 |
        { grep -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log" || log "vocabhost failed" ;;
    confcost:*)
      nemo_model; a="${step#confcost:}"
      arrangements clip "$a,$a/word_confidence=max_prob" -engine "" -param "model=$NEMO_MODEL,warmup_seconds=45,length_buckets=45${PARAMS:+,$PARAMS}" ;;
    sftest) log "GPU diarizer tests"
      (cd "$here" && PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" -m unittest -v test_sortformer test_parakeet_options 2>&1 |
        { grep -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log") || log "tests failed" ;;
    sortformer:*)
      nemo_model; sortformer_model
      arrangements clip "${step#sortformer:}" -engine "" -param "model=$NEMO_MODEL,warmup_seconds=45,length_buckets=45${PARAMS:+,$PARAMS}" \
        -diarize "${DIARIZE:-off,on,only}" -diarize-param "model=$SORTFORMER_MODEL,chunk_seconds=45${DIAR_PARAMS:+,$DIAR_PARAMS}" ;;
    sortformermix:*)
      nemo_model; sortformer_model
      arrangements mix "${step#sortformermix:}" -engine "" -param "model=$NEMO_MODEL,warmup_seconds=30,length_buckets=30${PARAMS:+,$PARAMS}" \
        -diarize "${DIARIZE:-off,on,only}" -diarize-param "model=$SORTFORMER_MODEL,chunk_seconds=30${DIAR_PARAMS:+,$DIAR_PARAMS}" ;;
    study) nemo_model; log "compiled encoder study: NeMo"; study --nemo "$NEMO_MODEL" --out "$out/encoder-nemo.json" || log "study failed" ;;
    profile) nemo_model; log "encoder profile: NeMo"
      PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/encoder_profile.py" --nemo "$NEMO_MODEL" \
        --cache "$FLEETSCRIBE_COMPILE_CACHE" --out "$out/profile-nemo.json" ${PROFILE_ARGS:-} 2>&1 | tee -a "$out/profile.log" |
        { grep -a -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log" || log "profile failed" ;;
    sfprofile) sortformer_model; log "Sortformer profile"
      PYTHONPATH="${work}/nemosite${PYTHONPATH:+:$PYTHONPATH}" "$py" "$here/sortformer_profile.py" --nemo "$SORTFORMER_MODEL" \
        --cache "$FLEETSCRIBE_COMPILE_CACHE" --out "$out/sortformer-profile.json" ${SFPROFILE_ARGS:-} 2>&1 | tee -a "$out/sfprofile.log" |
        { grep -a -v -E "NeMo W|^ +|warn|register_resolver|OneLogger|exporters" || true; } | tee -a "$out/run.log" || log "Sortformer profile failed" ;;
    study-standin) log "compiled encoder study: stand-in"; study --standin --out "$out/encoder-standin.json" || log "study failed" ;;
    coldcache) log "compile cache emptied"; rm -rf "$FLEETSCRIBE_COMPILE_CACHE" ;;
    *) log "unknown step $step"; exit 2 ;;
  esac
done
log "done"
