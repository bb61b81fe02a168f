package triton

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
	"github.com/fleetscribe/fleetscribe/internal/flagext"
)

// PoolConfig configures a Pool.
type PoolConfig struct {
	Addrs          []string      // one address per partition
	MaxInflight    int           // most requests in flight per partition; the adaptive limit stays at or below it
	RequestTimeout time.Duration // per attempt
	Attempts       int           // tries per request on faults (not on backpressure), each on the least-loaded partition not yet tried
	BackoffBase    time.Duration // first retry delay; doubles per attempt, with jitter
	BackoffMax     time.Duration
	EjectAfter     int // consecutive failures to reach a partition (connection loss, timeouts) that eject it
	// PoisonWait is how long a request that failed with the same model
	// error on two partitions waits for one of them to serve another
	// input, which shows the input is at fault (ErrPoisonInput).
	PoisonWait     time.Duration
	HealthInterval time.Duration // how often partitions are probed
	StartTimeout   time.Duration // how long a worker waits at start for a partition to be ready
	Priority       uint64        // Triton request priority for every request (0: the model's default)
	QueueTimeout   time.Duration // Triton queue timeout for every request (0: the model's default)
	// SharedMemory sends each chunk's audio through a shared memory region
	// per partition (Triton's system shared memory) where the partition
	// can map it, and in the request where it cannot.
	SharedMemory bool
	// ChunkSamples is the longest chunk the caller sends (the slot size of
	// the shared memory regions; the model's largest bucket, if larger).
	ChunkSamples int
	// SharedMemoryBudget caps the bytes of every partition's region
	// together (MaxInflight slots of ChunkSamples each): the regions are
	// reserved when they are made, and their pages count against the
	// process's memory. A partition whose region would pass it, or that
	// /dev/shm has no room for, gets the audio in the request. 0: no cap
	// but /dev/shm's size.
	SharedMemoryBudget int64
	// MetricsAddrs are the partitions' Triton metrics endpoints, one per
	// address of Addrs, read at each health check for what each
	// partition's model runs (Engines). Empty: each gRPC port plus two,
	// the MPS plan's layout; "off" alone: none.
	MetricsAddrs []string
	// OnSharedMemoryError, if set, hears why a partition could not map its
	// region, after each failed registration (a partition is asked again
	// after 30 s, then at doubling intervals up to 16 minutes), and why it
	// still held the region when Close gave up unregistering it.
	OnSharedMemoryError func(partition string, err error)
	// DiarizePack is how many diarization requests one partition takes
	// before another gets any (a first attempt's; retries go to the least
	// loaded partition as every request does). 0: each to the least
	// loaded partition. A recording's chunks go to diarization one at a
	// time, so a few dozen recordings spread over every partition make
	// diarize batches of one or two rows; packed, a partition's fill.
	DiarizePack int
}

