package kserve

import (
	"context"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/triton"

	"github.com/fleetscribe/fleetscribe/modelspec"
)

// BatchConfig is the model's batching, with the semantics of Triton's
// dynamic batcher (BatchConfigOf: the one a model configuration asks for).
type BatchConfig struct {
	// MaxBatchSize is the most rows one execution takes. 0 means the model
	// does not batch: requests carry no batch dimension.
	MaxBatchSize int
	// PreferredSizes are batch sizes the batcher sends as soon as it can
	// form one; otherwise it waits up to MaxQueueDelay for more requests.
	PreferredSizes []int
	// MaxQueueDelay is how long the oldest queued request may wait for a
	// fuller batch (0: send what is queued at once).
	MaxQueueDelay time.Duration
	// MaxQueueSize bounds the requests waiting at each priority level
	// apart, as Triton's queue policy does; beyond it a request gets
	// UNAVAILABLE "Exceeds maximum queue size" (0: unbounded).
	MaxQueueSize int
	// PriorityLevels is Triton's priority_levels (0: no priorities) and
	// DefaultPriority its default_priority_level, the level of a request
	// that sets priority 0 (0: the last level). Priorities beyond the
	// levels are taken as the default, as Triton does.
	PriorityLevels, DefaultPriority int
	// Ragged lets requests of different lengths share a batch (Triton's
	// allow_ragged_batch on the audio input); without it only requests of
	// identical shape are batched together.
	Ragged bool
	// Instances is how many batches execute at once (Triton's instance
	// group count; for the CPU server, its decoders). At least 1.
	Instances int
	// DefaultQueueTimeout bounds a request's wait in the queue (0: none);
	// a request's own "timeout" parameter can only shorten it, as in
	// Triton. Past it the request gets UNAVAILABLE "Request timeout
	// expired".
	DefaultQueueTimeout time.Duration
}

// Row is one batch row: one request's audio (cut to its true length).
type Row struct {
	Samples    []float32
	Timestamps bool
	Model      string   // the model name the request was sent for
	Vocabulary []string // the request's vocabulary input (nil: none)
}

// BatchRecognizer recognises a whole batch at once. Recognizers that are
// not one get their rows run concurrently.
type BatchRecognizer interface {
	RecognizeBatch(ctx context.Context, rows []Row) ([]triton.Result, error)
}

// pending is one request waiting in the batcher's queue.
type pending struct {
	ctx      context.Context
	rows     []Row
	shape    int64  // audio length per row, for shape matching
	inputs   string // its inputs' names, in request order
	priority uint64
	seq      uint64
	enqueued time.Time
	deadline time.Time // zero: no queue timeout
	done     chan batchResult
}

type batchResult struct {
	results []triton.Result
	err     error
}

// BatchStats counts the executions and the rows they held.
type BatchStats struct {
	Batches int
	Rows    int
	Sizes   map[int]int // executions by batch size
	// Requests that completed, their summed time in the queue (arrival to
	// the start of their batch) and in execution (their batch's run), as
	// Triton's statistics extension counts them.
	Requests, Failed   uint64
	QueueNs, ComputeNs uint64
}

// MeanBatchSize returns rows per execution.
func (s BatchStats) MeanBatchSize() float64 {
	if s.Batches == 0 {
		return 0
	}
	return float64(s.Rows) / float64(s.Batches)
}

// batcher queues requests and forms batches for Instances executors.
type batcher struct {
	cfg  BatchConfig
	exec func(ctx context.Context, rows []Row) ([]triton.Result, error)
	now  func() time.Time

	mu      sync.Mutex
	queue   []*pending
	seq     uint64
	wake    chan struct{} // closed and replaced when the queue changes
	stats   BatchStats
	stopped bool
}

func newBatcher(cfg BatchConfig, exec func(context.Context, []Row) ([]triton.Result, error)) *batcher {
	cfg.Instances = max(cfg.Instances, 1)
	cfg.MaxBatchSize = max(cfg.MaxBatchSize, 1)
	return &batcher{cfg: cfg, exec: exec, now: time.Now, wake: make(chan struct{}), stats: BatchStats{Sizes: map[int]int{}}}
}

