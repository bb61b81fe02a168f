package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/mps"
)

func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	root, _ := filepath.Abs("../..")
	return loadComposeFiles(t, root, []string{filepath.Join(root, "docker-compose.yml"), filepath.Join(root, "docker-compose.override.yml")}, profiles...)
}

func loadComposeFiles(t *testing.T, root string, files []string, profiles ...string) *types.Project {
	t.Helper()
	return loadComposeEnv(t, root, files, []string{"FLEETSCRIBE_QUEUE_URL=https://sqs.example/q", "FLEETSCRIBE_OUTPUT_BUCKET=out"}, profiles...)
}

func loadComposeEnv(t *testing.T, root string, files, environ []string, profiles ...string) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions(files,
		cli.WithWorkingDirectory(root),
		cli.WithEnv(environ),
		cli.WithProfiles(profiles),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%v do not load: %v", files, err)
	}
	return p
}

func env(s types.ServiceConfig, k string) string {
	if v, ok := s.Environment[k]; ok && v != nil {
		return *v
	}
	return ""
}

func workerFlags() map[string]bool {
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.registerFlags(fs)
	names := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { names[flagenv.Name(EnvPrefix, f.Name)] = true })
	return names
}

func TestComposeStackShape(t *testing.T) {
	p := loadCompose(t)
	daemon, err := p.GetService("mps")
	if err != nil {
		t.Fatal(err)
	}
	pipe := env(daemon, "CUDA_MPS_PIPE_DIRECTORY")
	if pipe == "" || daemon.Ipc != "host" || !slices.Contains(daemon.Command, "nvidia-cuda-mps-control") {
		t.Fatalf("mps service: ipc %q, pipe %q, command %v", daemon.Ipc, pipe, daemon.Command)
	}
	w, err := p.GetService("worker")
	if err != nil {
		t.Fatal(err)
	}
	checkPartitions(t, p, pipe, []int{0}, mps.DefaultPerGPU)
	if w.StopGracePeriod == nil {
		t.Error("worker has no stop_grace_period to drain in")
	}
	if _, err := p.GetService("fauxqs"); err == nil {
		t.Error("the local emulator should only run with the local profile")
	}
	if _, err := loadCompose(t, "local").GetService("fauxqs"); err != nil {
		t.Errorf("local profile: %v", err)
	}
}

// docker-compose sets worker settings by the names --help gives them (the
// configuration reference is the flags', TestConfigurationReferenceIsCurrent).
func TestComposeUsesWorkerFlagNames(t *testing.T) {
	known := workerFlags()
	p := loadCompose(t)
	for _, name := range []string{"worker"} {
		w, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		for k := range w.Environment {
			if strings.HasPrefix(k, EnvPrefix+"_") && !known[k] {
				t.Errorf("docker-compose %s sets %s, which is no worker flag", name, k)
			}
		}
	}
}

// Settings in the instance's .env (the Terraform user data writes
// worker_environment there) reach the worker container, also those the
// compose file does not name, such as FLEETSCRIBE_JOB_TIMEOUT, which must
// agree with the queue's visibility timeout.
func TestDotEnvReachesTheWorker(t *testing.T) {
	root, _ := filepath.Abs("../..")
	dir := t.TempDir()
	compose, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "docker-compose.yml"), compose, 0o644); err != nil {
		t.Fatal(err)
	}
	dotenv := strings.Join([]string{
		"FLEETSCRIBE_QUEUE_URL=https://sqs.example/live",
		"FLEETSCRIBE_OUTPUT_BUCKET=out",
		"FLEETSCRIBE_JOB_TIMEOUT=1800s",
		"FLEETSCRIBE_MEMORY_BUDGET=8000000000",
		"FLEETSCRIBE_DRAIN_TIMEOUT=300s",
		"FLEETSCRIBE_BULK_QUEUE_URL=https://sqs.example/bulk",
	}, "\n") + "\n"
	if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(dotenv), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "docker-compose.yml")},
		cli.WithWorkingDirectory(dir), cli.WithEnvFiles(), cli.WithDotEnv, cli.WithDefaultProfiles())
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"worker"} {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		if got := env(s, "FLEETSCRIBE_JOB_TIMEOUT"); got != "1800s" {
			t.Errorf("%s: FLEETSCRIBE_JOB_TIMEOUT = %q, want the .env value", name, got)
		}
		if got := env(s, "FLEETSCRIBE_MEMORY_BUDGET"); got != "8000000000" {
			t.Errorf("%s: FLEETSCRIBE_MEMORY_BUDGET = %q", name, got)
		}
	}
	// One worker drains both queues, live first.
	w, _ := p.GetService("worker")
	if got := env(w, "FLEETSCRIBE_LOWER_QUEUE_URLS"); got != "https://sqs.example/bulk" {
		t.Errorf("the worker's lower queues are %q, want the bulk queue", got)
	}
	if _, err := p.GetService("worker-bulk"); err == nil {
		t.Error("a second worker competes with the first for the partitions")
	}
}