// RegisterFlags registers the pool flags with their defaults.
func (c *PoolConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Addrs = []string{"127.0.0.1:8001"}
	fs.Var((*flagext.StringSliceCSV)(&c.Addrs), "triton-addrs", "comma-separated Triton gRPC addresses, one per partition")
	fs.Var((*flagext.StringSliceCSV)(&c.MetricsAddrs), "triton-metrics-addrs", "the partitions' Triton metrics addresses, one per -triton-addrs entry (empty: each gRPC port + 2; off: none)\n"+
		"Empty follows worker mps's layout (gRPC, HTTP, metrics). Read at each health check for what each partition's model runs (encoder path, decoder CUDA graphs): fleetscribe_triton_engine and /readyz.")
	fs.IntVar(&c.MaxInflight, "triton-max-inflight", 16, "most requests in flight per partition\nEnough to fill its dynamic batcher's preferred batch sizes; backpressure lowers each partition's limit below it, success raises it again. "+
		"On an H200 eight partitions served most at 16 each (128 a GPU) and a third less at 32: a GPU's total, 64-128, is what to keep (32 each for two partitions).")
	fs.DurationVar(&c.RequestTimeout, "triton-request-timeout", 2*time.Minute, "timeout of one inference attempt")
	fs.IntVar(&c.Attempts, "triton-attempts", 5, "tries per chunk on faults (unreachable partition, server error), each on another partition when one is free\nBackpressure is waited out within the job's deadline instead.")
	fs.DurationVar(&c.BackoffBase, "triton-backoff", 100*time.Millisecond, "first retry delay; doubles per attempt")
	fs.DurationVar(&c.BackoffMax, "triton-backoff-max", 5*time.Second, "largest retry delay")
	fs.IntVar(&c.EjectAfter, "triton-eject-after", 3, "consecutive failures to reach a partition that take it out until it passes a health check\nConnection loss and timeouts only: a server error says nothing of the partition (it lowers its in-flight limit), backpressure never ejects.")
	fs.DurationVar(&c.PoisonWait, "triton-poison-wait", 10*time.Second, "how long a request failed alike on two partitions, with no canary to judge it, waits for one to serve another\nIf one does, the input is at fault: a permanent model_failed record, not a retry. A transcription always has a canary (a chunk served lately, else faint noise of its length); a diarization request before any was served has none.")
	fs.DurationVar(&c.HealthInterval, "triton-health-interval", 5*time.Second, "how often partitions are health-checked (ejected ones more often)")
	fs.DurationVar(&c.StartTimeout, "triton-start-timeout", 15*time.Minute, "how long the worker waits at start for a partition to be ready before it exits\n"+
		"A GPU partition compiles its encoder before it is ready: with model.py's defaults (one length bucket, six row buckets), eight NeMo partitions of an H200 were ready 177 s after start from an empty compile cache and 56-62 s from a warm one.")
	fs.Uint64Var(&c.Priority, "triton-priority", 0, "Triton request priority of every chunk of -queue-url (1 is highest; 0: the model's default)")
	fs.Int64Var(&c.SharedMemoryBudget, "triton-shared-memory-budget", 0, "bytes the partitions' shared memory regions may hold together (0: a quarter of the worker's memory limit)\n"+
		"Reserved at start (-triton-max-inflight slots of a chunk each, per partition) and counted against the worker's memory: a partition past it, or past what /dev/shm has room for, gets the audio in the request.")
	fs.BoolVar(&c.SharedMemory, "triton-shared-memory", true, "pass chunks' audio through POSIX shared memory where the partition shares this host's /dev/shm\nTriton's system shared memory extension, instead of in the gRPC request; partitions that cannot map it get the audio in the request.")
	fs.DurationVar(&c.QueueTimeout, "triton-queue-timeout", 0, "how long a chunk may wait in Triton's queue before UNAVAILABLE (0: the model's default)")
	fs.IntVar(&c.DiarizePack, "triton-diarize-pack", 0, "diarization requests one partition takes before another gets any (0: each to the least loaded partition)\n"+
		"A recording's chunks go to diarization one at a time, so a few dozen recordings spread over every partition make diarize batches of one or two rows; "+
		"packed, a partition's batches fill. Not yet measured on a GPU (docs/speakers.md); at most the model's max_batch_size.")
}

// Validate reports unusable settings.
func (c PoolConfig) Validate() error {
	switch {
	case len(c.Addrs) == 0:
		return errors.New("no triton addresses")
	case c.MaxInflight < 1:
		return errors.New("triton max inflight must be at least 1")
	case c.Attempts < 1:
		return errors.New("triton attempts must be at least 1")
	case c.RequestTimeout <= 0 || c.HealthInterval <= 0:
		return errors.New("triton timeouts must be positive")
	case c.EjectAfter < 1:
		return errors.New("triton eject-after must be at least 1")
	case c.PoisonWait < 0:
		return errors.New("triton poison wait must not be negative")
	case c.SharedMemoryBudget < 0:
		return errors.New("triton shared memory budget must not be negative")
	case c.DiarizePack < 0:
		return errors.New("triton diarize pack must not be negative")
	case len(c.MetricsAddrs) > 0 && !c.metricsOff() && len(c.MetricsAddrs) != len(c.Addrs):
		return fmt.Errorf("%d triton metrics addresses for %d partitions: give one per partition, none, or off", len(c.MetricsAddrs), len(c.Addrs))
	}
	return nil
}

