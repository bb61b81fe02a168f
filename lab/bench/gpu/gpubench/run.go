package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetscribe/fleetscribe/internal/flagext"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/mps"
)

// loadFlags are the workload's flags, shared by run and sweep.
type loadFlags struct {
	concurrency  flagext.StringSliceCSV
	workload     string
	clipSeconds  float64
	chunkSeconds float64
	chunkPar     int
	inflight     int
	split        string
	diarize      flagext.StringSliceCSV
	vocabulary   int
	warm, dur    time.Duration
	out          string
}

func (l *loadFlags) register(fs *flag.FlagSet) {
	l.concurrency = flagext.StringSliceCSV{"64", "128", "256", "512"}
	fs.Var(&l.concurrency, "concurrency", "clips (workload clip) or recordings (mix) in flight, one point each")
	fs.StringVar(&l.workload, "workload", "clip", "clip: fixed clips of -clip-seconds in a closed loop; mix: recordings of the realistic length mix, chunked as the worker does")
	fs.Float64Var(&l.clipSeconds, "clip-seconds", 45, "clip length (workload clip)")
	fs.Float64Var(&l.chunkSeconds, "chunk-seconds", 30, "the worker's -chunk-seconds (workload mix)")
	fs.IntVar(&l.chunkPar, "chunk-parallelism", 64, "the worker's -chunk-parallelism (workload mix)")
	fs.IntVar(&l.inflight, "max-inflight", 16, "the worker's -triton-max-inflight: requests in flight a partition (workload mix; clips are as many as -concurrency)")
	fs.StringVar(&l.split, "split", "worker", "how the mix is chunked: worker (audio.Split, as the worker does) or quietest (the rule before it cut at the last pause, for a side-by-side run; workload mix-quietest)")
	l.diarize = flagext.StringSliceCSV{"off"}
	fs.Var(&l.diarize, "diarize", "diarization of each point, one row each, side by side: off (speech only), on (speech and the diarize model on every recording, as the worker does a job that asks for speakers), only (the diarize model alone); on and only need -diarize-param")
	fs.IntVar(&l.vocabulary, "vocabulary", 0, "phrases of a synthetic vocabulary sent with every request of the arrangements with /vocabulary (0: none)")
	fs.DurationVar(&l.dur, "duration", 5*time.Second, "measured time per point")
	fs.DurationVar(&l.warm, "warmup", 2*time.Second, "unmeasured time before each point")
	fs.StringVar(&l.out, "out", "results.csv", "CSV to append to")
}

func (l *loadFlags) config(addrs []string) (loadConfig, error) {
	if l.workload != "clip" && l.workload != "mix" {
		return loadConfig{}, fmt.Errorf("-workload %q: want clip or mix", l.workload)
	}
	if l.split != "worker" && l.split != "quietest" {
		return loadConfig{}, fmt.Errorf("-split %q: want worker or quietest", l.split)
	}
	lc := loadConfig{addrs: addrs, mix: l.workload == "mix", clipSeconds: l.clipSeconds, chunkSeconds: l.chunkSeconds,
		chunkPar: l.chunkPar, inflight: l.inflight, quietest: l.split == "quietest", warm: l.warm, dur: l.dur}
	for _, d := range l.diarize {
		if d != "off" && d != "on" && d != "only" {
			return loadConfig{}, fmt.Errorf("-diarize %q: want off, on or only, comma-separated", d)
		}
		lc.diarize = append(lc.diarize, d)
	}
	if !lc.mix {
		lc.chunkPar = 1
	}
	for _, c := range l.concurrency {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 {
			return loadConfig{}, fmt.Errorf("-concurrency %q: want positive numbers", c)
		}
		lc.concurrency = append(lc.concurrency, n)
	}
	return lc, nil
}

