package worker

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sync/semaphore"

	"github.com/fleetscribe/fleetscribe/audio"
)

// memoryGate admits jobs by their estimated memory, so that the jobs in
// hand together stay within a budget whatever their recordings are: one
// long low-rate recording (which grows 64x when resampled) waits for room
// instead of taking the process past its memory limit.
type memoryGate struct {
	budget int64
	sem    *semaphore.Weighted
	m      *metrics
}

func newMemoryGate(budget int64, m *metrics) *memoryGate {
	m.memoryBudget.Set(float64(budget))
	return &memoryGate{budget: budget, sem: semaphore.NewWeighted(budget), m: m}
}

// acquire waits until n bytes fit in the budget, and returns the function
// that gives them back. A job that alone exceeds the budget can never run:
// that is a permanent too_large error.
func (g *memoryGate) acquire(ctx context.Context, n int64) (release func(), err error) {
	if n > g.budget {
		return nil, Permanentf(ClassTooLarge, "job needs an estimated %d MiB of memory, more than the worker's budget of %d MiB", n>>20, g.budget>>20)
	}
	if err := g.sem.Acquire(ctx, n); err != nil {
		return nil, fmt.Errorf("wait for memory: %w", context.Cause(ctx))
	}
	g.m.memoryReserved.Add(float64(n))
	return func() {
		g.m.memoryReserved.Sub(float64(n))
		g.sem.Release(n)
	}, nil
}

// Bytes a job holds besides its recording: buffers, transcript, gRPC.
const jobOverheadBytes = 4 << 20

// estimateMemory bounds what a job holds at its peak: the object, its
// decoded mono samples at the source rate, the samples at the model rate,
// and each chunk in flight encoded for the wire (twice: the request and
// gRPC's copy).
func (w *Worker) estimateMemory(size int64, info audio.Info) int64 {
	decoded := 4 * info.Frames
	resampled := 4 * (info.Frames*ModelRate/int64(max(info.Rate, 1)) + 1)
	chunks := int64(w.cfg.ChunkParallelism) * int64(w.cfg.ChunkSeconds*ModelRate) * 4 * 2
	return size + decoded + resampled + chunks + jobOverheadBytes
}

// DefaultMemoryBudget returns 60% of the memory the process may use: the
// cgroup limit when there is one (containers), else physical memory.
func DefaultMemoryBudget() int64 {
	limit := physicalMemory()
	if c := cgroupLimit(); c > 0 && (limit == 0 || c < limit) {
		limit = c
	}
	if limit == 0 {
		return 2 << 30
	}
	return limit / 10 * 6
}

func cgroupLimit() int64 {
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err == nil && v > 0 && v < 1<<60 {
			return v
		}
	}
	return 0
}

func physicalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}