type partition struct {
	client    *Client
	inflight  int
	diarizing int     // of inflight, diarization requests
	limit     float64 // adaptive in-flight limit (AIMD), 1..MaxInflight
	ejected   bool
	failures  int    // consecutive failures to reach it
	served    uint64 // successful requests, ever
}

// capacity is the number of requests the partition takes at once now.
func (pt *partition) capacity() int { return max(1, int(pt.limit)) }

// Pool dispatches inference over partitions. It is safe for concurrent use.
type Pool struct {
	cfg      PoolConfig
	parts    []*partition
	shmBytes int64 // the partitions' shared memory regions, reserved at NewPool

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a slot frees or a partition returns
	closed  bool

	canaryMu sync.Mutex
	canary   Request // a copy of a request served lately (Samples nil: none yet)
	canaryAt time.Time

	mRequests *prometheus.CounterVec
	mInflight *prometheus.GaugeVec
	mLimit    *prometheus.GaugeVec
	mHealthy  *prometheus.GaugeVec
	mEjects   *prometheus.CounterVec
	mPoison   prometheus.Counter
	mShmSwept prometheus.Counter
	mLatency  *prometheus.HistogramVec
	stats     *serverStats
	engines   *engines
}

func (c PoolConfig) metricsOff() bool { return len(c.MetricsAddrs) == 1 && c.MetricsAddrs[0] == "off" }

// NewPool dials every partition. Metrics are registered on reg.
func NewPool(cfg PoolConfig, io ModelIO, reg prometheus.Registerer) (*Pool, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	f := promauto.With(reg)
	p := &Pool{
		cfg:     cfg,
		changed: make(chan struct{}),
		mRequests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_triton_requests_total",
			Help: "Inference attempts by partition and outcome (ok, overloaded, unavailable, fault, not_found, rejected, error).",
		}, []string{"partition", "outcome"}),
		mInflight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_triton_inflight",
			Help: "Inference requests in flight per partition.",
		}, []string{"partition"}),
		mLimit: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_triton_inflight_limit",
			Help: "Adaptive in-flight limit per partition: halved on backpressure, raised by one per limit's worth of successes.",
		}, []string{"partition"}),
		mEjects: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_triton_ejections_total",
			Help: "Partitions taken out of rotation, by reason (unreachable, not_found, not_ready).",
		}, []string{"partition", "reason"}),
		mPoison: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_triton_poison_inputs_total",
			Help: "Requests the model failed with the same error on two partitions that went on serving others: the input's fault.",
		}),
		mShmSwept: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_triton_shared_memory_swept_total",
			Help: "Shared memory regions that killed workers left in /dev/shm, removed when this worker started.",
		}),
		mHealthy: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_triton_partition_healthy",
			Help: "1 while a partition takes requests, 0 while ejected.",
		}, []string{"partition"}),
		mLatency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetscribe_triton_request_seconds",
			Help:    "Latency of successful inference attempts.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"partition"}),
		stats:   newServerStats(f),
		engines: newEngines(f),
	}
	if cfg.SharedMemory {
		swept, err := SweepSharedMemory()
		p.mShmSwept.Add(float64(len(swept)))
		if err != nil && cfg.OnSharedMemoryError != nil {
			cfg.OnSharedMemoryError("", fmt.Errorf("remove shared memory left by killed workers: %w", err))
		}
	}
	for _, addr := range cfg.Addrs {
		c, err := Dial(addr, io)
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		if n := max(io.MaxChunk(), cfg.ChunkSamples); cfg.SharedMemory && n > 0 {
			report := func(err error) {
				if cfg.OnSharedMemoryError != nil {
					cfg.OnSharedMemoryError(addr, err)
				}
			}
			size := SharedMemoryBytes(cfg.MaxInflight, n)
			if over := p.shmBytes + size; cfg.SharedMemoryBudget > 0 && over > cfg.SharedMemoryBudget {
				report(fmt.Errorf("shared memory: a region of %d MiB (%d slots of %d samples) would bring this worker's to %d MiB, over its budget of %d MiB (-triton-shared-memory-budget)",
					size>>20, cfg.MaxInflight, n, over>>20, cfg.SharedMemoryBudget>>20))
			} else if err := c.UseSharedMemory(cfg.MaxInflight, n); err != nil {
				report(err)
			} else {
				p.shmBytes += size
				c.shm.onErr = report
				f.NewGaugeFunc(prometheus.GaugeOpts{
					Name:        "fleetscribe_triton_shared_memory",
					Help:        "1 while a partition reads chunks from the worker's shared memory, 0 while they go in the request.",
					ConstLabels: prometheus.Labels{"partition": addr},
				}, func() float64 {
					if c.SharedMemory().Registered {
						return 1
					}
					return 0
				})
			}
		}
		part := &partition{client: c, limit: float64(cfg.MaxInflight)}
		p.parts = append(p.parts, part)
		switch i := len(p.parts) - 1; {
		case cfg.metricsOff():
		case len(cfg.MetricsAddrs) > 0:
			p.engines.addrs[part] = cfg.MetricsAddrs[i]
		default:
			if m, err := MetricsAddr(addr); err == nil {
				p.engines.addrs[part] = m
			}
		}
		p.mHealthy.WithLabelValues(addr).Set(1)
		p.mLimit.WithLabelValues(addr).Set(float64(cfg.MaxInflight))
	}
	return p, nil
}