// runCmd is `gpubench run [flags] ARRANGEMENT...`.
func runCmd(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var l loadFlags
	l.register(fs)
	var hc hostConfig
	var gpus flagext.StringSliceCSV = []string{"0"}
	fs.Var(&gpus, "gpus", "GPUs of the plan")
	fs.StringVar(&hc.worker, "worker", "bin/worker", "the worker binary (its `mps run` starts the partitions)")
	fs.StringVar(&hc.tritonserver, "tritonserver", "scripts/tritonserver", "how to run tritonserver")
	fs.StringVar(&hc.mpsControl, "mps-control", "nvidia-cuda-mps-control", "nvidia-cuda-mps-control binary")
	fs.IntVar(&hc.basePort, "base-port", 9100, "gRPC port of the first partition of the first arrangement")
	fs.StringVar(&hc.pipeDir, "pipe-dir", "/tmp/fleetscribe-mps-pipe", "CUDA_MPS_PIPE_DIRECTORY")
	fs.StringVar(&hc.logDir, "mps-log-dir", "/tmp/fleetscribe-mps-log", "CUDA_MPS_LOG_DIRECTORY")
	fs.DurationVar(&hc.readyTimeout, "ready-timeout", 5*time.Minute, "how long partitions may take to load")
	var m modelFlags
	m.register(fs)
	logDir := fs.String("log", "", "folder for each arrangement's partition output (default: discarded)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errNoArrangements
	}
	var arrs []arrangement
	for _, s := range fs.Args() {
		a, err := parseArrangement(s)
		if err != nil {
			return err
		}
		arrs = append(arrs, a)
	}
	var err error
	if hc.gpus, err = mps.ParseGPUList(strings.Join(gpus, ",")); err != nil {
		return err
	}
	if hc.worker, err = filepath.Abs(hc.worker); err != nil {
		return err
	}
	if strings.Contains(hc.tritonserver, "/") {
		if hc.tritonserver, err = filepath.Abs(hc.tritonserver); err != nil {
			return err
		}
	}
	base, err := m.resolve()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var failed []string
	for i, a := range arrs {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// One arrangement that cannot run (no MPS here, out of memory) is
		// reported, and the others still run.
		if err := runArrangement(ctx, hc, l, a, i, m, base, *logDir); err != nil {
			fmt.Printf("# %s: failed: %v\n", a.name, err)
			failed = append(failed, a.name)
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d arrangements failed: %s", len(failed), len(arrs), strings.Join(failed, ", "))
	}
	return nil
}

func runArrangement(ctx context.Context, hc hostConfig, l loadFlags, a arrangement, i int, m modelFlags, base map[string]string, logDir string) error {
	repo, err := os.MkdirTemp("", "gpubench-repo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(repo)
	if err := m.write(repo, a, base); err != nil {
		return err
	}
	hc.log = nil
	if logDir != "" {
		if err := os.MkdirAll(logDir, 0o755); err != nil {
			return err
		}
		f, err := newLog(logDir, strings.ReplaceAll(a.name, "/", "_"))
		if err != nil {
			return err
		}
		defer f.Close()
		hc.log = f
	}
	hc.basePort += 100 * i // no port of a stopped arrangement is reused
	before := compileMarkers(a)
	started := time.Now()
	h, addrs, err := startHost(ctx, hc, a, repo)
	if err != nil {
		return err
	}
	defer h.stop()
	ready := time.Since(started).Seconds()
	cache := compileCacheState(a, before, compileMarkers(a))
	fmt.Printf("# %s: %d partitions ready in %.0f s, compile cache %s (%s)\n", a.name, len(addrs), ready, cache, strings.Join(addrs, ","))
	lc, err := l.config(addrs)
	if err != nil {
		return err
	}
	lc.diarizePack = a.diarPack
	if l.vocabulary > 0 && a.vocabulary {
		lc.vocabulary = synthVocabulary(l.vocabulary)
	}
	rows, err := measure(ctx, lc)
	if err != nil {
		return err
	}
	decoder := a.decoder
	if e := base["engine"]; e == "" || e == "parakeet" { // the shipped engine: NeMo's own decoding
		decoder = "nemo"
	}
	for _, r := range rows {
		row := append(append([]string{a.name, a.kind(), decoder}, r...), a.encoder, strconv.FormatFloat(ready, 'f', 1, 64), cache)
		fmt.Println(strings.Join(row, "\t"))
		if err := appendCSV(l.out, row); err != nil {
			return err
		}
	}
	return nil
}

// compileMarkers are the keys model.py's compile cache
// ($FLEETSCRIBE_COMPILE_CACHE, as model.py reads it) has compiled: one
// "KEY.warm" file each, written once the first partition to need that key
// has compiled it. Nil for an arrangement whose encoder runs eagerly.
func compileMarkers(a arrangement) map[string]bool {
	if a.encoder != "compiled" {
		return nil
	}
	dir := os.Getenv("FLEETSCRIBE_COMPILE_CACHE")
	if dir == "" {
		dir = "/tmp/fleetscribe-compile-cache"
	}
	m, _ := filepath.Glob(filepath.Join(dir, "*.warm"))
	out := make(map[string]bool, len(m))
	for _, f := range m {
		out[filepath.Base(f)] = true
	}
	return out
}

// compileCacheState says how an arrangement's partitions found the compile
// cache, from its markers before and after they started: cold (a key was
// compiled while they started: the first partition compiled, the others
// waited), warm (every key they needed was compiled before), or none (the
// encoder runs eagerly, or compiled nothing). A marker of another key (other
// length buckets, another model) says nothing about this arrangement's.
func compileCacheState(a arrangement, before, after map[string]bool) string {
	if a.encoder != "compiled" || len(after) == 0 {
		return "none"
	}
	for k := range after {
		if !before[k] {
			return "cold"
		}
	}
	return "warm"
}

// sweepCmd is `gpubench sweep -addrs A,B [flags]`: the load against
// partitions already running.
func sweepCmd(args []string) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	var l loadFlags
	l.register(fs)
	var addrs flagext.StringSliceCSV
	fs.Var(&addrs, "addrs", "partition addresses")
	name := fs.String("arrangement", "external", "name for the CSV")
	if err := fs.Parse(args); err != nil {
		return err
	}
	lc, err := l.config(addrs)
	if err != nil {
		return err
	}
	rows, err := measure(context.Background(), lc)
	if err != nil {
		return err
	}
	for _, r := range rows {
		row := append(append([]string{*name, "external", "-"}, r...), "-", "0", "-")
		fmt.Println(strings.Join(row, "\t"))
		if err := appendCSV(l.out, row); err != nil {
			return err
		}
	}
	return nil
}

// modelFlags say what model repository to write: the shipped
// configuration and model.py, with the benchmark's engine.
type modelFlags struct {
	modelDir, engine, kind string
	params                 flagext.StringSliceCSV
	diarizeDir             string
	diarizeParams          flagext.StringSliceCSV
	diarize                map[string]string // the diarize model's parameters (resolve); nil: none
}

func (m *modelFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.modelDir, "model-dir", "deploy/triton/models/asr/1", "the shipped model.py's folder")
	fs.StringVar(&m.engine, "engine", "lab/bench/gpu/standin.py", "the model's engine (model.py engine=module); empty: the shipped engine (parakeet) with -param model=FILE.nemo")
	fs.Var(&m.params, "param", "further model parameters, key=value,... (a value may hold commas: length_buckets=30,45)")
	fs.StringVar(&m.kind, "instance-kind", "KIND_GPU", "the instance group's kind (KIND_CPU: a check of the benchmark on a host without GPUs)")
	fs.StringVar(&m.diarizeDir, "diarize-model-dir", "deploy/triton/models/diarize/1", "the shipped diarize model.py's folder")
	fs.Var(&m.diarizeParams, "diarize-param", "the diarize model's parameters over the GPU repository's (engine sortformer), key=value,...; empty: no diarize model")
}