// checkPartitions checks a loaded stack against the plan for gpus x perGPU:
// one service per partition, pinned to its GPU with its thread share and
// ports, sharing the daemon's pipe, and the worker dialling exactly the
// plan's addresses once every partition is healthy.
func checkPartitions(t *testing.T, p *types.Project, pipe string, gpus []int, perGPU int) {
	t.Helper()
	plan, err := mps.Plan(mps.PlanConfig{GPUs: gpus, PerGPU: perGPU, BasePort: 8001})
	if err != nil {
		t.Fatal(err)
	}
	w, err := p.GetService("worker")
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Split(env(w, "FLEETSCRIBE_TRITON_ADDRS"), ",")
	if want := mps.ComposeAddrs(plan); !slices.Equal(addrs, want) {
		t.Errorf("worker dials %v, the plan says %v", addrs, want)
	}
	if got := env(w, "FLEETSCRIBE_GPUS"); got != strconv.Itoa(len(gpus)) {
		t.Errorf("FLEETSCRIBE_GPUS = %q, want %d", got, len(gpus))
	}
	// The worker accepts what the stack gives it.
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.registerFlags(fs)
	if err := fs.Parse([]string{"-triton-addrs", env(w, "FLEETSCRIBE_TRITON_ADDRS"), "-gpus", env(w, "FLEETSCRIBE_GPUS")}); err != nil || len(cfg.pool.Addrs) != len(plan) {
		t.Errorf("worker flags: %v, %d addrs", err, len(cfg.pool.Addrs))
	}
	daemon, _ := p.GetService("mps")
	wantIDs := make([]string, len(gpus))
	for i, g := range gpus {
		wantIDs[i] = strconv.Itoa(g)
	}
	if daemon.Deploy == nil || len(daemon.Deploy.Resources.Reservations.Devices) != 1 ||
		!slices.Equal(daemon.Deploy.Resources.Reservations.Devices[0].IDs, wantIDs) || env(daemon, "CUDA_VISIBLE_DEVICES") != strings.Join(wantIDs, ",") {
		t.Errorf("the MPS daemon does not get GPUs %v: %+v %v", wantIDs, daemon.Deploy, daemon.Environment)
	}
	tritons := 0
	for name := range p.Services {
		if strings.HasPrefix(name, "triton-") {
			tritons++
		}
	}
	if tritons != len(plan) {
		t.Errorf("%d triton services, plan has %d partitions", tritons, len(plan))
	}
	for i, part := range plan {
		name := mps.ServiceName(part)
		tr, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		if pct := mps.DefaultPercentage(perGPU); env(tr, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != strconv.Itoa(pct) || env(tr, "CUDA_MPS_PIPE_DIRECTORY") != pipe ||
			env(tr, "CUDA_VISIBLE_DEVICES") != strconv.Itoa(part.GPU) || tr.Ipc != "host" {
			t.Errorf("%s is not a %d%% MPS client of the shared daemon on GPU %d: %v ipc=%q", name, pct, part.GPU, tr.Environment, tr.Ipc)
		}
		mounted := false
		for _, v := range tr.Volumes {
			mounted = mounted || v.Target == pipe
		}
		if !mounted {
			t.Errorf("%s does not mount the MPS pipe directory %s", name, pipe)
		}
		if tr.Deploy == nil || len(tr.Deploy.Resources.Reservations.Devices) == 0 {
			t.Errorf("%s reserves no GPU", name)
		}
		if !slices.Contains(tr.Command, "--grpc-port="+strconv.Itoa(part.GRPCPort)) || !strings.HasSuffix(addrs[i], ":"+strconv.Itoa(part.GRPCPort)) {
			t.Errorf("%s listens with %v; the worker dials %s", name, tr.Command, addrs[i])
		}
		if tr.HealthCheck == nil || !slices.Contains(tr.HealthCheck.Test, "http://localhost:"+strconv.Itoa(part.HTTPPort)+"/v2/health/ready") {
			t.Errorf("%s health check %v misses its HTTP port %d", name, tr.HealthCheck, part.HTTPPort)
		}
		if d, ok := w.DependsOn[name]; !ok || d.Condition != "service_healthy" {
			t.Errorf("worker does not wait for %s to be healthy", name)
		}
	}
}

// `worker mps compose` for 1, 4 and 8 GPUs (the g6e sizes) gives stacks
// that load and agree with the plan; the committed override is the
// one-GPU rendering, byte for byte.
func TestMPSComposeForEveryGPUCount(t *testing.T) {
	root, _ := filepath.Abs("../..")
	base, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 4, 8} {
		t.Run(strconv.Itoa(n)+"gpus", func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "docker-compose.yml"), base, 0o644); err != nil {
				t.Fatal(err)
			}
			var stdout, stderr bytes.Buffer
			gpus := "0-" + strconv.Itoa(n-1)
			override := filepath.Join(dir, "docker-compose.override.yml")
			if err := runMPS(t.Context(), []string{"compose", "-gpus", gpus, "-o", override}, &stdout, &stderr); err != nil {
				t.Fatalf("%v: %s", err, stderr.String())
			}
			p := loadComposeFiles(t, dir, []string{filepath.Join(dir, "docker-compose.yml"), override})
			all := make([]int, n)
			for i := range all {
				all[i] = i
			}
			checkPartitions(t, p, "/tmp/nvidia-mps", all, mps.DefaultPerGPU)
			// The plan's own view of the worker's addresses is the same list.
			stdout.Reset()
			if err := runMPS(t.Context(), []string{"plan", "-gpus", gpus, "-format", "compose-addrs"}, &stdout, &stderr); err != nil {
				t.Fatal(err)
			}
			w, _ := p.GetService("worker")
			if got := strings.TrimSpace(stdout.String()); got != env(w, "FLEETSCRIBE_TRITON_ADDRS") {
				t.Errorf("mps plan says %s, the stack %s", got, env(w, "FLEETSCRIBE_TRITON_ADDRS"))
			}
		})
	}
	var stdout, stderr bytes.Buffer
	if err := runMPS(t.Context(), []string{"compose", "-gpus", "0"}, &stdout, &stderr); err != nil {
		t.Fatal(err)
	}
	committed, err := os.ReadFile(filepath.Join(root, "docker-compose.override.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(committed, stdout.Bytes()) {
		t.Error("docker-compose.override.yml is not `worker mps compose -gpus 0`: regenerate it")
	}
}

