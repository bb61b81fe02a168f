// Package mps plans CUDA MPS partitions of GPUs and drives the MPS control
// daemon. A partition is one Triton server process that is an MPS client
// limited to a share of the GPU's SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE);
// four per GPU at 25% each is the default. The percentage is a cap, not a
// reservation, and a fatal fault in one client takes down every client on
// that GPU: the worker's pool is built to ride through that.
//
// The cap is applied in whole TPCs (two SMs each): on an H200 with 132 SMs a
// 25% client sees 32 SMs (TestRealMPSDaemon, FLEETSCRIBE_MPS_REAL=1).
//
// The package does not start Triton; it says how each partition must be
// started (environment, ports, arguments).
package mps

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// MaxClientsPerGPU is the MPS limit on client contexts per GPU (Volta and later).
const MaxClientsPerGPU = 48

// Partition is one Triton server process on one GPU.
type Partition struct {
	GPU              int // device index
	Index            int // partition index on that GPU
	ThreadPercentage int // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
	GRPCPort         int
	HTTPPort         int
	MetricsPort      int
}

// Name is a stable identifier, e.g. "gpu0-p2".
func (p Partition) Name() string { return fmt.Sprintf("gpu%d-p%d", p.GPU, p.Index) }

// PlanConfig describes the partitions wanted.
type PlanConfig struct {
	GPUs     []int // device indices
	PerGPU   int   // partitions per GPU
	BasePort int   // gRPC port of the first partition; each partition takes three ports
	// Percentage overrides the thread percentage (0: 100/PerGPU).
	Percentage int
}

// Plan lays out partitions GPU by GPU. Partition k (counting across GPUs)
// gets gRPC port BasePort+3k, HTTP BasePort+3k+1 and metrics BasePort+3k+2.
func Plan(c PlanConfig) ([]Partition, error) {
	switch {
	case len(c.GPUs) == 0:
		return nil, errors.New("no GPUs to partition")
	case c.PerGPU < 1:
		return nil, errors.New("partitions per GPU must be at least 1")
	case c.PerGPU > MaxClientsPerGPU:
		return nil, fmt.Errorf("%d partitions per GPU exceeds the MPS limit of %d clients", c.PerGPU, MaxClientsPerGPU)
	case c.BasePort < 1 || c.BasePort+3*len(c.GPUs)*c.PerGPU > 65535:
		return nil, fmt.Errorf("port range from %d does not fit %d partitions", c.BasePort, len(c.GPUs)*c.PerGPU)
	case c.Percentage < 0 || c.Percentage > 100:
		return nil, fmt.Errorf("thread percentage %d is outside 1..100", c.Percentage)
	}
	pct := c.Percentage
	if pct == 0 {
		pct = max(1, 100/c.PerGPU)
	}
	seen := map[int]bool{}
	var out []Partition
	for _, g := range c.GPUs {
		if g < 0 || seen[g] {
			return nil, fmt.Errorf("GPU index %d is negative or repeated", g)
		}
		seen[g] = true
		for i := range c.PerGPU {
			port := c.BasePort + 3*len(out)
			out = append(out, Partition{GPU: g, Index: i, ThreadPercentage: pct, GRPCPort: port, HTTPPort: port + 1, MetricsPort: port + 2})
		}
	}
	return out, nil
}

// Dirs are the MPS pipe and log directories shared by the daemon and its clients.
type Dirs struct {
	Pipe string
	Log  string
}

// Env returns the environment a partition's process needs, as KEY=VALUE.
func (p Partition) Env(d Dirs) []string {
	return []string{
		"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(p.GPU),
		"CUDA_MPS_PIPE_DIRECTORY=" + d.Pipe,
		"CUDA_MPS_LOG_DIRECTORY=" + d.Log,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strconv.Itoa(p.ThreadPercentage),
	}
}

// TritonArgs returns tritonserver arguments for the partition.
func (p Partition) TritonArgs(modelRepo string) []string {
	return []string{
		"--model-repository=" + modelRepo,
		"--grpc-port=" + strconv.Itoa(p.GRPCPort),
		"--http-port=" + strconv.Itoa(p.HTTPPort),
		"--metrics-port=" + strconv.Itoa(p.MetricsPort),
		"--id=" + p.Name(),
	}
}

// Addrs returns the gRPC addresses of partitions on host, for the worker's
// -triton-addrs.
func Addrs(host string, ps []Partition) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = host + ":" + strconv.Itoa(p.GRPCPort)
	}
	return out
}

// Control drives nvidia-cuda-mps-control.
type Control struct {
	Bin  string // path of nvidia-cuda-mps-control
	Dirs Dirs
}

// NewControl uses the binary from PATH.
func NewControl(d Dirs) *Control { return &Control{Bin: "nvidia-cuda-mps-control", Dirs: d} }

func (c *Control) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Bin, args...)
	cmd.Env = append(cmd.Environ(), "CUDA_MPS_PIPE_DIRECTORY="+c.Dirs.Pipe, "CUDA_MPS_LOG_DIRECTORY="+c.Dirs.Log)
	return cmd
}

// StartDaemon starts the control daemon in the background (-d).
func (c *Control) StartDaemon(ctx context.Context) error {
	out, err := c.cmd(ctx, "-d").CombinedOutput()
	if err != nil {
		return fmt.Errorf("start mps daemon: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// Send writes one command to the daemon and returns its reply.
func (c *Control) Send(ctx context.Context, command string) (string, error) {
	cmd := c.cmd(ctx)
	cmd.Stdin = strings.NewReader(command + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("mps control %q: %w: %s", command, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

// ServerList returns the PIDs of running MPS servers.
func (c *Control) ServerList(ctx context.Context) ([]int, error) {
	out, err := c.Send(ctx, "get_server_list")
	if err != nil {
		return nil, err
	}
	return parsePIDs("mps server list", out)
}

// ClientList returns the PIDs of the clients of one MPS server.
func (c *Control) ClientList(ctx context.Context, serverPID int) ([]int, error) {
	out, err := c.Send(ctx, "get_client_list "+strconv.Itoa(serverPID))
	if err != nil {
		return nil, err
	}
	return parsePIDs("mps client list", out)
}

func parsePIDs(what, out string) ([]int, error) {
	var pids []int
	for _, f := range strings.Fields(out) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("%s: unexpected %q", what, out)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// SetDefaultActiveThreadPercentage caps the SM share of clients that do not set their own.
func (c *Control) SetDefaultActiveThreadPercentage(ctx context.Context, pct int) error {
	if pct < 1 || pct > 100 {
		return fmt.Errorf("thread percentage %d is outside 1..100", pct)
	}
	_, err := c.Send(ctx, "set_default_active_thread_percentage "+strconv.Itoa(pct))
	return err
}

// SetDefaultDevicePinnedMemLimit caps device memory per client, e.g. "10G".
func (c *Control) SetDefaultDevicePinnedMemLimit(ctx context.Context, gpu int, limit string) error {
	if limit == "" || strings.ContainsAny(limit, " \n") {
		return fmt.Errorf("bad memory limit %q", limit)
	}
	_, err := c.Send(ctx, fmt.Sprintf("set_default_device_pinned_mem_limit %d %s", gpu, limit))
	return err
}

// Quit stops the daemon (and, once their clients exit, its servers).
func (c *Control) Quit(ctx context.Context) error {
	_, err := c.Send(ctx, "quit")
	return err
}