// Close closes every connection; waiting and later requests fail with ErrNoPartition.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	p.closed = true
	p.broadcastLocked()
	// Together: each may wait for its partition to let go of its shared
	// memory region (up to shmUnregisterWait).
	errs := make([]error, len(p.parts))
	var wg sync.WaitGroup
	for i, part := range p.parts {
		wg.Go(func() { errs[i] = part.client.Close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// acquire takes a slot on the healthy partition with the fewest requests
// outstanding (a diarization request's first attempt, with DiarizePack, on
// the partition already diarizing most below the pack: pick), preferring
// partitions not in tried; with elsewhere, only an
// untried one while any healthy partition is untried (after a fault, the
// next attempt waits for another partition rather than asking the one
// that failed again: two partitions' verdicts tell poison from a broken
// partition). It waits while every such partition is full, or while none
// is healthy (an MPS fault takes all partitions of a GPU down together;
// they come back together).
func (p *Pool) acquire(ctx context.Context, tried map[*partition]bool, elsewhere, diarize bool) (*partition, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrNoPartition
		}
		onlyUntried := false
		if elsewhere {
			for _, part := range p.parts {
				if !part.ejected && !tried[part] {
					onlyUntried = true
				}
			}
		}
		pack := 0
		if diarize && len(tried) == 0 {
			pack = p.cfg.DiarizePack
		}
		if best := pick(p.parts, tried, onlyUntried, pack); best != nil {
			best.inflight++
			if diarize {
				best.diarizing++
			}
			p.mInflight.WithLabelValues(best.client.addr).Set(float64(best.inflight))
			p.mu.Unlock()
			return best, nil
		}
		wait := p.changed
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for inference partition: %w", context.Cause(ctx))
		}
	}
}