func TestMPSCommandErrors(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"plan", "-gpus", "x"},
		{"plan", "-gpus", "0", "-per-gpu", "49"},
		{"plan", "-gpus", "0", "-mem-limit", "lots"},
		{"plan", "-gpus", "0", "-format", "xml"},
		{"run", "-gpus", "0"},
		{"plan", "-gpus", "auto", "-nvidia-smi", "/nonexistent/nvidia-smi"},
	} {
		var stdout, stderr bytes.Buffer
		if err := runMPS(t.Context(), args, &stdout, &stderr); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}

// The monitoring profile runs Prometheus with the alert rules and Grafana
// with the dashboard provisioned, from files that exist.
func TestComposeMonitoringProfile(t *testing.T) {
	if _, err := loadCompose(t).GetService("prometheus"); err == nil {
		t.Error("Prometheus should only run with the monitoring profile")
	}
	p := loadCompose(t, "monitoring")
	root, _ := filepath.Abs("../..")
	for name, targets := range map[string][]string{
		"prometheus": {"/etc/prometheus/prometheus.yml", "/etc/prometheus/alerts.yml"},
		"grafana":    {"/etc/grafana/provisioning", "/var/lib/grafana/dashboards"},
	} {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range targets {
			found := false
			for _, v := range s.Volumes {
				if v.Target != target {
					continue
				}
				found = true
				if _, err := os.Stat(v.Source); err != nil || !strings.HasPrefix(v.Source, root) {
					t.Errorf("%s mounts %s from %s: %v", name, target, v.Source, err)
				}
			}
			if !found {
				t.Errorf("%s does not mount %s", name, target)
			}
		}
	}
}

