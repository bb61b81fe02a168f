package worker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// An outage is a dependency that stops answering: the output bucket, an
// input bucket (missing, access denied, 5xx, unreachable). Its jobs are
// not the inputs' fault, so they are not failed: a job whose request to a
// dependency that is down fails waits, its message kept invisible by the
// heartbeat, until a probe finds the dependency back, and then runs again
// within the same receive (a transcript computed before the outage is
// written, not computed again). While the output bucket is down the worker
// receives nothing and is not ready. A lone failure (one key, while the
// bucket serves others) is the job's own and fails as before.
//
// A dependency is down when its probe, which does not depend on any one
// object, fails: a PUT of the write check under the output prefix; for an
// input bucket a listing under the failing key and a one-byte GET of a key
// it served lately by GET (the last three, the failing ones skipped); for
// inference the canary on every partition. An object that refuses while
// its bucket answers (403 for a KMS key the worker may not use or another
// account's object) is the job's own: a permanent access_denied record,
// no hold; an archived object (InvalidObjectState) is never an outage:
// archived.

// Names of the dependencies.
const (
	depOutput = "output"
	// depInference is the Triton partitions as a whole: down when every
	// one fails every request, the canary included.
	depInference = "inference"
)

// inferenceProber is a Transcriber that can tell whether any of its
// partitions serves at all (*triton.Pool): its faults can then be held as
// an outage instead of spending the job's receives.
type inferenceProber interface {
	Probe(ctx context.Context) error
}

func inputDep(bucket string) string { return "input:" + bucket }

// unreachableError is a failed request that says its dependency may be
// down rather than the job at fault.
type unreachableError struct {
	dep, key string
	err      error
}

func (e *unreachableError) Error() string { return e.err.Error() }
func (e *unreachableError) Unwrap() error { return e.err }

// request is what a request to a dependency was: a read of the object's
// bytes (which the input probe can ask again), or anything else.
type request bool

const (
	readRequest  request = true
	otherRequest request = false
)

// answer learns from the outcome of a request for key to dep (a
// readRequest: a GET of the object's bytes, remembered for the probe): nil, or an
// error the service gave about the request itself (not found, precondition
// failed), says dep answers; an error that says dep, not the request, is
// at fault (the bucket does not exist, access is denied, the service fails
// or cannot be reached) is returned as an unreachableError. d may be nil
// (a worker's adapter outside Run).
func (d *dependencies) answer(dep, key string, kind request, err error) error {
	switch {
	case err != nil && dependencyFault(err):
		return &unreachableError{dep: dep, key: key, err: err}
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		return err
	case d != nil:
		d.ok(dep, key, kind == readRequest && err == nil)
	}
	return err
}

func dependencyFault(err error) bool {
	if noAnswer(err) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	if archived(err) {
		return false // one object's storage class, with a 403
	}
	if _, ok := errors.AsType[*smithyhttp.RequestSendError](err); ok {
		return true // no answer at all: connection refused, reset, DNS
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok {
		if code := re.HTTPStatusCode(); code >= 500 || code == http.StatusForbidden {
			return true
		}
	}
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		switch ae.ErrorCode() {
		case "NoSuchBucket", "AccessDenied", "AllAccessDisabled", "AccountProblem", "InvalidAccessKeyId", "ExpiredToken",
			"SignatureDoesNotMatch", "InternalError", "ServiceUnavailable", "SlowDown", "RequestTimeout":
			return true
		}
		return strings.HasPrefix(ae.ErrorCode(), "KMS.")
	}
	return false
}

// noAnswer reports a request that got no answer within the client's
// answer timeout (awsconf.ResponseHeaderTimeout): the service, or the way
// to it, swallowed it. net/http's error for it says it is a deadline
// exceeded, as a request whose own context ran out also is; its text is
// what tells them apart.
func noAnswer(err error) bool {
	_, sent := errors.AsType[*smithyhttp.RequestSendError](err)
	return sent && strings.Contains(err.Error(), "timeout awaiting response headers")
}

// archived reports S3 refusing to read an object for its storage class
// (Glacier Flexible Retrieval or Deep Archive, an archive tier of
// Intelligent-Tiering) until it is restored.
func archived(err error) bool {
	ae, ok := errors.AsType[smithy.APIError](err)
	return ok && ae.ErrorCode() == "InvalidObjectState"
}

// objectRefused reports an answer that, from a bucket that serves other
// requests, is the object's own refusal: access denied (the object's KMS
// key, another account's object, a policy on its key).
func objectRefused(err error) bool {
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		return ae.ErrorCode() == "AccessDenied" || strings.HasPrefix(ae.ErrorCode(), "KMS.")
	}
	re, ok := errors.AsType[*smithyhttp.ResponseError](err)
	return ok && re.HTTPStatusCode() == http.StatusForbidden // a HEAD's 403 has no code
}