// pick is the partition a request goes to, nil where none has room: of
// those not ejected and under their limit (onlyUntried: of those not yet
// tried), the least loaded, an untried one first. With pack > 0 (a
// diarization request's first attempt, PoolConfig.DiarizePack), a
// partition already holding some diarization requests but fewer than pack
// comes first, the fullest of them: its batches fill before another
// partition's start.
func pick(parts []*partition, tried map[*partition]bool, onlyUntried bool, pack int) *partition {
	var best, fullest *partition
	bestUntried := false
	for _, part := range parts {
		if part.ejected || part.inflight >= part.capacity() || onlyUntried && tried[part] {
			continue
		}
		if pack > 0 && part.diarizing > 0 && part.diarizing < pack &&
			(fullest == nil || part.diarizing > fullest.diarizing || part.diarizing == fullest.diarizing && part.inflight < fullest.inflight) {
			fullest = part
		}
		untried := !tried[part]
		switch {
		case best == nil,
			untried && !bestUntried,
			untried == bestUntried && part.inflight < best.inflight:
			best, bestUntried = part, untried
		}
	}
	if fullest != nil {
		return fullest
	}
	return best
}

// release gives back the slot and learns from the outcome: success raises
// the adaptive limit; backpressure and server faults halve it (neither
// ejects: a fault may be the input's, and a partition failing everything
// then takes one request at a time); failures to reach the partition count
// toward ejection. It returns the requests the partition has served.
func (p *Pool) release(part *partition, err error, defaultModel, diarize bool) (served uint64, halved bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	part.inflight--
	if diarize {
		part.diarizing--
	}
	addr := part.client.addr
	p.mInflight.WithLabelValues(addr).Set(float64(part.inflight))
	switch {
	case err == nil:
		part.failures = 0
		part.served++
		part.limit = min(float64(p.cfg.MaxInflight), part.limit+1/part.limit)
	case errors.Is(err, ErrOverloaded), errors.Is(err, ErrServerFault):
		halved = part.limit > 1
		part.limit = max(1, part.limit/2)
	case errors.Is(err, ErrRejected), errors.Is(err, context.Canceled):
		// The input's problem or the caller's: says nothing of the partition.
	case errors.Is(err, ErrModelNotFound):
		// Without the pool's model the partition is useless; without a
		// model one job asked for, it still serves everyone else.
		if defaultModel {
			p.ejectLocked(part, "not_found")
		}
	case errors.Is(err, context.DeadlineExceeded) && part.failures == 0:
		// One slow request is not a broken partition.
	default:
		part.failures++
		if part.failures >= p.cfg.EjectAfter {
			p.ejectLocked(part, "unreachable")
		}
	}
	p.mLimit.WithLabelValues(addr).Set(part.limit)
	p.broadcastLocked()
	return part.served, halved
}

// absolve gives back the limit that faults found to be a poison input's
// took from their partitions: the input's failure says nothing of them.
func (p *Pool) absolve(faults []partitionFault) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range faults {
		if f.halved {
			f.part.limit = min(float64(p.cfg.MaxInflight), f.part.limit*2)
			p.mLimit.WithLabelValues(f.part.client.addr).Set(f.part.limit)
		}
	}
	p.broadcastLocked()
}

func (p *Pool) ejectLocked(part *partition, reason string) {
	if part.ejected {
		return
	}
	p.mEjects.WithLabelValues(part.client.addr, reason).Inc()
	p.setEjectedLocked(part, true)
}

func (p *Pool) setEjectedLocked(part *partition, ejected bool) {
	part.ejected = ejected
	v := 1.0
	if ejected {
		v = 0
	} else {
		part.failures = 0
	}
	p.mHealthy.WithLabelValues(part.client.addr).Set(v)
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrOverloaded):
		return "overloaded"
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case errors.Is(err, ErrServerFault):
		return "fault"
	case errors.Is(err, ErrModelNotFound):
		return "not_found"
	case errors.Is(err, ErrRejected):
		return "rejected"
	default:
		return "error"
	}
}

// Transcribe runs one inference. Backpressure (the server's queue is full)
// is waited out with backoff until ctx ends, never counted as a failure;
// faults (unreachable partition, server error, model not loaded there) are
// retried on other partitions up to Attempts times. Errors wrap
// ErrRejected when the input itself was refused, ErrPoisonInput when the
// model failed it the same way on two partitions that serve other inputs,
// the last fault when attempts ran out, or the context's error.
func (p *Pool) Transcribe(ctx context.Context, req Request) (Result, error) {
	p.queueDefaults(&req.Priority, &req.QueueTimeout)
	var res Result
	err := p.call(ctx, req, req.Model == "", func(ctx context.Context, c *Client) error {
		var err error
		res, err = c.Infer(ctx, req)
		if err == nil {
			p.keepCanary(req)
		}
		return err
	})
	return res, err
}

