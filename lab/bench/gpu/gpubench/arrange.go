package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/modelspec/configpb"
	"github.com/fleetscribe/fleetscribe/mps"
)

// An arrangement is one way of sharing a GPU between model instances:
//
//	single          one Triton process, one model instance
//	instances-N     one Triton process, instance_group count N (one
//	                dynamic batcher feeding N instances; each Python-backend
//	                instance is its own process and CUDA context)
//	timesliced-N    N Triton processes, no MPS: the GPU time-slices their
//	                contexts
//	mpsP-N          N Triton processes as MPS clients capped at P% of the
//	                SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE)
//
// with optional suffixes: "/eager" (the model's eager decoder),
// "/eagerenc" (its encoder eagerly, not compiled), "/unbatched" (audio not
// ragged: only identical lengths share a batch), "/maxbatchN"
// (max_batch_size N instead of the shipped one, preferred sizes cut to it),
// "/vocabulary" (every transcription request carries -vocabulary's phrases),
// "/instN" (N model instances in each partition's Triton process, each
// its own process and CUDA context under the partition's MPS share: one
// batch's host work beside the other's GPU work), "/diarinstN" (N diarize
// model instances in each partition, the same for the diarize model),
// "/diarpackN" (the load's pool packs diarization requests N to a
// partition: triton.PoolConfig.DiarizePack)
// and "/KEY=VALUE" (a model parameter over the run's own, such as
// /cuda_sync=blocking or /cpu_threads=2; "/diar.KEY=VALUE" the diarize
// model's, over -diarize-param; a "+" in VALUE is a comma, since commas
// part the arrangements: /diar.batch_buckets=1+2+4+8+16; "/study.KEY=VALUE"
// a lab study knob of the speech model's encoder, passed to the
// partitions as FLEETSCRIBE_ENCODER_STUDY: /study.graphs=on).
type arrangement struct {
	name       string
	processes  int // Triton processes per GPU (plan partitions)
	instances  int // model instances per process
	diarInst   int // diarize model instances per process
	diarPack   int // the pool's DiarizePack (0: diarization spread as every request)
	percentage int // MPS thread percentage; 0: time-sliced
	decoder    string
	encoder    string // compiled (the shipped default) or eager
	unbatched  bool
	maxBatch   int    // 0: the shipped max_batch_size
	vocabulary bool   // requests carry -vocabulary's phrases
	params     string // model parameters of the name, KEY=VALUE/... (diar.KEY: the diarize model's; study.KEY: a study knob)
}

var (
	arrangementRE = regexp.MustCompile(`^(single|instances-(\d+)|timesliced-(\d+)|mps(\d+)-(\d+))((?:/(?:eagerenc|eager|unbatched|vocabulary|maxbatch\d+|inst\d+|diarinst\d+|diarpack\d+|(?:diar\.|study\.)?[a-z_]+=[A-Za-z0-9._+-]+))*)$`)
	maxBatchRE    = regexp.MustCompile(`/maxbatch(\d+)`)
	instRE        = regexp.MustCompile(`/inst(\d+)`)
	diarInstRE    = regexp.MustCompile(`/diarinst(\d+)`)
	diarPackRE    = regexp.MustCompile(`/diarpack(\d+)`)
	paramRE       = regexp.MustCompile(`/((?:diar\.|study\.)?[a-z_]+=[A-Za-z0-9._+-]+)`)
)