// resolve makes the paths absolute and returns the model parameters.
func (m *modelFlags) resolve() (map[string]string, error) {
	var err error
	if m.modelDir, err = filepath.Abs(m.modelDir); err != nil {
		return nil, err
	}
	params := map[string]string{}
	if m.engine != "" {
		abs, err := filepath.Abs(m.engine)
		if err != nil {
			return nil, err
		}
		params["engine"], params["module"] = "module", abs
	}
	if err := modelspec.AddParameters(params, m.params); err != nil {
		return nil, fmt.Errorf("-param: %w", err)
	}
	if len(m.diarizeParams) > 0 {
		if m.diarizeDir, err = filepath.Abs(m.diarizeDir); err != nil {
			return nil, err
		}
		m.diarize = map[string]string{}
		if err := modelspec.AddParameters(m.diarize, m.diarizeParams); err != nil {
			return nil, fmt.Errorf("-diarize-param: %w", err)
		}
	}
	return params, nil
}

// write writes the arrangement's repository in dir.
func (m *modelFlags) write(dir string, a arrangement, base map[string]string) error {
	params := maps.Clone(base)
	// The model refuses parameters its engine does not read: the encoder
	// is a torch engine's (parakeet, module), the decoder the stand-in's.
	switch params["engine"] {
	case "module":
		params["encoder"], params["decoder"] = a.encoder, a.decoder
	case "", "parakeet":
		params["encoder"] = a.encoder
	}
	diarize := maps.Clone(m.diarize)
	for kv := range strings.SplitSeq(a.params, "/") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || strings.HasPrefix(k, "study.") { // study knobs go to the partitions' environment (startHost)
			continue
		}
		v = strings.ReplaceAll(v, "+", ",")
		if dk, isDiar := strings.CutPrefix(k, "diar."); isDiar {
			if diarize == nil {
				return fmt.Errorf("arrangement %s: %s without a diarize model (-diarize-param)", a.name, k)
			}
			diarize[dk] = v
			continue
		}
		params[k] = v
	}
	kind, err := modelspec.ParseKind(m.kind)
	if err != nil {
		return err
	}
	if err := writeRepo(dir, m.modelDir, kind, a, params); err != nil {
		return err
	}
	if diarize == nil {
		return nil
	}
	return writeDiarize(dir, m.diarizeDir, kind, a, diarize)
}

