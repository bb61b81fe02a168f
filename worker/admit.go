package worker

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sync/semaphore"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
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
		return nil, Permanentf(contract.ClassTooLarge, "job needs an estimated %d MiB of memory, more than the worker's budget of %d MiB", n>>20, g.budget>>20)
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

// estimateMemory bounds what a job holds at its peak: each chunk in
// flight encoded for the wire (twice: the request and gRPC's copy), and
// for a recording read whole, the object, its decoded mono samples at the
// source rate and the samples at the model rate; for one that streams,
// the decoder's buffers and windows instead.
func (w *Worker) estimateMemory(size int64, info audio.Info, streaming bool) int64 {
	// Chunks in flight: no more than the recording has.
	inFlight := min(int64(w.cfg.Audio.ChunkParallelism), int64(math.Ceil(info.Duration()/w.cfg.Audio.ChunkSeconds))+1)
	chunks := inFlight * int64(w.cfg.Audio.ChunkSeconds*modelRate) * 4 * 2
	if streaming {
		return chunks + w.streamBytes() + jobOverheadBytes
	}
	decoded := 4 * info.Frames
	resampled := 4 * (info.Frames*modelRate/int64(max(info.Rate, 1)) + 1)
	return size + decoded + resampled + chunks + jobOverheadBytes
}

// DefaultMemoryBudget returns 60% of the memory the process may use.
func DefaultMemoryBudget() int64 { return MemoryBudgetBeside(0) }

// MemoryBudgetBeside returns 60% of the memory the process may use beside
// reserved bytes it holds for good (its shared memory regions, whose pages
// its memory cgroup is charged for).
func MemoryBudgetBeside(reserved int64) int64 {
	limit := MemoryLimit()
	if limit == 0 {
		return 2 << 30
	}
	return max(limit-reserved, 0) / 10 * 6
}

// MemoryLimit returns the memory the process may use: the cgroup limit
// when there is one (containers), else physical memory; 0 where neither
// is known.
func MemoryLimit() int64 {
	limit := physicalMemory()
	if c := cgroupLimit(); c > 0 && (limit == 0 || c < limit) {
		limit = c
	}
	return limit
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

// slotGate shares the worker's job slots among its queues: strict
// priority, except that each lower queue keeps a guaranteed minimum while
// it has work, so a bulk backlog never starves entirely. A receiver takes
// slots before it receives (one per message it may get) and a job gives
// its slot back when it ends.
type slotGate struct {
	size     int
	minShare int // slots a lower queue keeps while it wants them
	m        *metrics
	names    []string

	mu      sync.Mutex
	used    []int  // by queue rank
	waiting []int  // receivers of each rank blocked in acquire
	busy    []bool // the rank's last receive filled every slot it had: more is queued
	lent    int    // slots of held jobs given back (lend)
	changed chan struct{}
}

func newSlotGate(size, queues, minShare int, m *metrics) *slotGate {
	g := &slotGate{size: size, minShare: minShare, m: m, used: make([]int, queues), waiting: make([]int, queues), busy: make([]bool, queues), changed: make(chan struct{})}
	for i := range queues {
		g.names = append(g.names, strconv.Itoa(i))
		m.slotsInUse.WithLabelValues(g.names[i]).Set(0)
	}
	return g
}

// grantLocked is how many of up to want slots rank may take now: a lower
// queue below its guaranteed share takes what it is owed; otherwise
// nothing while a higher queue waits, and never what lower queues that
// want slots are owed.
func (g *slotGate) grantLocked(rank, want int) int {
	free := g.size
	for _, u := range g.used {
		free -= u
	}
	owed := func(r int) int {
		if r == 0 || r != rank && g.waiting[r] == 0 {
			return 0
		}
		return max(0, g.minShare-g.used[r])
	}
	own := min(free, owed(rank))
	// A higher queue wants slots while its receiver waits for them, and
	// also while it is between receives of a queue that had more work.
	higherWaiting := false
	for h := range rank {
		higherWaiting = higherWaiting || g.waiting[h] > 0 || g.busy[h]
	}
	extra := 0
	if !higherWaiting {
		reserved := 0
		for r := range g.used {
			if r != rank {
				reserved += owed(r)
			}
		}
		extra = max(0, free-own-reserved)
	}
	return max(0, min(want, own+extra))
}

// acquire waits until rank may take at least one slot, and takes up to want.
// A receiver is counted as waiting from its first refusal until it is
// granted or gives up, and only the first of a rank to wait, and the last
// to stop, signals the others: whether a rank waits changes what the
// others may take, but its waiters waking and looking again do not (two
// waiters that signalled each time they looked again woke each other
// forever, a CPU core's worth of it while both queues waited).
func (g *slotGate) acquire(ctx context.Context, rank, want int) (int, error) {
	if ctx.Err() != nil {
		return 0, context.Cause(ctx)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	waiting := false
	for {
		if n := g.grantLocked(rank, want); n > 0 {
			if waiting {
				g.waiting[rank]--
			}
			g.used[rank] += n
			g.m.slotsInUse.WithLabelValues(g.names[rank]).Set(float64(g.used[rank]))
			g.signalLocked()
			return n, nil
		}
		if !waiting {
			waiting = true
			if g.waiting[rank]++; g.waiting[rank] == 1 {
				g.signalLocked()
			}
		}
		ch := g.changed
		g.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		g.mu.Lock()
		if ctx.Err() != nil {
			if g.waiting[rank]--; g.waiting[rank] == 0 {
				g.signalLocked()
			}
			return 0, context.Cause(ctx)
		}
	}
}

// lend gives back the slot of a job of rank that waits for a dependency
// that is down, so that work which does not need it runs, and reports
// whether it did: at most size slots are lent at once (the messages in
// hand stay under twice -concurrency).
func (g *slotGate) lend(rank int) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lent >= g.size {
		return false
	}
	g.lent++
	g.used[rank]--
	g.m.slotsInUse.WithLabelValues(g.names[rank]).Set(float64(g.used[rank]))
	g.signalLocked()
	return true
}

// repay takes back a lent slot for rank, waiting for one within ctx; once
// ctx ends it takes it regardless (the job's end gives it back), so the
// count stays whole.
func (g *slotGate) repay(ctx context.Context, rank int) {
	if _, err := g.acquire(ctx, rank, 1); err != nil {
		g.mu.Lock()
		g.used[rank]++
		g.mu.Unlock()
	}
	g.mu.Lock()
	g.lent--
	g.mu.Unlock()
}

// release gives back n slots of rank.
func (g *slotGate) release(rank, n int) {
	if n == 0 {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.used[rank] -= n
	g.m.slotsInUse.WithLabelValues(g.names[rank]).Set(float64(g.used[rank]))
	g.signalLocked()
}

// setBusy records whether rank's queue has more work than its last
// receive could take.
func (g *slotGate) setBusy(rank int, busy bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.busy[rank] != busy {
		g.busy[rank] = busy
		g.signalLocked()
	}
}

// inUse is the number of slots held.
func (g *slotGate) inUse() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := 0
	for _, u := range g.used {
		n += u
	}
	return n
}

func (g *slotGate) signalLocked() {
	close(g.changed)
	g.changed = make(chan struct{})
}
