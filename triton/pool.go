package triton

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
	MaxInflight    int           // requests in flight per partition
	RequestTimeout time.Duration // per attempt
	Attempts       int           // tries per request, each on the least-loaded partition not yet tried
	BackoffBase    time.Duration // first retry delay; doubles per attempt, with jitter
	BackoffMax     time.Duration
	EjectAfter     int           // consecutive failures that eject a partition
	HealthInterval time.Duration // how often partitions are probed
}

// RegisterFlags registers the pool flags with their defaults.
func (c *PoolConfig) RegisterFlags(fs *flag.FlagSet) {
	c.Addrs = []string{"127.0.0.1:8001"}
	fs.Var((*flagext.StringSliceCSV)(&c.Addrs), "triton-addrs", "comma-separated Triton gRPC addresses, one per partition")
	fs.IntVar(&c.MaxInflight, "triton-max-inflight", 8, "requests in flight per partition; enough to fill its dynamic batcher")
	fs.DurationVar(&c.RequestTimeout, "triton-request-timeout", 2*time.Minute, "timeout of one inference attempt")
	fs.IntVar(&c.Attempts, "triton-attempts", 5, "tries per chunk on overload (UNAVAILABLE), each on another partition when one is free")
	fs.DurationVar(&c.BackoffBase, "triton-backoff", 100*time.Millisecond, "first retry delay; doubles per attempt")
	fs.DurationVar(&c.BackoffMax, "triton-backoff-max", 5*time.Second, "largest retry delay")
	fs.IntVar(&c.EjectAfter, "triton-eject-after", 3, "consecutive failures that take a partition out until it passes a health check")
	fs.DurationVar(&c.HealthInterval, "triton-health-interval", 5*time.Second, "how often partitions are health-checked")
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
	}
	return nil
}

type partition struct {
	client   *Client
	inflight int
	ejected  bool
	failures int // consecutive
}

// Pool dispatches inference over partitions. It is safe for concurrent use.
type Pool struct {
	cfg   PoolConfig
	parts []*partition

	mu      sync.Mutex
	changed chan struct{} // closed and replaced whenever a slot frees or a partition returns
	closed  bool

	mRequests *prometheus.CounterVec
	mInflight *prometheus.GaugeVec
	mHealthy  *prometheus.GaugeVec
	mLatency  *prometheus.HistogramVec
}

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
			Help: "Inference attempts by partition and outcome (ok, overloaded, rejected, error).",
		}, []string{"partition", "outcome"}),
		mInflight: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_triton_inflight",
			Help: "Inference requests in flight per partition.",
		}, []string{"partition"}),
		mHealthy: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_triton_partition_healthy",
			Help: "1 while a partition takes requests, 0 while ejected.",
		}, []string{"partition"}),
		mLatency: f.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fleetscribe_triton_request_seconds",
			Help:    "Latency of successful inference attempts.",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"partition"}),
	}
	for _, addr := range cfg.Addrs {
		c, err := Dial(addr, io)
		if err != nil {
			_ = p.Close()
			return nil, err
		}
		p.parts = append(p.parts, &partition{client: c})
		p.mHealthy.WithLabelValues(addr).Set(1)
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
	var errs []error
	for _, part := range p.parts {
		errs = append(errs, part.client.Close())
	}
	return errors.Join(errs...)
}

func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// acquire takes a slot on the healthy partition with the fewest requests
// outstanding, preferring partitions not in tried. It waits while every
// healthy partition is full, or while none is healthy (an MPS fault takes
// all partitions of a GPU down together; they come back together).
func (p *Pool) acquire(ctx context.Context, tried map[*partition]bool) (*partition, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrNoPartition
		}
		var best *partition
		bestUntried := false
		for _, part := range p.parts {
			if part.ejected || part.inflight >= p.cfg.MaxInflight {
				continue
			}
			untried := !tried[part]
			switch {
			case best == nil,
				untried && !bestUntried,
				untried == bestUntried && part.inflight < best.inflight:
				best, bestUntried = part, untried
			}
		}
		if best != nil {
			best.inflight++
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

func (p *Pool) release(part *partition, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	part.inflight--
	p.mInflight.WithLabelValues(part.client.addr).Set(float64(part.inflight))
	switch {
	case err == nil, errors.Is(err, ErrRejected), errors.Is(err, context.Canceled):
		part.failures = 0
	case errors.Is(err, context.DeadlineExceeded) && part.failures == 0:
		// One slow request is not a broken partition.
	default:
		part.failures++
		if part.failures >= p.cfg.EjectAfter && !part.ejected {
			p.setEjectedLocked(part, true)
		}
	}
	p.broadcastLocked()
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
	case errors.Is(err, ErrRejected):
		return "rejected"
	default:
		return "error"
	}
}

// Transcribe runs one inference, retrying overload and server faults on
// other partitions with exponential backoff. Errors wrap ErrRejected when
// the input itself was refused, ErrOverloaded or ErrBadResponse when
// attempts ran out, or the context's error.
func (p *Pool) Transcribe(ctx context.Context, req Request) (Result, error) {
	tried := make(map[*partition]bool, len(p.parts))
	var lastErr error
	for attempt := 0; attempt < p.cfg.Attempts; attempt++ {
		if attempt > 0 {
			if err := backoff.Sleep(ctx, backoff.Jitter(backoff.Delay(p.cfg.BackoffBase, p.cfg.BackoffMax, attempt))); err != nil {
				return Result{}, fmt.Errorf("%w (after %d attempts; last: %w)", err, attempt, lastErr)
			}
		}
		part, err := p.acquire(ctx, tried)
		if err != nil {
			return Result{}, err
		}
		tried[part] = true
		start := time.Now()
		actx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
		res, err := part.client.Infer(actx, req)
		cancel()
		p.release(part, err)
		p.mRequests.WithLabelValues(part.client.addr, outcome(err)).Inc()
		if err == nil {
			p.mLatency.WithLabelValues(part.client.addr).Observe(time.Since(start).Seconds())
			return res, nil
		}
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("%w: %w", context.Cause(ctx), err)
		}
		if errors.Is(err, ErrRejected) {
			return Result{}, fmt.Errorf("partition %s: %w", part.client.addr, err)
		}
		lastErr = fmt.Errorf("partition %s: %w", part.client.addr, err)
	}
	return Result{}, fmt.Errorf("inference failed after %d attempts: %w", p.cfg.Attempts, lastErr)
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
		if v.part.ejected == v.ready {
			p.setEjectedLocked(v.part, !v.ready)
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
		case <-fast.C:
			p.checkEjected(ctx)
		}
	}
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
