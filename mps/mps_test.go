package mps

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestPlanFourPerGPU(t *testing.T) {
	ps, err := Plan(PlanConfig{GPUs: []int{0, 1}, PerGPU: 4, BasePort: 8001})
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 8 {
		t.Fatalf("%d partitions, want 8", len(ps))
	}
	ports := map[int]bool{}
	for i, p := range ps {
		if p.ThreadPercentage != 50 || p.GPU != i/4 || p.Index != i%4 {
			t.Errorf("partition %d: %+v", i, p)
		}
		for _, port := range []int{p.GRPCPort, p.HTTPPort, p.MetricsPort} {
			if ports[port] {
				t.Errorf("port %d used twice", port)
			}
			ports[port] = true
		}
	}
	if got := Addrs("triton", ps[:2]); !slices.Equal(got, []string{"triton:8001", "triton:8004"}) {
		t.Errorf("addrs %v", got)
	}
	env := ps[5].Env(Dirs{Pipe: "/tmp/mps-pipe", Log: "/tmp/mps-log"})
	for _, want := range []string{"CUDA_VISIBLE_DEVICES=1", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50", "CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe"} {
		if !slices.Contains(env, want) {
			t.Errorf("env %v lacks %s", env, want)
		}
	}
	if args := ps[5].TritonArgs("/models"); !slices.Contains(args, "--grpc-port=8016") || !slices.Contains(args, "--id=gpu1-p1") {
		t.Errorf("triton args %v", args)
	}
}

func TestPlanRejects(t *testing.T) {
	for name, c := range map[string]PlanConfig{
		"no gpus":          {PerGPU: 4, BasePort: 8001},
		"over mps limit":   {GPUs: []int{0}, PerGPU: 49, BasePort: 8001},
		"repeated gpu":     {GPUs: []int{0, 0}, PerGPU: 4, BasePort: 8001},
		"ports overflow":   {GPUs: []int{0}, PerGPU: 4, BasePort: 65530},
		"percentage > 100": {GPUs: []int{0}, PerGPU: 4, BasePort: 8001, Percentage: 101},
	} {
		if _, err := Plan(c); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
	ps, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 48, BasePort: 8001})
	if err != nil || ps[0].ThreadPercentage != 50 {
		t.Errorf("48 partitions: %v %+v", err, ps[0])
	}
}

// The default percentage is the measured one: no cap for one or two
// partitions per GPU, 50% for more; a given percentage is kept.
func TestPlanDefaultPercentage(t *testing.T) {
	for perGPU, want := range map[int]int{1: 100, 2: 100, 3: 50, 4: 50, 8: 50} {
		ps, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: perGPU, BasePort: 8001})
		if err != nil || ps[0].ThreadPercentage != want {
			t.Errorf("%d per GPU: %v %+v, want %d%%", perGPU, err, ps[0], want)
		}
	}
	ps, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 8, BasePort: 8001, Percentage: 25})
	if err != nil || ps[7].ThreadPercentage != 25 {
		t.Errorf("given 25%%: %v %+v", err, ps[7])
	}
}

// fakeControl writes a stand-in for nvidia-cuda-mps-control that records
// its arguments, environment and stdin, and answers get_server_list.
func fakeControl(t *testing.T) (*Control, string) {
	dir := t.TempDir()
	logf := filepath.Join(dir, "calls")
	bin := filepath.Join(dir, "nvidia-cuda-mps-control")
	script := `#!/bin/sh
in=$(cat)
echo "args=$* pipe=$CUDA_MPS_PIPE_DIRECTORY stdin=$in" >> ` + logf + `
case "$in" in
  get_server_list) echo 4211; echo 4377 ;;
  "get_client_list 4211") echo 5001; echo 5002 ;;
  bogus*) echo "unknown command" >&2; exit 1 ;;
esac
`
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return &Control{Bin: bin, Dirs: Dirs{Pipe: filepath.Join(dir, "pipe"), Log: filepath.Join(dir, "log")}}, logf
}

