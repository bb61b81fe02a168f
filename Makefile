# fleetscribe: queue-driven batch transcription on GPU fleets.
# `make demo` and `make test` are the whole set-up on a fresh Debian machine.

SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
GO ?= go
# make bench-worker WORKER_CPUS=0-3: the worker runs on those CPUs only (empty: all)
WORKER_CPUS ?=
# make bench-worker BENCH_WORKER_ARGS="-bulk-queue -partition-latency 200ms -jobs 2000":
# live and bulk queues both busy, partitions with a GPU's latency
BENCH_WORKER_ARGS ?=
# make bench-outage BENCH_OUTAGE_ARGS="-outages 10s -long ''": a quick run
BENCH_OUTAGE_ARGS ?=
# make bench-diarization BENCH_DIARIZATION_ARGS="-conversations 6 -long-minutes 0": a quick run
BENCH_DIARIZATION_ARGS ?=
# Expanded when used (=, not :=): make deps may install go first.
GOBIN = $(shell $(GO) env GOPATH)/bin
export GOTOOLCHAIN ?= auto
# The Python of real Triton's Python backend (the virtual environment make
# deps makes, with the pinned numpy and pocketsphinx), for the tests of the
# Triton model.
PYTHON ?= .triton/venv/bin/python
BIN := bin

.DEFAULT_GOAL := help

.PHONY: help
help: ## list targets
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-12s %s\n", $$1, $$2}'

.PHONY: deps
deps: ## install apt packages, the local AWS emulator (npm) and Go modules, if missing
	@scripts/deps.sh

.PHONY: build
build: deps ## build worker, enqueue, fleetctl and demo into bin/
	$(GO) build -o $(BIN)/ ./cmd/worker ./cmd/enqueue ./cmd/fleetctl ./lab/cmd/demo

.PHONY: demo
demo: build ## transcribe synthesised speech end to end: local SQS/S3, four real Triton partitions serving pocketsphinx, the worker
	$(BIN)/demo -bin $(BIN)

.PHONY: test
test: deps tflint ## vet, format check, terraform and Helm chart checks and all tests with -race (real Triton among them)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) vet -tags chaos,accuracy ./lab/suites/chaos ./lab/bench/accuracy
	$(MAKE) --no-print-directory tf-lint
	FLEETSCRIBE_REQUIRE_TERRAFORM=1 $(MAKE) --no-print-directory tf-validate
	$(MAKE) --no-print-directory k8s-validate
	FLEETSCRIBE_REQUIRE_HELM=1 FLEETSCRIBE_REQUIRE_PROMTOOL=1 FLEETSCRIBE_REQUIRE_TRITON=1 FLEETSCRIBE_REQUIRE_MOTO=1 FLEETSCRIBE_REQUIRE_PYTOOLS=1 $(GO) test -race -count=1 ./...
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) -m unittest discover -s deploy/triton/tests
	@scripts/pylint.sh
	FLEETSCRIBE_REQUIRE_TRITON=1 $(GO) test -count=1 -tags chaos -run TestChaosShort -v ./lab/suites/chaos | grep -E 'RESULT|^---|^ok|^FAIL|problem:|^ +[a-z_]+ +[0-9]+ '

.PHONY: tflint
tflint:
	@scripts/tools.sh tflint