// queueDefaults fills in the pool's priority and queue timeout where a
// request leaves them 0.
func (p *Pool) queueDefaults(priority *uint64, timeout *time.Duration) {
	if *priority == 0 {
		*priority = p.cfg.Priority
	}
	if *timeout == 0 {
		*timeout = p.cfg.QueueTimeout
	}
}

// call runs one request through the pool: attempt is tried on the
// least-loaded partition, backpressure waited out, faults retried on other
// partitions, a fault the same on two partitions that serve other inputs
// called poison (the canary judges, against input's samples). ownModel:
// the request is for the pool's own model, whose absence ejects a
// partition.
func (p *Pool) call(ctx context.Context, input Request, ownModel bool, attempt func(context.Context, *Client) error) error {
	diarize := input.Model != "" && input.Model == p.parts[0].client.io.DiarizeModel
	tried := make(map[*partition]bool, len(p.parts))
	var faulted []partitionFault
	var lastErr error
	faults, overloads := 0, 0
	for {
		if faults+overloads > 0 {
			d := backoff.Jitter(backoff.Delay(p.cfg.BackoffBase, p.cfg.BackoffMax, faults+overloads))
			if err := backoff.Sleep(ctx, d); err != nil {
				return fmt.Errorf("%w (after %d faults, %d overloads; last: %w)", err, faults, overloads, lastErr)
			}
		}
		part, err := p.acquire(ctx, tried, faults > 0, diarize)
		if err != nil {
			if lastErr != nil {
				return fmt.Errorf("%w (last: %w)", err, lastErr)
			}
			return err
		}
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		err = attempt(actx, part.client)
		cancel()
		served, halved := p.release(part, err, ownModel || input.Model == part.client.io.Model, diarize)
		p.mRequests.WithLabelValues(part.client.addr, outcome(err)).Inc()
		if err == nil {
			p.mLatency.WithLabelValues(part.client.addr).Observe(time.Since(start).Seconds())
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		lastErr = fmt.Errorf("partition %s: %w", part.client.addr, err)
		switch {
		case errors.Is(err, ErrRejected):
			return lastErr
		case errors.Is(err, ErrOverloaded):
			// Backpressure: try again, preferring another partition.
			overloads++
			tried[part] = true
		default:
			tried[part] = true
			faults++
			if fe, ok := errors.AsType[*faultError](err); ok {
				faulted = append(faulted, partitionFault{part: part, err: fe, served: served, halved: halved})
				if same := sameFault(faulted); len(same) >= 2 && p.servesOthers(ctx, same, input) {
					p.mPoison.Inc()
					p.absolve(faulted)
					return fmt.Errorf("%w: the same error on %d partitions that serve other inputs (last: %w)", ErrPoisonInput, len(same), lastErr)
				}
			}
			if faults >= p.cfg.Attempts {
				return fmt.Errorf("inference failed after %d attempts: %w", faults, lastErr)
			}
		}
	}
}

// partitionFault is a server fault one attempt of a request met: where,
// which error, and how many requests that partition had served by then.
type partitionFault struct {
	part   *partition
	err    *faultError
	served uint64
	halved bool // the fault halved the partition's in-flight limit
}

// sameFault returns the faults, one per partition, that are the same model
// error as the last one.
func sameFault(faults []partitionFault) []partitionFault {
	last := faults[len(faults)-1]
	var same []partitionFault
	seen := map[*partition]bool{}
	for _, f := range faults {
		if f.err.same(last.err) && !seen[f.part] {
			seen[f.part] = true
			same = append(same, f)
		}
	}
	return same
}

// servesOthers reports whether the partitions that failed an input still
// serve other inputs: one of them has served a request since its fault,
// or answers the canary (an input the pool served lately; before the pool
// has served one, faint noise as long as the failed input), or, for a
// request with no canary (diarization before any was served), serves a
// request within PoisonWait. A partition failing everything (a crashed
// model, a GPU fault that took every client of the GPU down) fails the
// canary too, so good inputs are never blamed for it; and a cold start
// with poison in every slot is judged in one request, not PoisonWait.
func (p *Pool) servesOthers(ctx context.Context, faults []partitionFault, failed Request) bool {
	if p.servedSince(faults) {
		return true
	}
	if p.isCanary(failed) {
		// The pool served this very input lately: it is not what fails
		// (a batch of copies of one recording, a retried chunk).
		return false
	}
	if canary, ok := p.canaryRequest(failed); ok {
		part := faults[len(faults)-1].part
		cctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		_, err := part.client.Infer(cctx, canary)
		cancel()
		return err == nil
	}
	timer := time.NewTimer(p.cfg.PoisonWait)
	defer timer.Stop()
	for {
		p.mu.Lock()
		wait := p.changed
		p.mu.Unlock()
		if p.servedSince(faults) {
			return true
		}
		select {
		case <-wait:
		case <-timer.C:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

// servedSince reports whether any partition served a request after its fault.
func (p *Pool) servedSince(faults []partitionFault) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, f := range faults {
		if f.part.served > f.served {
			return true
		}
	}
	return false
}

// canaryEvery is how often the canary is refreshed from a served request.
const canaryEvery = time.Minute

// keepCanary keeps a copy of a request the pool served, at most once per
// canaryEvery: the known good input that tells a poison input from a
// partition that fails everything.
func (p *Pool) keepCanary(req Request) {
	p.canaryMu.Lock()
	defer p.canaryMu.Unlock()
	if p.canary.Samples != nil && time.Since(p.canaryAt) < canaryEvery {
		return
	}
	p.canary = Request{Samples: slices.Clone(req.Samples), Model: req.Model}
	p.canaryAt = time.Now()
}

// isCanary reports whether req is the canary: an input the pool served.
func (p *Pool) isCanary(req Request) bool {
	p.canaryMu.Lock()
	defer p.canaryMu.Unlock()
	return p.canary.Samples != nil && req.Model == p.canary.Model && slices.Equal(p.canary.Samples, req.Samples)
}

// canaryRequest returns the canary, unless it is the failed input itself;
// where the pool has kept none, a transcription of faint noise as long as
// the failed input (a model that fails on any input of that length fails
// it too). A diarization request has no canary of its own.
func (p *Pool) canaryRequest(failed Request) (Request, bool) {
	p.canaryMu.Lock()
	c := p.canary
	p.canaryMu.Unlock()
	switch {
	case c.Samples != nil && !slices.Equal(c.Samples, failed.Samples):
		return c, true
	case c.Samples == nil && len(failed.Samples) > 0 && (failed.Model == "" || failed.Model != p.parts[0].client.io.DiarizeModel):
		return Request{Samples: quiet(len(failed.Samples)), Model: failed.Model}, true
	}
	return Request{}, false
}

// Probe asks every partition that takes requests for the canary (a chunk
// the pool served lately, else a second of faint noise): nil once one
// answers, else why none did. A pool whose partitions all fail every
// request (a model that cannot load its weights, every MPS client down)
// fails it; the worker holds its jobs and probes until it passes.
func (p *Pool) Probe(ctx context.Context) error {
	canary, _ := p.canaryRequest(Request{Samples: quiet(16000)}) // always one
	p.mu.Lock()
	var parts []*partition
	for _, part := range p.parts {
		if !part.ejected {
			parts = append(parts, part)
		}
	}
	p.mu.Unlock()
	if len(parts) == 0 {
		return errors.New("no Triton partition is healthy")
	}
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
			defer cancel()
			if _, err := part.client.Infer(cctx, canary); err != nil {
				errs[i] = fmt.Errorf("partition %s: %w", part.client.addr, err)
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err == nil {
			return nil
		}
	}
	return fmt.Errorf("every partition fails the canary: %w", errors.Join(errs...))
}

// quiet is n samples of faint noise (about -50 dBFS), the same each time.
func quiet(n int) []float32 {
	rng := rand.New(rand.NewPCG(0x71e7, uint64(n)))
	out := make([]float32, n)
	for i := range out {
		out[i] = float32(0.003 * rng.NormFloat64())
	}
	return out
}

// Healthy returns the number of partitions taking requests (not ejected),
// as the last health checks left them; it makes no call.
func (p *Pool) Healthy() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, part := range p.parts {
		if !part.ejected {
			n++
		}
	}
	return n
}

// CheckHealth probes every partition once: a partition whose server or
// model is not ready is ejected, an ejected one that is ready again returns.
// It returns the number of healthy partitions.
func (p *Pool) CheckHealth(ctx context.Context) int {
	type verdict struct {
		part  *partition
		ready bool
	}
	verdicts := make([]verdict, len(p.parts))
	var wg sync.WaitGroup
	for i, part := range p.parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cctx, cancel := context.WithTimeout(ctx, p.cfg.HealthInterval)
			defer cancel()
			ready, err := part.client.Ready(cctx)
			verdicts[i] = verdict{part, err == nil && ready}
		}()
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	healthy := 0
	for _, v := range verdicts {
		if v.ready {
			healthy++
		}
		switch {
		case v.ready && v.part.ejected:
			p.setEjectedLocked(v.part, false)
		case !v.ready && !v.part.ejected:
			p.ejectLocked(v.part, "not_ready")
		}
	}
	p.broadcastLocked()
	return healthy
}

// WaitReady blocks until at least one partition is ready, checking at the
// health interval.
func (p *Pool) WaitReady(ctx context.Context) error {
	for {
		if p.CheckHealth(ctx) > 0 {
			return nil
		}
		if err := backoff.Sleep(ctx, p.cfg.HealthInterval); err != nil {
			return fmt.Errorf("wait for a ready triton partition: %w", err)
		}
	}
}

// ejectedProbeInterval is how often ejected partitions are probed between
// full health checks, so a restarted partition is back within about a
// second.
const ejectedProbeInterval = 250 * time.Millisecond

// Run health-checks the partitions until ctx is done: every partition at
// the health interval, and ejected ones more often.
func (p *Pool) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.HealthInterval)
	defer t.Stop()
	fast := time.NewTicker(min(ejectedProbeInterval, p.cfg.HealthInterval))
	defer fast.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.CheckHealth(ctx)
			p.CollectStats(ctx)
		case <-fast.C:
			p.checkEjected(ctx)
		}
	}
}