func TestControlCommands(t *testing.T) {
	c, logf := fakeControl(t)
	ctx := context.Background()
	if err := c.StartDaemon(ctx); err != nil {
		t.Fatal(err)
	}
	pids, err := c.ServerList(ctx)
	if err != nil || !slices.Equal(pids, []int{4211, 4377}) {
		t.Fatalf("server list %v, %v", pids, err)
	}
	clients, err := c.ClientList(ctx, 4211)
	if err != nil || !slices.Equal(clients, []int{5001, 5002}) {
		t.Fatalf("client list %v, %v", clients, err)
	}
	if err := c.SetDefaultActiveThreadPercentage(ctx, 25); err != nil {
		t.Fatal(err)
	}
	if err := c.SetDefaultDevicePinnedMemLimit(ctx, 0, "20G"); err != nil {
		t.Fatal(err)
	}
	if err := c.Quit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Send(ctx, "bogus"); err == nil || !strings.Contains(err.Error(), "unknown command") {
		t.Errorf("failed command: %v", err)
	}
	if err := c.SetDefaultActiveThreadPercentage(ctx, 0); err == nil {
		t.Error("0% should be refused before reaching the daemon")
	}
	b, _ := os.ReadFile(logf)
	calls := strings.Split(strings.TrimSpace(string(b)), "\n")
	want := []string{
		"args=-d pipe=" + c.Dirs.Pipe + " stdin=",
		"args= pipe=" + c.Dirs.Pipe + " stdin=get_server_list",
		"args= pipe=" + c.Dirs.Pipe + " stdin=get_client_list 4211",
		"args= pipe=" + c.Dirs.Pipe + " stdin=set_default_active_thread_percentage 25",
		"args= pipe=" + c.Dirs.Pipe + " stdin=set_default_device_pinned_mem_limit 0 20G",
		"args= pipe=" + c.Dirs.Pipe + " stdin=quit",
	}
	if len(calls) < len(want) || !slices.Equal(calls[:len(want)], want) {
		t.Errorf("calls:\n%s\nwant:\n%s", strings.Join(calls, "\n"), strings.Join(want, "\n"))
	}
}

// Time-sliced partitions are plain processes: no MPS environment, the
// whole GPU each, and no percentage or memory limit to give them.
func TestPlanTimeSliced(t *testing.T) {
	ps, err := Plan(PlanConfig{GPUs: []int{0, 1}, PerGPU: 4, BasePort: 8001, Sharing: SharingTimeSliced})
	if err != nil {
		t.Fatal(err)
	}
	env := ps[5].Env(Dirs{Pipe: "/tmp/mps-pipe", Log: "/tmp/mps-log"})
	if !slices.Equal(env, []string{"CUDA_VISIBLE_DEVICES=1"}) || ps[5].ThreadPercentage != 100 || ps[5].Sharing != SharingTimeSliced {
		t.Errorf("time-sliced partition %+v, env %v", ps[5], env)
	}
	if mpsPlan, _ := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 4, BasePort: 8001}); mpsPlan[0].Sharing != SharingMPS {
		t.Errorf("default sharing %q, want mps", mpsPlan[0].Sharing)
	}
	for name, c := range map[string]PlanConfig{
		"percentage": {GPUs: []int{0}, PerGPU: 4, BasePort: 8001, Sharing: SharingTimeSliced, Percentage: 25},
		"mem limit":  {GPUs: []int{0}, PerGPU: 4, BasePort: 8001, Sharing: SharingTimeSliced, MemLimit: "8G"},
		"unknown":    {GPUs: []int{0}, PerGPU: 4, BasePort: 8001, Sharing: "mig"},
	} {
		if _, err := Plan(c); err == nil {
			t.Errorf("%s: want error", name)
		}
	}
}