func parseArrangement(s string) (arrangement, error) {
	m := arrangementRE.FindStringSubmatch(s)
	if m == nil {
		return arrangement{}, fmt.Errorf("arrangement %q: want single, instances-N, timesliced-N or mpsP-N, with /eager, /eagerenc, /unbatched, /vocabulary, /maxbatchN, /instN, /diarinstN, /diarpackN or /KEY=VALUE", s)
	}
	a := arrangement{name: s, processes: 1, instances: 1, diarInst: 1, decoder: "cuda_graph"}
	n := func(v string) int { k, _ := strconv.Atoi(v); return k }
	switch {
	case m[2] != "":
		a.instances = n(m[2])
	case m[3] != "":
		a.processes = n(m[3])
	case m[4] != "":
		a.percentage, a.processes = n(m[4]), n(m[5])
		if a.percentage < 1 || a.percentage > 100 {
			return arrangement{}, fmt.Errorf("arrangement %q: percentage outside 1..100", s)
		}
	}
	if in := instRE.FindStringSubmatch(m[6]); in != nil {
		if m[2] != "" {
			return arrangement{}, fmt.Errorf("arrangement %q: instances-N already names the instances; /instN is for partitions", s)
		}
		a.instances = n(in[1])
	}
	if in := diarInstRE.FindStringSubmatch(m[6]); in != nil {
		a.diarInst = n(in[1])
	}
	if pk := diarPackRE.FindStringSubmatch(m[6]); pk != nil {
		a.diarPack = n(pk[1])
	}
	if a.processes < 1 || a.instances < 1 || a.diarInst < 1 {
		return arrangement{}, fmt.Errorf("arrangement %q: counts must be at least 1", s)
	}
	suffixes := strings.Split(m[6], "/")
	a.decoder = map[bool]string{true: "eager", false: "cuda_graph"}[slices.Contains(suffixes, "eager")]
	a.encoder = map[bool]string{true: "eager", false: "compiled"}[slices.Contains(suffixes, "eagerenc")]
	a.unbatched = strings.Contains(m[6], "/unbatched")
	a.vocabulary = slices.Contains(suffixes, "vocabulary")
	var params []string
	for _, p := range paramRE.FindAllStringSubmatch(m[6], -1) {
		params = append(params, p[1])
	}
	a.params = strings.Join(params, "/")
	if mb := maxBatchRE.FindStringSubmatch(m[6]); mb != nil {
		if a.maxBatch = n(mb[1]); a.maxBatch < 1 {
			return arrangement{}, fmt.Errorf("arrangement %q: max batch must be at least 1", s)
		}
	}
	return a, nil
}

// study is the arrangement's encoder study knobs as
// FLEETSCRIBE_ENCODER_STUDY says them (KEY=VALUE,...), or "".
func (a arrangement) study() string {
	var knobs []string
	for kv := range strings.SplitSeq(a.params, "/") {
		if k, ok := strings.CutPrefix(kv, "study."); ok {
			knobs = append(knobs, strings.ReplaceAll(k, "+", ","))
		}
	}
	return strings.Join(knobs, ",")
}

// env is the environment of the arrangement's partitions: this
// process's (nil), with its study knobs where it has any.
func (a arrangement) env() []string {
	if study := a.study(); study != "" {
		return append(os.Environ(), "FLEETSCRIBE_ENCODER_STUDY="+study)
	}
	return nil
}

// kind is the arrangement's family, for the report: single, instances,
// timesliced or mps.
func (a arrangement) kind() string {
	switch {
	case a.percentage > 0:
		return "mps"
	case a.instances > 1:
		return "instances"
	case a.processes > 1:
		return "timesliced"
	}
	return "single"
}

// plan is the arrangement as the worker's MPS plan: the same code that
// decides what a host runs and which addresses the worker dials.
func (a arrangement) plan(gpus []int, basePort int) ([]mps.Partition, error) {
	c := mps.PlanConfig{GPUs: gpus, PerGPU: a.processes, BasePort: basePort, Sharing: mps.SharingTimeSliced}
	if a.percentage > 0 {
		c.Sharing, c.Percentage = mps.SharingMPS, a.percentage
	}
	return mps.Plan(c)
}

// planFlags are the `worker mps run` flags of the same plan.
func (a arrangement) planFlags(gpus []int, basePort int) []string {
	list := make([]string, len(gpus))
	for i, g := range gpus {
		list[i] = strconv.Itoa(g)
	}
	flags := []string{"-gpus", strings.Join(list, ","), "-per-gpu", strconv.Itoa(a.processes), "-base-port", strconv.Itoa(basePort)}
	if a.percentage > 0 {
		return append(flags, "-sharing", mps.SharingMPS, "-percentage", strconv.Itoa(a.percentage))
	}
	return append(flags, "-sharing", mps.SharingTimeSliced)
}

