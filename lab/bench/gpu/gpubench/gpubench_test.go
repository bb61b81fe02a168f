package main

import (
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/modelspec/configpb"
	"github.com/fleetscribe/fleetscribe/mps"
)

// writeResults writes a results file: header, then rows.
func writeResults(t *testing.T, path string, header []string, rows [][]string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w := csv.NewWriter(f)
	_ = w.Write(header)
	_ = w.WriteAll(rows) // flushes
	if err := errors.Join(w.Error(), f.Close()); err != nil {
		t.Fatal(err)
	}
}

func TestParseArrangement(t *testing.T) {
	for in, want := range map[string]arrangement{
		"single":                  {name: "single", processes: 1, instances: 1, diarInst: 1, decoder: "cuda_graph", encoder: "compiled"},
		"instances-4":             {name: "instances-4", processes: 1, instances: 4, diarInst: 1, decoder: "cuda_graph", encoder: "compiled"},
		"timesliced-8/eager":      {name: "timesliced-8/eager", processes: 8, instances: 1, diarInst: 1, decoder: "eager", encoder: "compiled"},
		"mps50-8":                 {name: "mps50-8", processes: 8, instances: 1, diarInst: 1, percentage: 50, decoder: "cuda_graph", encoder: "compiled"},
		"mps25-8/eagerenc":        {name: "mps25-8/eagerenc", processes: 8, instances: 1, diarInst: 1, percentage: 25, decoder: "cuda_graph", encoder: "eager"},
		"mps25-4/unbatched":       {name: "mps25-4/unbatched", processes: 4, instances: 1, diarInst: 1, percentage: 25, decoder: "cuda_graph", encoder: "compiled", unbatched: true},
		"timesliced-4/maxbatch32": {name: "timesliced-4/maxbatch32", processes: 4, instances: 1, diarInst: 1, decoder: "cuda_graph", encoder: "compiled", maxBatch: 32},
		"mps25-8/cuda_sync=blocking/cpu_threads=2": {name: "mps25-8/cuda_sync=blocking/cpu_threads=2", processes: 8, instances: 1, diarInst: 1, percentage: 25,
			decoder: "cuda_graph", encoder: "compiled", params: "cuda_sync=blocking/cpu_threads=2"},
		"mps50-4/maxbatch16/inst2": {name: "mps50-4/maxbatch16/inst2", processes: 4, instances: 2, diarInst: 1, percentage: 50, decoder: "cuda_graph",
			encoder: "compiled", maxBatch: 16},
		"mps50-4/diarinst2/inst3": {name: "mps50-4/diarinst2/inst3", processes: 4, instances: 3, diarInst: 2, percentage: 50, decoder: "cuda_graph",
			encoder: "compiled"},
		"mps50-8/maxbatch16/diarpack16": {name: "mps50-8/maxbatch16/diarpack16", processes: 8, instances: 1, diarInst: 1, diarPack: 16, percentage: 50,
			decoder: "cuda_graph", encoder: "compiled", maxBatch: 16},
	} {
		got, err := parseArrangement(in)
		if err != nil || got != want {
			t.Errorf("%s: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "mps-4", "mps0-4", "mps101-2", "timesliced-0", "instances-0", "single/fast", "mps50-8/maxbatch0", "Single", "mps50-8/Cuda=x", "mps50-8/cuda_sync=", "mps50-4/inst0", "instances-2/inst2", "mps50-4/diarinst0"} {
		if _, err := parseArrangement(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

// An arrangement's plan is the worker's plan for the same flags.
func TestArrangementPlanIsTheWorkersPlan(t *testing.T) {
	for _, name := range []string{"single", "timesliced-4", "mps50-8", "mps100-2"} {
		a, _ := parseArrangement(name)
		got, err := a.plan([]int{0, 1}, 9100)
		if err != nil {
			t.Fatal(err)
		}
		flags := a.planFlags([]int{0, 1}, 9100)
		c := mps.PlanConfig{GPUs: []int{0, 1}, BasePort: 9100}
		for i := 0; i+1 < len(flags); i += 2 {
			v := flags[i+1]
			switch flags[i] {
			case "-per-gpu":
				c.PerGPU, _ = strconv.Atoi(v)
			case "-percentage":
				c.Percentage, _ = strconv.Atoi(v)
			case "-sharing":
				c.Sharing = v
			}
		}
		want, err := mps.Plan(c)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) || len(got) != 2*a.processes {
			t.Fatalf("%s: %d partitions, flags give %d", name, len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Errorf("%s: partition %d %+v, flags give %+v", name, i, got[i], want[i])
			}
		}
		if wantKind := map[string]string{"single": "single", "timesliced-4": "timesliced", "mps50-8": "mps", "mps100-2": "mps"}[name]; a.kind() != wantKind {
			t.Errorf("%s: kind %s, want %s", name, a.kind(), wantKind)
		}
	}
}

// The repository is the shipped configuration with only the instance
// group, the engine's parameters and the named variations changed.
func TestWriteRepo(t *testing.T) {
	modelDir, _ := filepath.Abs("../../../../deploy/triton/models/asr/1")
	a, _ := parseArrangement("instances-4/unbatched/maxbatch16")
	dir := t.TempDir()
	if err := writeRepo(dir, modelDir, modelspec.KindGPU, a, map[string]string{"engine": "module", "decoder": "eager"}); err != nil {
		t.Fatal(err)
	}
	cfg := readConfig(t, filepath.Join(dir, "asr", "config.pbtxt"))
	shipped := modelspec.GPU().Proto().GetDynamicBatching()
	got := cfg.GetDynamicBatching()
	if g := cfg.GetInstanceGroup(); len(g) != 1 || g[0].GetCount() != 4 || g[0].GetKind() != modelspec.KindGPU {
		t.Errorf("instance groups %v, want 4 of KIND_GPU", g)
	}
	if cfg.GetMaxBatchSize() != 16 || !slices.Equal(got.GetPreferredBatchSize(), []int32{8, 16}) {
		t.Errorf("max_batch_size %d, preferred %v; want 16 and [8 16]", cfg.GetMaxBatchSize(), got.GetPreferredBatchSize())
	}
	if p := cfg.GetParameters(); len(p) != 2 || p["decoder"].GetStringValue() != "eager" || p["engine"].GetStringValue() != "module" {
		t.Errorf("parameters %v, want decoder=eager engine=module", p)
	}
	if got.GetPriorityLevels() != 2 || !proto.Equal(got.GetDefaultQueuePolicy(), shipped.GetDefaultQueuePolicy()) ||
		got.GetMaxQueueDelayMicroseconds() != shipped.GetMaxQueueDelayMicroseconds() {
		t.Errorf("batching %v, want the shipped priorities, queue policy and delay (%v)", got, shipped)
	}
	optional := 0
	for _, in := range cfg.GetInput() {
		if in.GetAllowRaggedBatch() {
			t.Errorf("/unbatched: input %s is ragged", in.GetName())
		}
		if in.GetOptional() {
			optional++
		}
	}
	if optional != 3 {
		t.Errorf("/unbatched: %d optional inputs, want timestamps, audio_length and vocabulary", optional)
	}
	if link, err := os.Readlink(filepath.Join(dir, "asr", "1")); err != nil || link != modelDir {
		t.Errorf("version 1 is %q (%v), want the shipped %s", link, err, modelDir)
	}
	if !modelspec.GPU().Proto().GetInput()[0].GetAllowRaggedBatch() {
		t.Fatal("the shipped configuration is not ragged any more; the test's premise is gone")
	}
}

func TestReportResultLine(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results.csv")
	rows := [][]string{
		{"single", "single", "cuda_graph", "clip45", "64", "100", "4", "25", "1125", "500", "600", "700", "16", "50", "0", "0", "1", "1", "1", "1"},
		{"timesliced-4", "timesliced", "cuda_graph", "clip45", "64", "200", "4", "50", "2250", "500", "600", "800", "8", "99", "0", "0", "1", "1", "1", "1"},
		{"mps50-8", "mps", "cuda_graph", "clip45", "64", "240", "4", "60", "2700", "500", "600", "900", "4", "99", "0", "0", "1", "1", "1", "1"},
		{"mps50-8", "mps", "cuda_graph", "clip45", "128", "400", "4", "100", "4500", "900", "1500", "1600", "8", "99", "0", "0", "1", "1", "1", "1"}, // over 1 s
		{"mps25-8", "mps", "cuda_graph", "clip45", "64", "300", "4", "75", "3375", "500", "600", "700", "4", "99", "3", "0", "1", "1", "1", "1"},     // errors
		{"mps50-8/eager", "mps", "eager", "clip45", "64", "300", "4", "80", "3600", "500", "600", "700", "4", "99", "0", "0", "1", "1", "1", "1"},    // not the decoder of the headline
		{"mps50-8", "mps", "cuda_graph", "mix", "32", "300", "4", "80", "3000", "500", "600", "1200", "20", "99", "0", "0", "1", "1", "1", "1"},
		{"mps50-8/unbatched", "mps", "cuda_graph", "mix", "8", "30", "4", "8", "300", "500", "600", "1500", "1", "99", "0", "0", "1", "1", "1", "1"},
	}
	writeResults(t, results, legacyColumns, rows) // the results committed before the encoder was compiled
	offline := filepath.Join(dir, "offline.json")
	_ = os.WriteFile(offline, []byte(`{"clip_seconds":45,"best_clips_per_s":50,"best_batch":64,"batch1_clips_per_s":10,"flops_per_clip":1e12,"matmul_tflops":500}`), 0o644)
	out, err := exec.Command("go", "run", ".", "report", "-results", results, "-offline", offline).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	got := lines[len(lines)-1]
	// best at p99 <= 1 s without errors, CUDA graphs: mps50-8 at 64 (2700);
	// offline 50 clips/s x 45 s = 2250; FLOP bound 500 clips/s x 45 = 22500.
	want := "RESULT server=triton decoder=cuda_graph best_mode=mps50-8 served_audio_s_per_s=2700 vs_offline=1.20 flop_fraction=0.12 p99_ms=900 mode_vs_timesliced=1.20 batching_speedup=10.00 best_timesliced=timesliced-4 best_mps=mps50-8 mps_vs_timesliced=1.20 best_instances=- instances_vs_timesliced=0.00"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// The whole benchmark on a host without GPUs: real Triton processes
// started by `worker mps run`, model.py's echo engine, the pool's load,
// Triton's statistics, one CSV row per point; each point with
// diarization off, on and alone (the CPU diarizer in the diarize model's
// place: Sortformer's own tests need NeMo, lab/bench/gpu/test_sortformer.py).
func TestRunOnRealTriton(t *testing.T) {
	tritonproc.Require(t)
	if testing.Short() {
		t.Skip("builds the worker and starts real servers")
	}
	dir := t.TempDir()
	worker := filepath.Join(dir, "worker")
	if out, err := exec.Command("go", "build", "-o", worker, "../../../../cmd/worker").CombinedOutput(); err != nil {
		t.Fatalf("build worker: %v: %s", err, out)
	}
	// Two arrangements, 100 ports apart (gRPC, HTTP and metrics of each
	// partition): every port they take free now, not only the first.
	base, err := tritonproc.FreePortRange(106)
	if err != nil {
		t.Fatal(err)
	}
	root, _ := tritonproc.Root()
	out := filepath.Join(dir, "results.csv")
	err = runCmd([]string{"-worker", worker, "-tritonserver", filepath.Join(root, "scripts", "tritonserver"), "-base-port", strconv.Itoa(base),
		"-model-dir", filepath.Join(root, "deploy/triton/models/asr/1"),
		"-instance-kind", "KIND_CPU", "-engine", "", "-param", "engine=echo,batch_delay_ms=20",
		"-diarize-model-dir", filepath.Join(root, "deploy/triton/models/diarize/1"), "-diarize-param", "engine=pyannote_campp",
		"-diarize", "off,on,only", "-vocabulary", "5",
		"-clip-seconds", "2", "-concurrency", "4", "-duration", "1500ms", "-warmup", "500ms", "-out", out,
		"single", "timesliced-2", "single/vocabulary"})
	if err != nil {
		t.Fatal(err)
	}
	rs, err := readResults(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 9 {
		t.Fatalf("%d rows, want one per arrangement and diarization", len(rs))
	}
	// The third's requests carry the vocabulary (-vocabulary), which the
	// echo engine takes: a refused one would count as errors.
	for i, want := range []string{"single", "timesliced-2", "single/vocabulary"} {
		for j, workload := range []string{"clip2", "clip2+diarize", "clip2-diarize-only"} {
			r := rs[3*i+j]
			if r.arrangement != want || r.decoder != "cuda_graph" || r.workload != workload || r.completed == 0 || r.errors != 0 ||
				r.meanBatch < 1 || r.p99 <= 0 {
				t.Errorf("row %d: %+v", 3*i+j, r)
			}
		}
	}
}

func TestCompiledReportResultLine(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results.csv")
	row := func(arr, enc, workload, conc, audio, p99, ready, cache string) []string {
		return []string{arr, "mps", "nemo", workload, conc, "100", "3", "30", audio, "400", "500", p99, "8", "90", "0", "0", "1", "1", "1", "1", enc, ready, cache}
	}
	rows := [][]string{
		row("mps50-8", "compiled", "clip45", "64", "7500", "480", "300", "cold"),
		row("mps50-8", "compiled", "clip45", "128", "9000", "1100", "90", "warm"), // over 1 s
		row("mps50-8", "compiled", "clip45", "96", "8000", "900", "90", "warm"),
		row("mps50-8", "compiled", "clip45", "96", "7600", "880", "90", "warm"),  // a second run of the headline point
		row("mps50-8", "compiled", "clip45", "128", "7900", "980", "90", "warm"), // a second run at 128: mean 8,450 against 7,500 at 64
		row("mps50-8", "compiled", "mix", "32", "6000", "1400", "90", "warm"),
		row("mps50-8", "compiled", "mix", "64", "7000", "1600", "90", "warm"), // over 1.5 s
		row("mps25-8/eagerenc", "eager", "clip45", "64", "5000", "500", "45", "none"),
		// Start-up counts plans of the default's eight partitions, whatever
		// their MPS percentage; four partitions start faster and do not count.
		row("mps25-8", "compiled", "clip45", "64", "7000", "450", "50", "warm"),
		row("mps50-4", "compiled", "clip45", "64", "6000", "450", "30", "warm"),
		{"mps50-8", "mps", "cuda_graph", "clip45", "64", "100", "3", "30", "9999", "400", "500", "500", "8", "90", "0", "0", "1", "1", "1", "1", "compiled", "20", "warm"}, // the stand-in
	}
	writeResults(t, results, columns, rows)
	out, err := exec.Command("go", "run", ".", "compiled", "-results", results).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := "RESULT server=triton model=nemo encoder=inductor_regional_cudagraphs best_mode=mps50-8 served_audio_s_per_s=8000 mix_audio_s_per_s=6000 p99_ms=900 vs_eager=1.60 vs_best_published=0.65 warm_start_s=50 cold_start_s=300 c128_vs_c64=1.13 window_s=3 runs=2"
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestCompileCacheState(t *testing.T) {
	compiled, _ := parseArrangement("mps50-8")
	eager, _ := parseArrangement("mps50-8/eagerenc")
	set := func(keys ...string) map[string]bool {
		m := map[string]bool{}
		for _, k := range keys {
			m[k] = true
		}
		return m
	}
	for _, c := range []struct {
		name          string
		a             arrangement
		before, after map[string]bool
		want          string
	}{
		{"empty cache, first compile", compiled, set(), set("a.warm"), "cold"},
		{"the same key again", compiled, set("a.warm"), set("a.warm"), "warm"},
		// Another length bucket's marker was there: this one still compiled.
		{"another key compiled before", compiled, set("a.warm"), set("a.warm", "b.warm"), "cold"},
		{"nothing compiled", compiled, set(), set(), "none"},
		{"eager encoder", eager, nil, nil, "none"},
	} {
		if got := compileCacheState(c.a, c.before, c.after); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// An arrangement's KEY=VALUE suffixes are model parameters over the run's.
func TestArrangementParamsOverTheRuns(t *testing.T) {
	modelDir, _ := filepath.Abs("../../../../deploy/triton/models/asr/1")
	a, err := parseArrangement("mps25-8/cuda_sync=blocking/cpu_threads=2")
	if err != nil {
		t.Fatal(err)
	}
	m := modelFlags{modelDir: modelDir, kind: "KIND_GPU"}
	dir := t.TempDir()
	if err := m.write(dir, a, map[string]string{"cuda_sync": "spin", "length_buckets": "30,45"}); err != nil {
		t.Fatal(err)
	}
	p := readConfig(t, filepath.Join(dir, "asr", "config.pbtxt")).GetParameters()
	for k, want := range map[string]string{"cuda_sync": "blocking", "cpu_threads": "2", "length_buckets": "30,45"} {
		if got := p[k].GetStringValue(); got != want {
			t.Errorf("parameter %s is %q, want %q (all: %v)", k, got, want, p)
		}
	}
}

// "/diar.KEY=VALUE" suffixes are the diarize model's parameters, a "+" a
// comma; the speech model's stay its own, and without a diarize model they
// are an error.
func TestArrangementDiarizeParams(t *testing.T) {
	modelDir, _ := filepath.Abs("../../../../deploy/triton/models/asr/1")
	diarDir, _ := filepath.Abs("../../../../deploy/triton/models/diarize/1")
	a, err := parseArrangement("mps50-8/maxbatch16/row_parts=one/diar.row_parts=fit/diar.batch_buckets=1+2+4+8+16/diarinst2")
	if err != nil {
		t.Fatal(err)
	}
	m := modelFlags{modelDir: modelDir, kind: "KIND_GPU", diarizeDir: diarDir,
		diarize: map[string]string{"engine": "sortformer", "row_parts": "one", "chunk_seconds": "45"}}
	dir := t.TempDir()
	if err := m.write(dir, a, map[string]string{"length_buckets": "45"}); err != nil {
		t.Fatal(err)
	}
	asr := readConfig(t, filepath.Join(dir, "asr", "config.pbtxt")).GetParameters()
	if got := asr["row_parts"].GetStringValue(); got != "one" {
		t.Errorf("speech model's row_parts %q, want one", got)
	}
	if _, ok := asr["diar.row_parts"]; ok {
		t.Errorf("a diarize parameter reached the speech model: %v", asr)
	}
	if _, ok := asr["batch_buckets"]; ok {
		t.Errorf("a diarize parameter reached the speech model: %v", asr)
	}
	diarCfg := readConfig(t, filepath.Join(dir, modelspec.DiarizeName, "config.pbtxt"))
	if g := diarCfg.GetInstanceGroup(); len(g) != 1 || g[0].GetCount() != 2 {
		t.Errorf("diarize instance groups %v, want 2 (/diarinst2)", g)
	}
	if g := readConfig(t, filepath.Join(dir, "asr", "config.pbtxt")).GetInstanceGroup(); len(g) != 1 || g[0].GetCount() != 1 {
		t.Errorf("speech instance groups %v, want 1: /diarinst2 is the diarize model's", g)
	}
	diar := diarCfg.GetParameters()
	for k, want := range map[string]string{"row_parts": "fit", "batch_buckets": "1,2,4,8,16", "chunk_seconds": "45"} {
		if got := diar[k].GetStringValue(); got != want {
			t.Errorf("diarize parameter %s is %q, want %q", k, got, want)
		}
	}
	if m.diarize["row_parts"] != "one" {
		t.Errorf("the run's diarize parameters changed: %v", m.diarize)
	}
	m.diarize = nil
	if err := m.write(t.TempDir(), a, map[string]string{}); err == nil || !strings.Contains(err.Error(), "diar.row_parts") {
		t.Errorf("diar. without a diarize model: %v", err)
	}
}

func TestArrangementStudyKnobs(t *testing.T) {
	modelDir, _ := filepath.Abs("../../../../deploy/triton/models/asr/1")
	a, err := parseArrangement("mps50-8/maxbatch16/study.graphs=on/row_parts=fit/study.casts=eager")
	if err != nil {
		t.Fatal(err)
	}
	if got := a.study(); got != "graphs=on,casts=eager" {
		t.Errorf("study knobs %q, want graphs=on,casts=eager", got)
	}
	if env := a.env(); len(env) == 0 || env[len(env)-1] != "FLEETSCRIBE_ENCODER_STUDY=graphs=on,casts=eager" {
		t.Errorf("the partitions' environment does not carry the knobs: %q", env[max(0, len(env)-1):])
	}
	m := modelFlags{modelDir: modelDir, kind: "KIND_GPU"}
	dir := t.TempDir()
	if err := m.write(dir, a, map[string]string{}); err != nil {
		t.Fatal(err)
	}
	params := readConfig(t, filepath.Join(dir, "asr", "config.pbtxt")).GetParameters()
	if params["row_parts"].GetStringValue() != "fit" {
		t.Errorf("model parameter row_parts lost: %v", params)
	}
	for k := range params {
		if strings.Contains(k, "graphs") || strings.Contains(k, "casts") {
			t.Errorf("a study knob reached the model's parameters: %s", k)
		}
	}
	plain, _ := parseArrangement("mps50-8/maxbatch16")
	if plain.study() != "" || plain.env() != nil {
		t.Errorf("an arrangement without knobs changes the environment: %q", plain.env())
	}
}

// readConfig is the model configuration at path, read as Triton reads it.
func readConfig(t *testing.T, path string) *configpb.ModelConfig {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := modelspec.Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return cfg
}

// A point's CPU by group counts what a process of that group used between
// the readings: a child spinning on a CPU shows as "other", near one CPU.
func TestCPUByGroup(t *testing.T) {
	cmd := exec.Command("sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	before := readCPU()
	if _, ok := before.procs[cmd.Process.Pid]; !ok {
		t.Fatalf("the child %d is not among the processes read", cmd.Process.Pid)
	}
	var after cpuTimes
	testwait.For(t, "half a second of the child's CPU", func() bool {
		after = readCPU()
		return after.procs[cmd.Process.Pid].ticks-before.procs[cmd.Process.Pid].ticks >= 50
	})
	got := after.byGroup(before)
	var servers, stubs, mpsCPU, other float64
	var diarize, busiestSpeech, busiestDiarize float64
	if _, err := fmt.Sscanf(got, "servers %f, stubs %f (diarize %f; busiest speech %f, diarize %f), mps %f, other %f", &servers, &stubs,
		&diarize, &busiestSpeech, &busiestDiarize, &mpsCPU, &other); err != nil {
		t.Fatalf("%q: %v", got, err)
	}
	if other < 0.2 || after.procs[cmd.Process.Pid].group != "other" {
		t.Errorf("%q: want the spinning child in other", got)
	}
	// Groups by name; a process not alive at both readings is not counted.
	at := before.at
	// Of the stubs, the diarize model's summed apart, and each model's
	// busiest stub.
	b := cpuTimes{at: at, procs: map[int]procCPU{1: {group: "stubs", ticks: 100}, 2: {group: "stubs", ticks: 0}, 3: {group: "servers", ticks: 50},
		4: {group: "mps"}, 6: {group: "stubs", ticks: 10, diarize: true}, 7: {group: "stubs", ticks: 0, diarize: true}}}
	a := cpuTimes{at: at.Add(2 * time.Second), procs: map[int]procCPU{1: {group: "stubs", ticks: 300}, 2: {group: "stubs", ticks: 200},
		3: {group: "servers", ticks: 150}, 5: {group: "other", ticks: 900}, 6: {group: "stubs", ticks: 190, diarize: true},
		7: {group: "stubs", ticks: 60, diarize: true}}}
	if got, want := a.byGroup(b), "servers 0.5, stubs 3.2 (diarize 1.2; busiest speech 1.00, diarize 0.90), mps 0.0, other 0.0"; got != want {
		t.Errorf("byGroup = %q, want %q", got, want)
	}
}

// A stub is told apart by its model file, the first argument Triton's
// Python backend gives it (.../diarize/1/model.py): here two shells run
// such files.
func TestServesDiarize(t *testing.T) {
	dir := t.TempDir()
	for model, want := range map[string]bool{"diarize": true, "asr": false} {
		file := filepath.Join(dir, model, "1", "model.py")
		if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte("sleep 30\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("/bin/sh", file)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		got := servesDiarize(cmd.Process.Pid)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if got != want {
			t.Errorf("%s: servesDiarize %t, want %t", file, got, want)
		}
	}
}

// splitQuietest is the rule before audio.Split cut at the last pause: on
// the same signal it cuts at the window's deepest silence where Split cuts
// at its last pause, and its chunks cover the signal (overlapping where a
// cut is not in a pause).
func TestSplitQuietestIsTheRuleBefore(t *testing.T) {
	x := make([]float32, 10*rate)
	for i := range x {
		x[i] = float32(0.5 * math.Sin(2*math.Pi*300*float64(i)/rate))
	}
	for i := int(3.2 * rate); i < int(3.7*rate); i++ {
		x[i] = 0 // the deepest silence
	}
	for i := int(5.2 * rate); i < int(5.6*rate); i++ {
		x[i] *= 0.02 // a later pause
	}
	cfg := audio.SplitConfig{Max: 6 * rate, Frame: rate * 30 / 1000, Overlap: rate / 4}
	old, now := splitQuietest(x, cfg), audio.Split(x, cfg)
	first := func(n int) float64 { return float64(n) / rate }
	if got := first(len(old[0])); got < 3.2 || got > 3.7 {
		t.Errorf("quietest: first chunk ends at %.2f s, want in the silence at 3.2-3.7 s", got)
	}
	if got := first(len(now[0].Samples)); got < 5.2 || got > 5.6 {
		t.Errorf("audio.Split: first chunk ends at %.2f s, want in the last pause at 5.2-5.6 s", got)
	}
	n := 0
	for _, c := range old {
		if len(c) > cfg.Max {
			t.Errorf("a chunk of %d samples, over %d", len(c), cfg.Max)
		}
		n += len(c)
	}
	if n < len(x) || n > len(x)+(len(old)-1)*cfg.Overlap {
		t.Errorf("chunks hold %d samples of %d: want all, and at most an overlap a cut more", n, len(x))
	}
}

func TestDiarizeReportResultLine(t *testing.T) {
	dir := t.TempDir()
	results := filepath.Join(dir, "results.csv")
	row := func(workload, conc, audio, p99, errs string) []string {
		return []string{"mps50-8", "mps", "nemo", workload, conc, "100", "20", "30", audio, "400", "500", p99, "8", "90", errs, "0", "1", "1", "1", "1", "compiled", "60", "warm"}
	}
	rows := [][]string{
		row("clip45", "64", "11000", "450", "0"), row("clip45+diarize", "64", "8000", "900", "0"), row("clip45-diarize-only", "64", "26000", "300", "0"),
		// More in flight: more served with diarization, but over 1.5 s.
		row("clip45", "128", "10500", "700", "0"), row("clip45+diarize", "128", "8500", "1600", "0"), row("clip45-diarize-only", "128", "30000", "1700", "0"),
		row("mix", "32", "8000", "900", "0"), row("mix+diarize", "32", "6000", "1200", "0"),
	}
	writeResults(t, results, columns, rows)
	out, err := exec.Command("go", "run", ".", "diarize", "-results", results).CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	want := "RESULT model=sortformer asr_only_audio_s_per_s=11000 asr_diar_audio_s_per_s=8000 ratio=0.73 diar_only_audio_s_per_s=26000 p99_ms=900 mix_ratio=0.75 mix_runs=1 within_p99_limit=true asr_encoder=compiled runs=1 ratio_min=0.73 ratio_max=0.73"
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// With no point within 1.5 s, the closest is reported, and said to be over.
	out, err = exec.Command("go", "run", ".", "diarize", "-results", results, "-p99-ms", "800").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines = strings.Split(strings.TrimSpace(string(out)), "\n")
	want = "RESULT model=sortformer asr_only_audio_s_per_s=11000 asr_diar_audio_s_per_s=8000 ratio=0.73 diar_only_audio_s_per_s=26000 p99_ms=900 mix_ratio=0.00 mix_runs=0 within_p99_limit=false asr_encoder=compiled runs=1 ratio_min=0.73 ratio_max=0.73"
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// A point measured again (here in a second file) is a second run: a row
// each in the table, and with -min-runs 2 the headline is the best point
// measured twice, its figures the runs' means, its p99 the worse, its
// ratio's spread beside it; a better point measured once is not it. The
// length mix measured once is still reported, its runs beside it.
func TestDiarizeReportRuns(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, rows ...[]string) string {
		path := filepath.Join(dir, name)
		writeResults(t, path, columns, rows)
		return path
	}
	row := func(arrangement, workload, audio, p99 string) []string {
		return []string{arrangement, "mps", "nemo", workload, "64", "100", "20", "30", audio, "400", "500", p99, "8", "90", "0", "0", "1", "1", "1", "1", "compiled", "60", "warm"}
	}
	trio := func(arrangement, off, on, only, p99 string) [][]string {
		return [][]string{row(arrangement, "clip45", off, "400"), row(arrangement, "clip45+diarize", on, p99), row(arrangement, "clip45-diarize-only", only, "300")}
	}
	one := write("run1.csv", append(append(trio("a", "10000", "6000", "15000", "800"), trio("b", "10000", "7000", "16000", "700")...),
		row("a", "mix", "8000", "900"), row("a", "mix+diarize", "5200", "1200"))...)
	two := write("run2.csv", trio("a", "9000", "6300", "16000", "900")...)
	out, err := exec.Command("go", "run", ".", "diarize", "-results", one, "-results", two, "-min-runs", "2").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if n := strings.Count(string(out), "| a | clip45 | 64 |"); n != 2 {
		t.Errorf("%d rows of point a, want one a run:\n%s", n, out)
	}
	want := "RESULT model=sortformer asr_only_audio_s_per_s=9500 asr_diar_audio_s_per_s=6150 ratio=0.65 diar_only_audio_s_per_s=15500 p99_ms=900 mix_ratio=0.65 mix_runs=1 within_p99_limit=true asr_encoder=compiled runs=2 ratio_min=0.60 ratio_max=0.70"
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Without -min-runs the better point measured once leads.
	out, _ = exec.Command("go", "run", ".", "diarize", "-results", one, "-results", two).CombinedOutput()
	if !strings.Contains(string(out), "asr_diar_audio_s_per_s=7000 ratio=0.70 diar_only_audio_s_per_s=16000") {
		t.Errorf("one run each allowed: want point b to lead:\n%s", out)
	}
	if out, err := exec.Command("go", "run", ".", "diarize", "-results", one, "-min-runs", "2").CombinedOutput(); err == nil {
		t.Errorf("no point measured twice: want an error, got\n%s", out)
	}
}

// A second start of an arrangement logs beside the first start's log,
// which says why that start failed, instead of over it.
func TestNewLogKeepsAnEarlierStartsLog(t *testing.T) {
	dir := t.TempDir()
	var names []string
	for i := 0; i < 3; i++ {
		f, err := newLog(dir, "mps50-8_maxbatch16")
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "start %d\n", i+1)
		names = append(names, filepath.Base(f.Name()))
		f.Close()
	}
	want := []string{"mps50-8_maxbatch16.log", "mps50-8_maxbatch16-2.log", "mps50-8_maxbatch16-3.log"}
	if !slices.Equal(names, want) {
		t.Fatalf("logs %v, want %v", names, want)
	}
	b, err := os.ReadFile(filepath.Join(dir, want[0]))
	if err != nil || string(b) != "start 1\n" {
		t.Fatalf("the first start's log is %q (%v), want it kept", b, err)
	}
}

// Beside each other, each model's requests keep their own latencies, so
// the log line says which one makes the point's tail.
func TestSideBySideTellsTheModelsApart(t *testing.T) {
	var mu sync.Mutex
	p := &point{}
	start := time.Now().Add(-2 * time.Second)
	recordSpeech(p, &mu, start, nil)
	record(p, &mu, time.Now(), nil, 45, false)             // a diarize request beside it
	record(p, &mu, start, errors.New("failed"), 45, false) // a failed request has no latency to keep
	recordSpeech(p, &mu, start, errors.New("failed"))      // nor a failed speech request
	record(p, &mu, time.Now(), nil, 45, true)              // a counted request is neither model's side
	if len(p.speech) != 1 || len(p.diarize) != 1 {
		t.Fatalf("speech %v, diarize %v: want one each", p.speech, p.diarize)
	}
	if p.speech[0] < 2*time.Second || p.diarize[0] > time.Second {
		t.Errorf("speech %v, diarize %v: the slow one is the speech request", p.speech, p.diarize)
	}
	line := sideBySide(*p)
	if !strings.HasPrefix(line, "speech requests p50/p95/p99 ms 2") || !strings.Contains(line, "diarize requests 0.") {
		t.Errorf("line %q", line)
	}
	if got := sideBySide(point{}); got != "speech requests p50/p95/p99 ms none, diarize requests none" {
		t.Errorf("no requests: %q", got)
	}
}