// run executes batches on Instances goroutines until ctx is done.
func (b *batcher) run(ctx context.Context) {
	var wg sync.WaitGroup
	for range b.cfg.Instances {
		wg.Go(func() { b.instance(ctx) })
	}
	wg.Wait()
	b.mu.Lock()
	b.stopped = true
	for _, p := range b.queue {
		p.done <- batchResult{err: status.Error(codes.Unavailable, "server is shutting down")}
	}
	b.queue = nil
	b.mu.Unlock()
}

func (b *batcher) changedLocked() {
	close(b.wake)
	b.wake = make(chan struct{})
}

// submit queues a request and waits for its results.
func (b *batcher) submit(ctx context.Context, rows []Row, shape int64, inputs string, priority uint64, timeout time.Duration) ([]triton.Result, error) {
	// As Triton's queue policy: a request's own timeout can only shorten
	// the model's default, so without a default there is none.
	if timeout == 0 || timeout > b.cfg.DefaultQueueTimeout {
		timeout = b.cfg.DefaultQueueTimeout
	}
	p := &pending{ctx: ctx, rows: rows, shape: shape, inputs: inputs, priority: b.level(priority), done: make(chan batchResult, 1)}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return nil, status.Error(codes.Unavailable, "server is shutting down")
	}
	if b.cfg.MaxQueueSize > 0 {
		at := 0
		for _, q := range b.queue {
			if q.priority == p.priority {
				at++
			}
		}
		if at >= b.cfg.MaxQueueSize {
			b.mu.Unlock()
			return nil, status.Error(codes.Unavailable, "Exceeds maximum queue size")
		}
	}
	p.enqueued = b.now()
	if timeout > 0 {
		p.deadline = p.enqueued.Add(timeout)
	}
	b.seq++
	p.seq = b.seq
	b.queue = append(b.queue, p)
	b.changedLocked()
	b.mu.Unlock()
	var expire <-chan time.Time
	if !p.deadline.IsZero() {
		t := time.NewTimer(timeout)
		defer t.Stop()
		expire = t.C
	}
	select {
	case r := <-p.done:
		return r.results, r.err
	case <-ctx.Done():
		// The client gave up: drop the request if it still waits (if it
		// already runs, its result goes nowhere).
		b.remove(p)
		return nil, status.FromContextError(ctx.Err()).Err()
	case <-expire:
		if b.remove(p) {
			return nil, status.Error(codes.Unavailable, "Request timeout expired")
		}
		r := <-p.done // already executing: it finishes
		return r.results, r.err
	}
}

// level is the priority level a request's priority puts it at: 0 and
// priorities past the levels mean the default level; without levels every
// request is at one level.
func (b *batcher) level(priority uint64) uint64 {
	if b.cfg.PriorityLevels == 0 {
		return 0
	}
	def := uint64(b.cfg.DefaultPriority)
	if def == 0 {
		def = uint64(b.cfg.PriorityLevels)
	}
	if priority == 0 || priority > uint64(b.cfg.PriorityLevels) {
		return def
	}
	return priority
}

// remove takes p off the queue and reports whether it was still there.
func (b *batcher) remove(p *pending) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	i := slices.Index(b.queue, p)
	if i < 0 {
		return false
	}
	b.queue = slices.Delete(b.queue, i, i+1)
	b.changedLocked()
	return true
}

// instance forms and executes batches until ctx is done.
func (b *batcher) instance(ctx context.Context) {
	for {
		batch, wait, wake := b.form()
		if batch == nil {
			var timer *time.Timer
			var fire <-chan time.Time
			if wait > 0 {
				timer = time.NewTimer(wait)
				fire = timer.C
			}
			select {
			case <-ctx.Done():
			case <-wake:
			case <-fire:
			}
			if timer != nil {
				timer.Stop()
			}
			if ctx.Err() != nil {
				return
			}
			continue
		}
		b.execute(ctx, batch)
	}
}