// A prober tells whether a dependency answers, from the keys that failed
// since its last success and the last keys it served, newest first (a
// read that succeeded: GET, never HEAD, which answers where a GET may not).
type prober func(ctx context.Context, failing []string, served []string) error

// servedKept is how many served keys a dependency remembers for its probe.
const servedKept = 3

// dependency is one bucket the worker needs, as its requests found it.
type dependency struct {
	// probe decides a failure: its success says the failure was the
	// key's own (it does not depend on the failing object), its failure
	// that the dependency is down. nil: no probe, every failure the key's.
	probe   prober
	failing map[string]error // keys failed since the last success
	served  []string         // the last keys a read succeeded for, newest first
	down    bool
	since   time.Time
	err     error // the failure that took it down
	probing bool
}

// dependencies tracks the worker's dependencies and the jobs waiting for
// them.
type dependencies struct {
	log  zerolog.Logger
	now  func() time.Time
	wait time.Duration // the most a job waits for one
	m    *outageMetrics
	// probeFor returns how to probe a dependency, by name.
	probeFor func(name string) prober

	mu      sync.Mutex
	deps    map[string]*dependency
	changed chan struct{} // closed and replaced when a dependency goes down or up, or a probe ends
}

type outageMetrics struct {
	up      *prometheus.GaugeVec
	outages *prometheus.CounterVec
	waiting prometheus.Gauge
	reruns  *prometheus.CounterVec
}

func newDependencies(log zerolog.Logger, now func() time.Time, wait time.Duration, m *outageMetrics) *dependencies {
	d := &dependencies{log: log, now: now, wait: wait, m: m, deps: map[string]*dependency{}, changed: make(chan struct{})}
	d.probeFor = func(string) prober { return nil }
	return d
}

// get returns the dependency of name, known from now on.
func (d *dependencies) get(name string) *dependency {
	dep, ok := d.deps[name]
	if !ok {
		dep = &dependency{failing: map[string]error{}}
		dep.probe = d.probeFor(name)
		d.deps[name] = dep
	}
	return dep
}

func (d *dependencies) broadcastLocked() {
	close(d.changed)
	d.changed = make(chan struct{})
}

// ok records a request for key to name that name answered: served (a
// read that succeeded), or otherwise answered (a HEAD, not found,
// precondition failed).
func (d *dependencies) ok(name, key string, served bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	dep := d.get(name)
	if served && !slices.Contains(dep.served, key) {
		// The last few keys read, newest first.
		dep.served = append([]string{key}, dep.served[:min(len(dep.served), servedKept-1)]...)
	}
	if len(dep.failing) == 0 && !dep.down {
		return
	}
	d.setUpLocked(name, dep)
	d.broadcastLocked()
}

// failed records a failure of key on name and reports whether name is
// down already.
func (d *dependencies) failed(name, key string, err error) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	dep := d.get(name)
	dep.failing[key] = err
	return dep.down
}

func (d *dependencies) setDownLocked(name string, dep *dependency, err error) {
	dep.down, dep.since, dep.err = true, d.now(), err
	d.m.up.WithLabelValues(name).Set(0)
	d.m.outages.WithLabelValues(name).Inc()
	d.log.Error().Str("dependency", name).Err(err).Msg("dependency down: its jobs wait, their messages kept in hand")
	d.broadcastLocked()
}

// setUpLocked records that name answers: its failures are forgotten and,
// if it was down, it is up again (the caller broadcasts).
func (d *dependencies) setUpLocked(name string, dep *dependency) {
	clear(dep.failing)
	if dep.down {
		dep.down = false
		d.m.up.WithLabelValues(name).Set(1)
		d.log.Warn().Str("dependency", name).Dur("down_for", d.now().Sub(dep.since)).Msg("dependency back; jobs waiting for it run again")
	}
}

// down reports the output bucket's outage or the inference partitions',
// if one is down: the worker then receives nothing and is not ready.
func (d *dependencies) down() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dep, ok := d.deps[depOutput]; ok && dep.down {
		return fmt.Errorf("output bucket unavailable since %s: %w", dep.since.UTC().Format(time.RFC3339), dep.err)
	}
	if dep, ok := d.deps[depInference]; ok && dep.down {
		return fmt.Errorf("inference unavailable since %s (every partition fails every request): %w", dep.since.UTC().Format(time.RFC3339), dep.err)
	}
	return nil
}

// waitFor reports whether err is a request to a dependency that is down
// and has come back within ctx (the request runs again); it waits while
// the dependency is down. Any other error, nil included, is false.
// While it waits, the job lends its slot and counts in its message's jobs
// held (d may be nil: neither).
func (w *Worker) waitFor(ctx context.Context, d *delivery, err error) bool {
	again, _ := w.settle(ctx, d, err)
	return again
}

