package mps

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestRealMPSDaemon drives the real nvidia-cuda-mps-control on a machine
// with an NVIDIA GPU: the daemon starts, four PyTorch processes with the
// planned partition environments become clients of one MPS server on
// GPU 0, and the daemon quits. Set FLEETSCRIBE_MPS_REAL=1 to run it.
func TestRealMPSDaemon(t *testing.T) {
	if os.Getenv("FLEETSCRIBE_MPS_REAL") != "1" {
		t.Skip("needs a GPU and nvidia-cuda-mps-control: set FLEETSCRIBE_MPS_REAL=1")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dirs := Dirs{Pipe: t.TempDir(), Log: t.TempDir()}
	c := NewControl(dirs)
	if err := c.StartDaemon(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := c.Quit(context.Background()); err != nil {
			t.Errorf("quit: %v", err)
		}
	}()
	if err := c.SetDefaultActiveThreadPercentage(ctx, 25); err != nil {
		t.Fatal(err)
	}
	if pids, err := c.ServerList(ctx); err != nil || len(pids) != 0 {
		t.Fatalf("servers before any client: %v, %v", pids, err)
	}

	plan, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 4, BasePort: 8001})
	if err != nil {
		t.Fatal(err)
	}
	// Each client reports the SM share it was given, then holds its
	// context until stdin closes.
	const client = `import sys, torch
x = torch.ones(1 << 20, device="cuda"); torch.cuda.synchronize()
print("ready", torch.cuda.get_device_properties(0).multi_processor_count, flush=True)
sys.stdin.read()`
	var procs []*exec.Cmd
	for _, p := range plan {
		cmd := exec.CommandContext(ctx, "python3", "-c", client)
		cmd.Env = append(os.Environ(), p.Env(dirs)...)
		cmd.Stderr = os.Stderr
		stdin, _ := cmd.StdinPipe()
		stdout, _ := cmd.StdoutPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		procs = append(procs, cmd)
		defer func() { _ = stdin.Close(); _ = cmd.Wait() }()
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "ready") {
			t.Fatalf("partition %s: %q, %v", p.Name(), line, err)
		}
		t.Logf("partition %s (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=%d): %s", p.Name(), p.ThreadPercentage, strings.TrimSpace(line))
	}
	servers, err := c.ServerList(ctx)
	if err != nil || len(servers) != 1 {
		t.Fatalf("want one MPS server for GPU 0, got %v, %v", servers, err)
	}
	clients, err := c.ClientList(ctx, servers[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range procs {
		if !slices.Contains(clients, p.Process.Pid) {
			t.Errorf("process %d is not a client of MPS server %d (clients %v)", p.Process.Pid, servers[0], clients)
		}
	}
	t.Logf("MPS server %d has clients %v", servers[0], clients)
}