// form takes a batch off the queue, or says how long to wait for one.
func (b *batcher) form() (batch []*pending, wait time.Duration, wake <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	// Drop requests whose client gave up, and expire queue timeouts.
	kept := b.queue[:0]
	for _, p := range b.queue {
		switch {
		case p.ctx.Err() != nil:
			p.done <- batchResult{err: status.FromContextError(p.ctx.Err()).Err()}
		case !p.deadline.IsZero() && now.After(p.deadline):
			p.done <- batchResult{err: status.Error(codes.Unavailable, "Request timeout expired")}
		default:
			kept = append(kept, p)
		}
	}
	clear(b.queue[len(kept):])
	b.queue = kept
	if len(b.queue) == 0 {
		return nil, 0, b.wake
	}
	slices.SortStableFunc(b.queue, func(x, y *pending) int {
		if x.priority != y.priority {
			if x.priority < y.priority {
				return -1
			}
			return 1
		}
		return int(x.seq - y.seq)
	})
	head := b.queue[0]
	rows := 0
	var picked []int
	for i, p := range b.queue {
		if !b.cfg.Ragged && p.shape != head.shape || p.inputs != head.inputs {
			// Triton cuts a batch at the first request of another shape,
			// or with another set of (optional) inputs.
			break
		}
		if rows+len(p.rows) > b.cfg.MaxBatchSize {
			break // the head always fits: decodeInputs refuses requests over the max
		}
		picked = append(picked, i)
		rows += len(p.rows)
	}
	full := rows >= b.cfg.MaxBatchSize
	if !full {
		// The largest preferred size some prefix of the candidates fills
		// is sent at once; the rest waits for the next batch.
		prefs := slices.Clone(b.cfg.PreferredSizes)
		slices.Sort(prefs)
	prefer:
		for k := len(prefs) - 1; k >= 0; k-- {
			sum := 0
			for j, i := range picked {
				sum += len(b.queue[i].rows)
				if sum == prefs[k] {
					picked, rows, full = picked[:j+1], sum, true
					break prefer
				}
			}
		}
	}
	oldest := time.Duration(0)
	for _, i := range picked {
		oldest = max(oldest, now.Sub(b.queue[i].enqueued))
	}
	if !full && b.cfg.MaxQueueDelay > 0 && oldest < b.cfg.MaxQueueDelay {
		wait := b.cfg.MaxQueueDelay - oldest
		if !head.deadline.IsZero() {
			wait = min(wait, head.deadline.Sub(now))
		}
		return nil, max(wait, time.Millisecond), b.wake
	}
	for j := len(picked) - 1; j >= 0; j-- {
		b.stats.QueueNs += uint64(now.Sub(b.queue[picked[j]].enqueued))
		batch = append(batch, b.queue[picked[j]])
		b.queue = slices.Delete(b.queue, picked[j], picked[j]+1)
	}
	slices.Reverse(batch)
	b.stats.Batches++
	b.stats.Rows += rows
	b.stats.Sizes[rows]++
	return batch, 0, nil
}

func (b *batcher) execute(ctx context.Context, batch []*pending) {
	var rows []Row
	for _, p := range batch {
		rows = append(rows, p.rows...)
	}
	start := b.now()
	results, err := b.exec(ctx, rows)
	took := uint64(b.now().Sub(start))
	b.mu.Lock()
	if err != nil {
		b.stats.Failed += uint64(len(batch))
	} else {
		b.stats.Requests += uint64(len(batch))
	}
	b.stats.ComputeNs += took * uint64(len(batch))
	b.mu.Unlock()
	off := 0
	for _, p := range batch {
		if err != nil {
			p.done <- batchResult{err: err}
			continue
		}
		p.done <- batchResult{results: results[off : off+len(p.rows)]}
		off += len(p.rows)
	}
}

func (b *batcher) snapshot() BatchStats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.stats
	s.Sizes = map[int]int{}
	for k, v := range b.stats.Sizes {
		s.Sizes[k] = v
	}
	return s
}

// BatchConfigOf is the batcher Triton runs for the model configuration c:
// its maximum and preferred batch sizes, queue delay, queue bound and
// timeout, priority levels, ragged audio and instance count.
func BatchConfigOf(c modelspec.Config) BatchConfig {
	return BatchConfig{
		MaxBatchSize: c.MaxBatch, PreferredSizes: c.Batching.Preferred, MaxQueueDelay: c.Batching.MaxQueueDelay,
		MaxQueueSize: c.Batching.MaxQueueSize, PriorityLevels: c.Batching.PriorityLevels, DefaultPriority: c.Batching.DefaultPriority,
		Ragged: c.Inputs()[0].Ragged, Instances: max(c.Instances, 1), DefaultQueueTimeout: c.Batching.QueueTimeout,
	}
}