// untilWritten calls write(ctx) and, each time it fails because a
// dependency is down, waits for it within hold (the message's context)
// and calls write(hold) again: what was computed is kept across the
// outage and written once it is back, however long a job's -job-timeout
// (ctx's) is. It returns write's last error: nil, one of its own, or
// the outage's when the wait ended first.
func (w *Worker) untilWritten(ctx, hold context.Context, d *delivery, write func(context.Context) error) error {
	for {
		err := write(ctx)
		if err == nil || !w.waitFor(hold, d, err) {
			return err
		}
		ctx = hold
	}
}

// settle is waitFor that also says whose fault a failure was: an object
// of an input bucket that refused while its bucket answers comes back as
// the job's permanent access_denied error.
func (w *Worker) settle(ctx context.Context, d *delivery, err error) (again bool, _ error) {
	ue, ok := errors.AsType[*unreachableError](err)
	if !ok || ctx.Err() != nil {
		return false, err
	}
	back, own := w.deps.hold(ctx, func() func() { return w.whileHeld(ctx, d) }, ue)
	if own && strings.HasPrefix(ue.dep, inputDep("")) && objectRefused(ue.err) {
		return false, Permanentf(contract.ClassAccessDenied,
			"s3://%s/%s refuses the worker's read while its bucket serves others (the object's KMS key, owner or policy): %v",
			strings.TrimPrefix(ue.dep, inputDep("")), ue.key, ue.err)
	}
	return back, err
}

// whileHeld marks d's job held and lends its slot; the returned func,
// called when the wait ends, takes the slot back and clears the mark.
func (w *Worker) whileHeld(ctx context.Context, d *delivery) func() {
	if d == nil {
		return func() {}
	}
	d.prog.held.Add(1)
	gate := w.slots.Load()
	lent := gate != nil && gate.lend(d.queue)
	return func() {
		if lent {
			gate.repay(ctx, d.queue)
		}
		d.prog.held.Add(-1)
	}
}

// hold decides what a job whose request failed with ue does: back once
// the dependency, which was down, is back (run the step again); own when
// the dependency answers and the failure is the job's own; neither when
// the wait ended (fail as before). A failure while the dependency is up
// is confirmed first by its probe.
func (d *dependencies) hold(ctx context.Context, waiting func() (done func()), ue *unreachableError) (back, own bool) {
	if !d.failed(ue.dep, ue.key, ue.err) && !d.confirm(ctx, ue.dep) {
		return false, ctx.Err() == nil
	}
	d.m.waiting.Inc()
	defer d.m.waiting.Dec()
	defer waiting()()
	wctx, cancel := context.WithTimeout(ctx, d.wait)
	defer cancel()
	for {
		d.mu.Lock()
		dep := d.get(ue.dep)
		up, wait := !dep.down, d.changed
		d.mu.Unlock()
		if up {
			return true, false
		}
		select {
		case <-wait:
		case <-wctx.Done():
			return false, false
		}
	}
}

// confirm reports whether name is down after a failure while it was up:
// its probe decides (a dependency without one: the key's own failure).
func (d *dependencies) confirm(ctx context.Context, name string) bool {
	d.mu.Lock()
	probed := d.get(name).probe != nil
	d.mu.Unlock()
	if !probed {
		return false
	}
	d.probeOnce(ctx, name)
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.get(name).down
}

// probeOnce probes name (or waits for the probe already running) and marks
// it up or down by the answer.
func (d *dependencies) probeOnce(ctx context.Context, name string) {
	d.mu.Lock()
	dep := d.get(name)
	for dep.probing {
		wait := d.changed
		d.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return
		}
		d.mu.Lock()
		if !dep.probing {
			d.mu.Unlock()
			return // its answer is in
		}
	}
	dep.probing = true
	keys := make([]string, 0, len(dep.failing))
	for k := range dep.failing {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	probe, served := dep.probe, slices.Clone(dep.served)
	d.mu.Unlock()

	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := probe(pctx, keys, served)
	cancel()

	d.mu.Lock()
	defer d.mu.Unlock()
	dep.probing = false
	switch {
	case err == nil:
		d.setUpLocked(name, dep)
	case ctx.Err() != nil:
	case !dep.down:
		d.setDownLocked(name, dep, err)
		return
	}
	d.broadcastLocked()
}

// run probes every dependency that is down, with backoff (1 s doubling to
// 10 s: a write check or a one-byte read every 10 s costs nothing beside
// the work waiting), until ctx ends.
func (d *dependencies) run(ctx context.Context) {
	tries := map[string]int{}
	next := map[string]time.Time{}
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d.mu.Lock()
		var due []string
		for name, dep := range d.deps {
			switch {
			case !dep.down:
				delete(tries, name)
				delete(next, name)
			case dep.probe != nil && !dep.probing && !d.now().Before(next[name]):
				due = append(due, name)
			}
		}
		d.mu.Unlock()
		for _, name := range due {
			d.probeOnce(ctx, name)
			tries[name]++
			next[name] = d.now().Add(backoff.Delay(time.Second, 10*time.Second, tries[name]))
		}
	}
}
