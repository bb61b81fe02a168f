// Package mps plans CUDA MPS partitions of GPUs and drives the MPS control
// daemon. A partition is one Triton server process that is an MPS client
// limited to a share of the GPU's SMs (CUDA_MPS_ACTIVE_THREAD_PERCENTAGE);
// eight per GPU at 50% each is the default the GPU benchmark chose
// (docs/benchmarks.md: on an H200 with CUDA-graph decoding through real
// Triton, 8 MPS clients served the most audio at p99 <= 1 s, and 25, 50 and
// 100% measured within a few per cent of each other). The percentage is a
// cap, not a reservation, and a fatal fault in one client takes down every
// client on that GPU: the worker's pool is built to ride through that.
//
// The cap is applied in whole TPCs (two SMs each): on an H200 with 132 SMs a
// 25% client sees 32 SMs (TestRealMPSDaemon, FLEETSCRIBE_MPS_REAL=1).
//
// The package does not start Triton; it says how each partition must be
// started (environment, ports, arguments).
package mps

import (
	"errors"
	"fmt"
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
	// MemLimit caps the device memory the partition may pin
	// (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, e.g. "20G"); empty: no cap.
	MemLimit string
	// Sharing is how the partitions of a GPU share it: SharingMPS (MPS
	// clients of one daemon) or SharingTimeSliced (plain processes, no
	// daemon, also how partitions run on a host without GPUs).
	Sharing string
}

// How partitions share a GPU.
const (
	SharingMPS        = "mps"
	SharingTimeSliced = "timesliced"
)

// Name is a stable identifier, e.g. "gpu0-p2".
func (p Partition) Name() string { return fmt.Sprintf("gpu%d-p%d", p.GPU, p.Index) }

// PlanConfig describes the partitions wanted.
type PlanConfig struct {
	GPUs     []int // device indices
	PerGPU   int   // partitions per GPU
	BasePort int   // gRPC port of the first partition; each partition takes three ports
	// Percentage overrides the thread percentage (0: DefaultPercentage).
	Percentage int
	// MemLimit caps each partition's pinned device memory ("20G", "512M");
	// empty: no cap.
	MemLimit string
	// Sharing is SharingMPS (the default when empty) or SharingTimeSliced.
	Sharing string
}

// DefaultPerGPU is the number of partitions per GPU the GPU benchmark
// measured best (docs/benchmarks.md).
const DefaultPerGPU = 8

// DefaultPercentage is the thread percentage of a partition when none is
// given, as measured on an H200 (docs/benchmarks.md): no cap for one or
// two partitions (two uncapped clients beat two at 50%), 50% from three
// on (at four and eight clients 25, 50 and 100% served alike; 50 was the
// best of eight). More than eight per GPU was not measured.
func DefaultPercentage(perGPU int) int {
	if perGPU <= 2 {
		return 100
	}
	return 50
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
	case c.MemLimit != "" && !validMemLimit(c.MemLimit):
		return nil, fmt.Errorf("memory limit %q: want a number with a unit, such as 20G or 512M", c.MemLimit)
	case c.Sharing != "" && c.Sharing != SharingMPS && c.Sharing != SharingTimeSliced:
		return nil, fmt.Errorf("sharing %q: want %s or %s", c.Sharing, SharingMPS, SharingTimeSliced)
	case c.Sharing == SharingTimeSliced && (c.Percentage != 0 || c.MemLimit != ""):
		return nil, errors.New("a thread percentage or memory limit needs MPS sharing")
	}
	sharing := c.Sharing
	if sharing == "" {
		sharing = SharingMPS
	}
	pct := c.Percentage
	if pct == 0 {
		pct = DefaultPercentage(c.PerGPU)
	}
	if sharing == SharingTimeSliced {
		pct = 100
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
			out = append(out, Partition{GPU: g, Index: i, ThreadPercentage: pct, GRPCPort: port, HTTPPort: port + 1, MetricsPort: port + 2, MemLimit: c.MemLimit, Sharing: sharing})
		}
	}
	return out, nil
}

// validMemLimit accepts what MPS does: digits and one unit of K, M or G.
func validMemLimit(s string) bool {
	n := len(s) - 1
	if n < 1 || !strings.ContainsRune("KMG", rune(s[n])) {
		return false
	}
	v, err := strconv.Atoi(s[:n])
	return err == nil && v > 0
}

// Dirs are the MPS pipe and log directories shared by the daemon and its clients.
type Dirs struct {
	Pipe string
	Log  string
}

// Env returns the environment a partition's process needs, as KEY=VALUE.
// The process sees its GPU as device 0, so a memory limit names device 0.
// A time-sliced partition gets only its device.
func (p Partition) Env(d Dirs) []string {
	if p.Sharing == SharingTimeSliced {
		return []string{"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(p.GPU)}
	}
	env := []string{
		"CUDA_VISIBLE_DEVICES=" + strconv.Itoa(p.GPU),
		"CUDA_MPS_PIPE_DIRECTORY=" + d.Pipe,
		"CUDA_MPS_LOG_DIRECTORY=" + d.Log,
		"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=" + strconv.Itoa(p.ThreadPercentage),
	}
	if p.MemLimit != "" {
		env = append(env, "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0="+p.MemLimit)
	}
	return env
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