// CollectStats reads each partition's Triton statistics into the queue and
// compute counters, and what its model runs (Run does it at every health
// check).
func (p *Pool) CollectStats(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, p.cfg.HealthInterval)
	defer cancel()
	p.stats.collect(cctx, p.parts)
	p.engines.collect(cctx, p.parts)
}

// checkEjected probes only the ejected partitions and readmits those that
// are ready.
func (p *Pool) checkEjected(ctx context.Context) {
	p.mu.Lock()
	var ejected []*partition
	for _, part := range p.parts {
		if part.ejected {
			ejected = append(ejected, part)
		}
	}
	p.mu.Unlock()
	if len(ejected) == 0 {
		return
	}
	ready := make([]bool, len(ejected))
	var wg sync.WaitGroup
	for i, part := range ejected {
		wg.Go(func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			ok, err := part.client.Ready(cctx)
			ready[i] = err == nil && ok
		})
	}
	wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, part := range ejected {
		if ready[i] && part.ejected {
			p.setEjectedLocked(part, false)
		}
	}
	p.broadcastLocked()
}

// SharedMemoryBytes is the memory the pool's shared memory regions hold:
// reserved when the pool was made, held until it is closed.
func (p *Pool) SharedMemoryBytes() int64 { return p.shmBytes }