// Secure defaults of the stack: the worker's allow-list comes from the
// input bucket (without one the worker refuses to start, rather than
// reading any bucket), and its metrics and readiness are published on the
// host's loopback unless a scraper elsewhere is named.
func TestComposeSecureDefaults(t *testing.T) {
	root, _ := filepath.Abs("../..")
	files := []string{filepath.Join(root, "docker-compose.yml"), filepath.Join(root, "docker-compose.override.yml")}
	base := []string{"FLEETSCRIBE_QUEUE_URL=https://sqs.example/q", "FLEETSCRIBE_OUTPUT_BUCKET=out"}
	for _, c := range []struct {
		extra       []string
		wantBuckets string
		wantHostIP  string
	}{
		{nil, "", "127.0.0.1"},
		{[]string{"FLEETSCRIBE_INPUT_BUCKET=uploads"}, "uploads", "127.0.0.1"},
		{[]string{"FLEETSCRIBE_INPUT_BUCKET=uploads", "FLEETSCRIBE_INPUT_BUCKETS=archive,phones/calls/"}, "archive,phones/calls/", "127.0.0.1"},
		{[]string{"FLEETSCRIBE_INPUT_BUCKETS=*", "FLEETSCRIBE_METRICS_BIND=0.0.0.0"}, "*", "0.0.0.0"},
	} {
		p := loadComposeEnv(t, root, files, append(slices.Clone(base), c.extra...))
		w, err := p.GetService("worker")
		if err != nil {
			t.Fatal(err)
		}
		if got := env(w, "FLEETSCRIBE_INPUT_BUCKETS"); got != c.wantBuckets {
			t.Errorf("%v: FLEETSCRIBE_INPUT_BUCKETS = %q, want %q", c.extra, got, c.wantBuckets)
		}
		var published []string
		for _, port := range w.Ports {
			published = append(published, port.HostIP+":"+port.Published+"->"+strconv.Itoa(int(port.Target)))
		}
		if want := []string{c.wantHostIP + ":9100->9100"}; !slices.Equal(published, want) {
			t.Errorf("%v: worker ports %v, want %v", c.extra, published, want)
		}
		// What compose gives the worker is what the worker accepts.
		var cfg config
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		cfg.registerFlags(fs)
		if err := fs.Parse([]string{"-queue-url", "q", "-output-bucket", "out", "-input-buckets", env(w, "FLEETSCRIBE_INPUT_BUCKETS")}); err != nil {
			t.Fatal(err)
		}
		if err := cfg.worker.Validate(); (err == nil) != (c.wantBuckets != "") {
			t.Errorf("%v: worker config %v", c.extra, err)
		}
	}
}
