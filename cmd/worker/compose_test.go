package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/fleetscribe/fleetscribe/internal/flagenv"
)

func loadCompose(t *testing.T, profiles ...string) *types.Project {
	t.Helper()
	root, _ := filepath.Abs("../..")
	opts, err := cli.NewProjectOptions([]string{filepath.Join(root, "docker-compose.yml")},
		cli.WithWorkingDirectory(root),
		cli.WithEnv([]string{"FLEETSCRIBE_QUEUE_URL=https://sqs.example/q", "FLEETSCRIBE_OUTPUT_BUCKET=out"}),
		cli.WithProfiles(profiles),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml does not load: %v", err)
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
	mps, err := p.GetService("mps")
	if err != nil {
		t.Fatal(err)
	}
	pipe := env(mps, "CUDA_MPS_PIPE_DIRECTORY")
	if pipe == "" || mps.Ipc != "host" || !slices.Contains(mps.Command, "nvidia-cuda-mps-control") {
		t.Fatalf("mps service: ipc %q, pipe %q, command %v", mps.Ipc, pipe, mps.Command)
	}
	w, err := p.GetService("worker")
	if err != nil {
		t.Fatal(err)
	}
	addrs := strings.Split(env(w, "FLEETSCRIBE_TRITON_ADDRS"), ",")
	if len(addrs) != 4 {
		t.Fatalf("worker talks to %d partitions, want 4: %v", len(addrs), addrs)
	}
	for i := range 4 {
		name := "triton-" + string(rune('0'+i))
		tr, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		if env(tr, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE") != "25" || env(tr, "CUDA_MPS_PIPE_DIRECTORY") != pipe || tr.Ipc != "host" {
			t.Errorf("%s is not a 25%% MPS client of the shared daemon: %v ipc=%q", name, tr.Environment, tr.Ipc)
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
		if !slices.Contains(addrs, name+":8001") {
			t.Errorf("worker does not use %s", name)
		}
		if _, ok := w.DependsOn[name]; !ok {
			t.Errorf("worker does not wait for %s", name)
		}
	}
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

// The same names in --help, docker-compose and the README.
func TestComposeAndReadmeUseWorkerFlagNames(t *testing.T) {
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
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for k := range known {
		if !strings.Contains(string(readme), k) {
			t.Errorf("README does not document %s", k)
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