.PHONY: tf-lint
tf-lint: tflint ## lint every Terraform module with tflint
	@for d in terraform/modules/* terraform/examples/*; do \
	  [ -d "$$d" ] || continue; \
	  echo "tflint $$d"; $(GOBIN)/tflint --chdir="$$d" --config="$(CURDIR)/terraform/.tflint.hcl"; \
	done

.PHONY: tf-validate
tf-validate: ## terraform init from the local provider mirror, validate and mock-provider tests of every module and the example
	@scripts/tf-validate.sh

.PHONY: tf-mutations
tf-mutations: tf-validate ## change the Terraform and user data one mutation at a time (terraform/mutations.jsonl) and check that a test catches each; ends with RESULT
	$(GO) run ./lab/cmd/mutate -table terraform/mutations.jsonl

.PHONY: k8s-validate
k8s-validate: deps ## render the Helm chart (1, 4 and 8 GPUs, each sharing mode) with helm, decode every object strictly, check its invariants and that each catches its mutation; then against a real kube-apiserver and kube-scheduler (built from k8s.io/kubernetes, cached): strict server-side dry runs with the KEDA and Prometheus-operator CRDs, Pod Security restricted, every plan placed on g6e-shaped nodes
	@scripts/tools.sh helm
	@mkdir -p $(BIN)
	@rc=0; FLEETSCRIBE_REQUIRE_HELM=1 FLEETSCRIBE_REQUIRE_KUBE=1 FLEETSCRIBE_HELM=$(GOBIN)/helm $(GO) test -count=1 -timeout 45m -v ./deploy/helm > $(BIN)/k8s-validate.log 2>&1 || rc=$$?; \
	  $(GO) test -count=1 -v -run 'TestPodRoleSharesTheWorkerPolicy' ./terraform >> $(BIN)/k8s-validate.log 2>&1 || rc=$$?; \
	  grep -E '^(--- |ok|FAIL|panic)|_test.go:[0-9]+:' $(BIN)/k8s-validate.log || true; \
	  if [ $$rc -ne 0 ]; then echo "k8s-validate failed: $(BIN)/k8s-validate.log"; exit $$rc; fi; \
	  grep '^INVARIANT ' $(BIN)/k8s-validate.log; \
	  charts=$$(grep -m1 '^CHARTS ' $(BIN)/k8s-validate.log | cut -d' ' -f2-); \
	  [ -n "$$charts" ] || { echo "k8s-validate: no CHARTS line"; exit 1; }; \
	  psa=none; grep -q '^INVARIANT pod_security_restricted .* caught' $(BIN)/k8s-validate.log && psa=restricted; \
	  shm=false; grep -q '^INVARIANT shared_memory_holds_the_plan .* caught' $(BIN)/k8s-validate.log && shm=true; \
	  grep -E '^(\| |# .* dry runs|KUBE_BUILD|REPLICAS )' $(BIN)/k8s-validate.log || true; \
	  kept=false; grep -q '^REPLICAS ' $(BIN)/k8s-validate.log && kept=true; \
	  nodes=$$(grep -m1 '^NODEGROUPS ' $(BIN)/k8s-validate.log | cut -d' ' -f2-); \
	  cluster=$$(grep -m1 '^CLUSTER ' $(BIN)/k8s-validate.log | cut -d' ' -f2-); \
	  [ -n "$$cluster" ] || { echo "k8s-validate: no CLUSTER line"; exit 1; }; \
	  set -- $$cluster; \
	  echo "RESULT $$charts invariants=$$(grep -c '^INVARIANT ' $(BIN)/k8s-validate.log) $$1 $$2 psa=$$psa $$3 $$4 shm_reserved=$$shm replicas_kept=$$kept $$nodes"

.PHONY: tf-fmt
tf-fmt: ## format Terraform files (hclwrite, as terraform fmt)
	$(GO) run ./lab/kit/tffmt terraform

.PHONY: docs
docs: ## rewrite the generated references: docs/configuration.md from the worker's flags, terraform/README.md's tables from the modules, the Helm chart's plans, values.schema.json and README
	$(GO) test ./cmd/worker -run TestConfigurationReferenceIsCurrent -count=1 -update-docs
	$(GO) test ./deploy/helm -run 'TestPlansAreCurrent|TestValuesSchemaIsCurrent|TestChartReadmeIsCurrent' -count=1 -update
	$(GO) test ./terraform -run 'TestReadmeReferenceIsCurrent|TestModuleReadmesAreCurrent' -count=1 -update

.PHONY: tf-docs
tf-docs: ## rewrite the reference tables of terraform/README.md and every module's README from the modules' variables and outputs
	$(GO) test ./terraform -run 'TestReadmeReferenceIsCurrent|TestModuleReadmesAreCurrent' -count=1 -update

.PHONY: lint
lint: deps tf-lint lint-python ## golangci-lint (see .golangci.yml), gofmt, tflint, and ruff with a strict mypy over the Triton model
	@scripts/tools.sh golangci-lint
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	$(GOBIN)/golangci-lint run ./...

.PHONY: lint-python
lint-python: ## ruff (ruff.toml) over the Triton model and its tests, mypy --strict (mypy.ini) over model.py and its engines
	@scripts/pylint.sh

# The GPU Triton image's tag: the Triton release and NeMo's version.
TRITON_IMAGE_TAG ?= 24.10-nemo2.7.3

.PHONY: triton-image
triton-image: ## build the GPU Triton image (deploy/triton/Dockerfile: Triton 24.10 with NeMo, pinned by hash) where Docker runs: fleetscribe-triton:$(TRITON_IMAGE_TAG)
	docker build -f deploy/triton/Dockerfile -t fleetscribe-triton:$(TRITON_IMAGE_TAG) .

.PHONY: triton-image-lock
triton-image-lock: ## re-resolve the GPU Triton image's pinned packages for its Python (needs the package index)
	scripts/triton-image-lock.sh

.PHONY: bench-buckets
bench-buckets: deps ## choose bucket lengths: padding vs batch formation on a realistic length mix
	$(GO) run ./lab/bench/buckets

.PHONY: bench-enqueue
bench-enqueue: deps ## enqueue 100,000 keys (a quarter already transcribed) from the local emulator's S3 into its SQS, next to a naive serial loop
	$(GO) run ./lab/bench/enqueue

.PHONY: bench-audio
bench-audio: deps ## decode + resample 10-minute WAV, FLAC and MP3 to 16 kHz mono beside ffmpeg doing the same: audio-seconds per CPU-second, resampler quality, peak RSS of 2-hour recordings
	$(GO) build -o $(BIN)/bench-audio ./lab/bench/audio
	$(BIN)/bench-audio

.PHONY: bench-longform
bench-longform: deps ## one 60-minute recording through the worker with one partition and with four (a GPU partition's latency model): time from message to transcript, speedup
	$(GO) run ./lab/bench/longform

# The CPU recogniser of the accuracy benchmarks: whisper (deploy/triton/cpu-whisper) or pocketsphinx.
ENGINE ?= whisper

.PHONY: bench-accuracy
bench-accuracy: deps ## a 20-minute recording of synthesised sentences (3 voices, some in noise) through the worker and the CPU recogniser (ENGINE=whisper or pocketsphinx; PARAMS=key=value,... its model parameters): stitched WER beside each sentence alone, sentence start times
	@mkdir -p $(BIN)
	@rc=0; $(GO) test -count=1 -timeout 90m -tags accuracy -run TestLongFormAccuracy -v ./lab/bench/accuracy -args -accuracy-minutes $${MINUTES:-20} -accuracy-engine $(ENGINE) -accuracy-params "$(PARAMS)" > $(BIN)/accuracy.log 2>&1 || rc=$$?; \
		grep -v '^RESULT' $(BIN)/accuracy.log; grep '^RESULT' $(BIN)/accuracy.log; exit $$rc

.PHONY: bench-joins
bench-joins: deps ## five minutes of continuous noisy speech in 15-s chunks through the worker and the CPU recogniser (ENGINE): errors within 1.5 s of a join against elsewhere, and the same words near a join against away from every join (paired with an 11-s chunking), overlaps joined by alignment and by their middle
	@mkdir -p $(BIN)
	@rc=0; for join in middle align; do $(GO) test -count=1 -timeout 60m -tags accuracy -run 'TestJoinAccuracy$$' -v ./lab/bench/accuracy -args -accuracy-engine $(ENGINE) -accuracy-join $$join > $(BIN)/joins-$$join.log 2>&1 || rc=$$?; done; \
		grep -h '_test.go' $(BIN)/joins-*.log; grep -h '^RESULT' $(BIN)/joins-middle.log $(BIN)/joins-align.log; exit $$rc

.PHONY: bench-diarization
bench-diarization: build ## 30 synthetic conversations of 2-4 voices (1-10 min), one of 60 min and 5 stereo calls through the worker and real Triton (Whisper, the CPU diarizer): DER by pyannote.metrics (collar 0.25 s, overlap scored), WDER, speakers counted, labels over the hour, words on their channel, the diarizer's CPU
	@scripts/labvenv.sh diarization lab/bench/diarization/requirements.txt
	$(GO) run ./lab/bench/diarization -bin $(BIN) $(BENCH_DIARIZATION_ARGS)

.PHONY: bench-vocabulary
bench-vocabulary: deps ## custom vocabularies on the CPU Whisper engine (88 sentences, 4 voices): key-term recall without and with, WER on the other words, key terms in control sentences; word confidence per engine (AUC, errors below and above 0.5)
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) lab/bench/vocabulary/vocabulary.py

.PHONY: bench-narrowband
bench-narrowband: deps ## telephone audio (8 kHz, band-limited, mu-law, A-law) and room tone through the CPU recogniser: WER with the narrowband measures off and on, side by side
	PYTHONDONTWRITEBYTECODE=1 $(PYTHON) lab/bench/narrowband/narrowband.py

.PHONY: bench-worker
bench-worker: build ## the worker binary drains 10,000 queued 10 s jobs into four zero-latency fake partitions: jobs/s, worker CPU per job, peak RSS, requests and connections per job, request cost
	$(GO) run ./lab/bench/worker -worker-bin $(BIN)/worker -worker-cpus "$(WORKER_CPUS)" $(BENCH_WORKER_ARGS)

.PHONY: bench-outage
bench-outage: build ## the worker binary through bucket outages (404, 403, 503 on the output or input bucket), its Triton partitions killed or failing every request, 60 s and 180 s each, 15 min for two, and inputs that refuse (403, archived): extra receives, DLQ, error records, lost, recomputed, most held, time to resume, SIGTERM to exit while jobs are held (about 75 minutes)
	$(GO) run ./lab/bench/outage -worker-bin $(BIN)/worker $(BENCH_OUTAGE_ARGS)

.PHONY: bench-scalein
bench-scalein: ## scale-in simulated four ways (protection while busy, the drain, least-busy termination, workers stopping their own receipt) on the same arrivals, 1- and 8-GPU instances: instance-hours against those needed
	$(GO) run ./lab/bench/scalein $(BENCH_SCALEIN_ARGS)

.PHONY: chaos
chaos: build ## 1000 jobs through two real workers and three real Triton partitions while workers are killed, partitions are SIGKILLed and S3/SQS fail; table and RESULT line
	$(GO) run ./lab/cmd/chaos -worker-bin $(BIN)/worker

.PHONY: conformance
conformance: deps ## one set of scenarios against real Triton and the in-process fake: table and RESULT line
	@mkdir -p $(BIN); FLEETSCRIBE_REQUIRE_TRITON=1 $(GO) test -count=1 -run TestConformance -v ./lab/suites/conformance > $(BIN)/conformance.log 2>&1 || rc=$$?; \
	  grep -E '^(scenario|[a-zA-Z].*  (pass|FAIL|not run) )|^RESULT|^--- FAIL|_test.go' $(BIN)/conformance.log; exit $${rc:-0}

# The GPU benchmark's arrangements (lab/bench/gpu/gpubench: single, instances-N,
# timesliced-N, mpsP-N), each on real Triton with the shipped model.py.
GPU_ARRANGEMENTS ?= single,timesliced-4,instances-4,mps100-4,mps50-4,mps25-4,timesliced-2,instances-2,mps100-2,mps50-2,mps25-2,timesliced-8,mps100-8,mps50-8,mps25-8
# Where the Python backend finds torch and numpy 1.x (lab/bench/gpu/run.sh).
TRITON_VENV ?=

.PHONY: bench-gpu
bench-gpu: deps ## GPU benchmark on this host's GPU 0 through real Triton (needs nvidia-smi, torch, TRITON_VENV=a venv with torch and numpy<2); results into docs/benchmarks/
	@command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 || { \
	  echo "bench-gpu needs an NVIDIA GPU (nvidia-smi), python3 with torch (CUDA), and a Python environment for"; \
	  echo "Triton's Python backend with torch and numpy 1.x (TRITON_VENV=...); nvidia-cuda-mps-control for the mps"; \
	  echo "arrangements. On a GPU machine without Go or network, lab/bench/gpu/carry.sh packs what it needs into .gpu/"; \
	  echo "here and lab/bench/gpu/run.sh unpacks it there. make bench-gpu-report reads the committed results without a GPU."; exit 1; }
	CGO_ENABLED=0 $(GO) build -o $(BIN)/ ./lab/bench/gpu/gpubench ./cmd/worker
	rm -f docs/benchmarks/results.csv
	FLEETSCRIBE_TRITON_VENV=$(TRITON_VENV) lab/bench/gpu/run.sh docs/benchmarks check test offline anchor \
	  clips:$(GPU_ARRANGEMENTS) mix:mps50-8,mps50-8/unbatched
	$(MAKE) --no-print-directory bench-gpu-report

.PHONY: bench-gpu-report
bench-gpu-report: deps ## tables, plot and RESULT lines from the committed GPU benchmark results (no GPU needed); the last two are the compiled encoder's and Sortformer's
	$(GO) run ./lab/bench/gpu/gpubench report -results docs/benchmarks/results.csv -offline docs/benchmarks/offline.json \
	  -table docs/benchmarks/table.md -plot docs/benchmarks/throughput-p99.png
	@echo "# The first compiled encoder (whole, batch symbolic), 2026-12-02's first sweep:"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_whole_symbolic -results docs/benchmarks/compiled/served.csv \
	  -results docs/benchmarks/compiled/2026-12-01/served-b.csv -study docs/benchmarks/compiled/encoder-nemo.json
	@echo "# The regional static encoder, measured beside eager in one session (CUDA's sync, torch's threads):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static -results docs/benchmarks/regional/served.csv \
	  -study docs/benchmarks/regional/encoder-nemo.json
	@echo "# The length mix chunked at the last pause against the quietest point, side by side (one call):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static -results docs/benchmarks/lastpause/side-by-side.csv | grep -v '^RESULT'
	@echo "# The default plan with no parameters, chunks cut at the last pause (no eager row):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static -results docs/benchmarks/lastpause/served.csv
	@echo "# Eight, four and two partitions side by side (one call), one partition of 64-row batches of 45 s run in two parts, and the encoder offline at 16-64 rows:"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static -results docs/benchmarks/rowlimit/served.csv \
	  -study docs/benchmarks/rowlimit/encoder-nemo-45s-parts.json | grep -v '^RESULT'
	@echo "# The same encoder: partitions that sleep while the GPU works, on 2 CPU threads (beside eager, one session):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static -results docs/benchmarks/hostcpu/served.csv | grep -v '^RESULT'
	@echo "# SDPA attention, the default plan on another machine (cold start), and the encoder offline at 64 rows of 30 s:"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa -results docs/benchmarks/sdpa/served-call2.csv \
	  -study docs/benchmarks/sdpa/encoder-nemo-30s-64.json | grep -v '^RESULT'
	@echo "# Row parts: a batch in the row buckets that pad least (row_parts=fit, now the default) beside one padded bucket (the rows named mps50-4/maxbatch16 ran with row_parts=one, the default then), H100, 4 partitions, two calls on one machine:"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa -default mps50-4 \
	  -results docs/benchmarks/rowparts/served-h100-mps50-4-call1.csv -results docs/benchmarks/rowparts/served-h100-mps50-4-call2.csv | grep -v '^RESULT'
	@echo "# Speech only on an H200, 8 partitions, 20-s windows: three runs at 64 in flight and one at 128, one machine (the speech rows of the Sortformer runs):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa -results docs/benchmarks/sortformer/served-h200-mps50-8-run1.csv \
	  -results docs/benchmarks/sortformer/served-h200-mps50-8-run2.csv -results docs/benchmarks/sortformer/served-h200-mps50-8-run3.csv \
	  -results docs/benchmarks/sortformer/served-h200-mps50-8-c128.csv | grep -v '^|'
	@echo "# Two instances a partition and the pointwise convolutions as matrix multiplies (now the default), side by side, H100, 4 partitions, 20-s windows, four calls on one machine:"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa_pointwise -default mps50-4 \
	  -results docs/benchmarks/levers/served-h100-call1.csv -results docs/benchmarks/levers/served-h100-call2.csv \
	  -results docs/benchmarks/levers/served-h100-call3.csv -results docs/benchmarks/levers/served-h100-call4.csv | grep -v '^|'
	@echo "# The pointwise form on its own and two instances a partition (call 5), then phrase boosting beside one and two instances (call 6), H100, 4 partitions, 20-s windows, one machine (mps50-4/maxbatch16 here has the pointwise form, the default since calls 1-4):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa_pointwise -default mps50-4 \
	  -results docs/benchmarks/levers/served-h100-call5.csv -results docs/benchmarks/levers/served-h100-call6-boosting.csv | grep -v '^RESULT'
	@echo "# The shipped encoder (regional, static shapes, SDPA attention) beside NeMo's attention and eager, one machine:"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa -results docs/benchmarks/sdpa/served.csv \
	  -study docs/benchmarks/sdpa/encoder-nemo-45s.json
	@echo "# Sortformer on the partitions before the fixes (H100, 8 partitions, the speech encoder eager):"
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h100-eagerenc.csv | grep -v '^RESULT'
	@echo "# Sortformer on the partitions, both encoders compiled (H100, 4 partitions), run 1 then run 2 (its RESULT line):"
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h100-mps50-4-run1.csv | grep -v '^RESULT'
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h100-mps50-4-run2.csv | grep -v '^RESULT'
	@echo "# Sortformer on the partitions, one request a chunk (the last brings the labels), H200, 8 partitions: runs 1 and 2 at 64 in flight, 128 in flight (measured after run 3), then run 3:"
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h200-mps50-8-run1.csv | grep -v '^RESULT'
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h200-mps50-8-run2.csv | grep -v '^RESULT'
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h200-mps50-8-c128.csv | grep -v '^RESULT'
	$(GO) run ./lab/bench/gpu/gpubench diarize -results docs/benchmarks/sortformer/served-h200-mps50-8-run3.csv | grep -v '^RESULT'
	@echo "# Phrase boosting with each vocabulary checked once, 1,000 phrases on every request, two runs side by side, H100, 4 partitions, 20-s windows, one call (docs/vocabulary.md):"
	$(GO) run ./lab/bench/gpu/gpubench compiled -encoder inductor_regional_static_sdpa_pointwise -default mps50-4 \
	  -results docs/benchmarks/vocabulary/cost-h100-cached.csv | grep -v '^RESULT'
	@echo "# Sortformer with a recording's first step at its own length (the default), H100, 4 partitions, the speech model's pointwise form: calls 7 and 8 on one machine, beside first_step=full (call 7) and the diarize model's pointwise form (call 8), and call 10 on another H100 (the RESULT line: the three runs' means, the worst p99):"
	$(GO) run ./lab/bench/gpu/gpubench diarize -min-runs 2 -results docs/benchmarks/sortformer/served-h100-firststep-call1.csv \
	  -results docs/benchmarks/sortformer/served-h100-firststep-call2.csv -results docs/benchmarks/sortformer/served-h100-firststep-call3.csv | grep -v '^RESULT'
	@echo "# Sortformer's sequence lengths aligned to 8 frames (align_frames=8, now the default) beside NeMo's (the rows named mps50-4/maxbatch16 ran align_frames=1, the default then) and beside row_parts=fit, H100, 4 partitions, 20-s windows, three calls on one machine (the RESULT line: the points measured twice, their means, the worst p99):"
	$(GO) run ./lab/bench/gpu/gpubench diarize -min-runs 2 -results docs/benchmarks/sortformer/served-h100-align-call1.csv \
	  -results docs/benchmarks/sortformer/served-h100-align-call2.csv -results docs/benchmarks/sortformer/served-h100-align-call3.csv | grep -v '^RESULT'
	@echo "# Sortformer as shipped (align_frames=8) on a fresh H100: its first call (64 and 128 in flight) and its fourth (64), the length mix at 24 recordings and two diarize instances a partition (call 2), the Fast Conformer's attention through FlexAttention (call 3); 4 partitions, 20-s windows, one machine (the RESULT line: the points measured twice, their means, the worst p99; the mix's one run):"
	$(GO) run ./lab/bench/gpu/gpubench diarize -min-runs 2 -results docs/benchmarks/sortformer/served-h100-fresh-call1.csv \
	  -results docs/benchmarks/sortformer/served-h100-mix-diarinst2-call2.csv -results docs/benchmarks/sortformer/served-h100-flex-call3.csv \
	  -results docs/benchmarks/sortformer/served-h100-fresh-call4.csv

.PHONY: bench-gpu-test
bench-gpu-test: ## the GPU stand-in's decoder tests and the compiled encoder's (needs python3 with torch; on a GPU also CUDA-graph replay)
	cd lab/bench/gpu && PYTHONDONTWRITEBYTECODE=1 $${PYTHON_TORCH:-python3} -m unittest -v test_standin test_compiled

.PHONY: proto
proto: ## regenerate the KServe v2 gRPC code (triton/inference) and Triton's model configuration types (modelspec/configpb)
	@scripts/tools.sh protoc-gen-go protoc-gen-go-grpc
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative \
	  --go-grpc_out=. --go-grpc_opt=paths=source_relative triton/inference/grpc_service.proto
	PATH="$(GOBIN):$$PATH" protoc --go_out=. --go_opt=paths=source_relative modelspec/configpb/model_config.proto

.PHONY: clean
clean: ## remove build outputs
	rm -rf $(BIN)