// repoCmd is `gpubench repo -dir D [flags]`: the repository one partition
// of the benchmark serves (one model instance), for partitions started by
// hand or by a plan, as deploy/mps/gpu-check.sh does.
func repoCmd(args []string) error {
	fs := flag.NewFlagSet("repo", flag.ContinueOnError)
	var m modelFlags
	m.register(fs)
	dir := fs.String("dir", "", "folder to write the repository in")
	name := fs.String("arrangement", "single", "arrangement whose model configuration to write (instances, /eager, /maxbatchN)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dir == "" {
		return errors.New("repo: -dir is required")
	}
	a, err := parseArrangement(*name)
	if err != nil {
		return err
	}
	base, err := m.resolve()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*dir, 0o755); err != nil {
		return err
	}
	return m.write(*dir, a, base)
}

// newLog creates dir/name.log, or where an earlier start of the same
// arrangement left one (a run that names it twice, or a second call of
// run.sh into the same folder), name-2.log, name-3.log, ...: a failed
// start's log is what says why, and the next start must not overwrite it.
func newLog(dir, name string) (*os.File, error) {
	for i := 1; ; i++ {
		p := filepath.Join(dir, name+".log")
		if i > 1 {
			p = filepath.Join(dir, fmt.Sprintf("%s-%d.log", name, i))
		}
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			return f, err
		}
	}
}