// writeRepo writes a model repository in dir whose model is the shipped
// GPU configuration (modelspec.GPU, what deploy/triton/models ships) with
// the arrangement's instance group, batching mode and maximum batch, and
// params as its parameters, and whose version 1 is the shipped model.py's
// folder: the batching the benchmark measures is the batching that ships.
func writeRepo(dir, modelDir string, kind configpb.ModelInstanceGroup_Kind, a arrangement, params map[string]string) error {
	cfg := modelspec.GPU()
	cfg.Header, cfg.Batching.Comment, cfg.InstanceComment = "", "", ""
	cfg.Instances, cfg.Kind = a.instances, kind
	cfg.Unragged = a.unbatched
	if a.maxBatch > 0 {
		cfg = cfg.WithMaxBatch(a.maxBatch)
	}
	md := filepath.Join(dir, modelspec.Name)
	if err := os.MkdirAll(md, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(md, "config.pbtxt"), []byte(cfg.WithParameters(params).Render()), 0o644); err != nil {
		return err
	}
	return os.Symlink(modelDir, filepath.Join(md, "1"))
}

// writeDiarize adds the GPU repository's diarize model (modelspec.Diarize:
// Sortformer) to the repository in dir: the arrangement's instances a
// partition (one unless /diarinstN), of kind,
// with params over the shipped ones (the CPU repositories' where params
// name engine pyannote_campp: a check of the benchmark without a GPU).
func writeDiarize(dir, modelDir string, kind configpb.ModelInstanceGroup_Kind, a arrangement, params map[string]string) error {
	cfg := modelspec.Diarize(params["engine"] != "pyannote_campp")
	cfg.Header, cfg.InstanceComment, cfg.Kind, cfg.Instances = "", "", kind, a.diarInst
	if a.maxBatch > 0 {
		cfg = cfg.WithMaxBatch(a.maxBatch)
	}
	md := filepath.Join(dir, modelspec.DiarizeName)
	if err := os.MkdirAll(md, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(md, "config.pbtxt"), []byte(cfg.WithParameters(params).Render()), 0o644); err != nil {
		return err
	}
	return os.Symlink(modelDir, filepath.Join(md, "1"))
}

// host runs an arrangement's partitions through `worker mps run` (the
// worker binary's host-process supervisor, MPS daemon included) until
// stop is called.
type host struct {
	cmd  *exec.Cmd
	done chan struct{}
}

type hostConfig struct {
	worker, tritonserver, mpsControl string
	gpus                             []int
	basePort                         int
	pipeDir, logDir                  string
	log                              io.Writer
	readyTimeout                     time.Duration
}

func startHost(ctx context.Context, hc hostConfig, a arrangement, repo string) (*host, []string, error) {
	plan, err := a.plan(hc.gpus, hc.basePort)
	if err != nil {
		return nil, nil, err
	}
	args := append([]string{"mps", "run"}, a.planFlags(hc.gpus, hc.basePort)...)
	args = append(args, "-mps-control", hc.mpsControl, "-pipe-dir", hc.pipeDir, "-log-dir", hc.logDir, "--", hc.tritonserver)
	args = append(args, tritonproc.Args(repo, "{grpc_port}", "{http_port}", "{metrics_port}")...)
	cmd := exec.Command(hc.worker, args...)
	cmd.Env = a.env()
	failed := &exitWatch{out: hc.log, exited: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = failed, failed
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("start worker mps run: %w", err)
	}
	h := &host{cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(h.done)
		failed.once.Do(func() { close(failed.exited) })
	}()
	addrs := mps.Addrs("127.0.0.1", plan)
	for _, addr := range addrs {
		if err := tritonproc.WaitReady(ctx, addr, []string{"asr"}, hc.readyTimeout, failed.exited); err != nil {
			h.stop()
			return nil, nil, err
		}
	}
	return h, addrs, nil
}

// exitWatch passes the supervisor's output on and closes exited when it
// says a partition exited (or when the supervisor itself ends): a
// partition that cannot load is restarted for ever, and the benchmark
// should stop at once, not at its ready timeout.
type exitWatch struct {
	out    io.Writer
	once   sync.Once
	exited chan struct{}
}

func (w *exitWatch) Write(b []byte) (int, error) {
	if strings.Contains(string(b), "partition exited") {
		w.once.Do(func() { close(w.exited) })
	}
	if w.out == nil {
		return len(b), nil
	}
	return w.out.Write(b)
}

// stop ends the supervisor with SIGTERM (it stops its partitions and the
// MPS daemon), and the whole group with SIGKILL after 30 s.
func (h *host) stop() {
	_ = syscall.Kill(h.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-h.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
		<-h.done
	}
}

var errNoArrangements = errors.New("no arrangements to run")
