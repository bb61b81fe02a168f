// Package enqueue sends transcription jobs to a worker queue at archive
// scale: from S3 prefixes (listed in parallel over their sub-prefixes), an
// S3 Inventory, a file or stdin, or keys; narrowed by suffix, glob, size
// and modification time, and by skip-if-done (the transcript for this
// input and model already exists, found with the worker's own output
// keys); sent in SendMessageBatch calls within a rate limit; resumable
// from a checkpoint journal; with progress. Redrive moves dead-lettered
// jobs back after a fix, and Status shows a pipeline's queues.
package enqueue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// SQSAPI is the SQS call sending makes.
type SQSAPI interface {
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// S3API is the S3 calls listing and skip-checking make.
type S3API interface {
	ListObjectsV2(ctx context.Context, params *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
	GetObject(ctx context.Context, params *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	HeadObject(ctx context.Context, params *s3.HeadObjectInput, optFns ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetBucketVersioning(ctx context.Context, params *s3.GetBucketVersioningInput, optFns ...func(*s3.Options)) (*s3.GetBucketVersioningOutput, error)
}

// Sources say where keys come from; any combination may be given.
type Sources struct {
	Bucket    string   // bucket of Prefixes, Keys and bare keys in File
	Prefixes  []string // list everything under each
	Inventory string   // s3://bucket/.../manifest.json of an S3 Inventory (CSV)
	File      string   // one key or s3://bucket/key per line; "-" is Stdin
	Keys      []string // keys or s3:// URLs
	Stdin     io.Reader
}

// Options configure a Run.
type Options struct {
	QueueURL string
	Sources  Sources
	Filter   Filter
	Job      contract.Job // template: model, output prefix, formats, priority

	// Skip-if-done: leave out inputs whose transcript exists in
	// OutputBucket under the job's output prefix and model (or, when the
	// job does not set them, WorkerOutputPrefix and WorkerModel).
	SkipDone           bool
	OutputBucket       string
	WorkerOutputPrefix string
	WorkerModel        string
	CheckMode          string  // CheckList or CheckHead
	CheckConcurrency   int     // HeadObject calls in flight
	CheckRate          float64 // S3 check calls per second; 0: unlimited

	ListConcurrency int // streams listed at once
	ListDepth       int // levels of sub-prefixes to fan out over

	Rate            float64 // messages per second; 0: unlimited
	SendConcurrency int     // SendMessageBatch calls in flight
	Attempts        int     // tries per entry
	DryRun          bool    // write the jobs to DryRunOut instead of sending
	DryRunOut       io.Writer

	Checkpoint string // journal file; empty: no resume

	Progress         Progress // nil: none
	ProgressInterval time.Duration
	Sleep            func(context.Context, time.Duration) error // nil: a real timer
	Log              func(msg string, err error)                // nil: discard
}

// Defaults returns the options a command line starts from.
func Defaults() Options {
	return Options{
		WorkerOutputPrefix: "transcripts/", WorkerModel: "asr", CheckMode: CheckList,
		CheckConcurrency: 32, ListConcurrency: 8, ListDepth: 1, SendConcurrency: 8, Attempts: 5,
		ProgressInterval: 5 * time.Second,
	}
}

// Validate reports missing or inconsistent options.
func (o *Options) Validate() error {
	s := o.Sources
	switch {
	case o.QueueURL == "" && !o.DryRun:
		return errors.New("a queue URL is required")
	case len(s.Prefixes) == 0 && s.Inventory == "" && s.File == "" && len(s.Keys) == 0:
		return errors.New("nothing to enqueue: give keys, -prefix, -inventory or -from-file")
	case len(s.Prefixes) > 0 && s.Bucket == "":
		return errors.New("-prefix needs -bucket")
	case s.Bucket != "" && contract.CheckBucketName(s.Bucket) != nil:
		return fmt.Errorf("-bucket: %w", contract.CheckBucketName(s.Bucket))
	case o.SkipDone && o.OutputBucket == "":
		return errors.New("-skip-done needs -output-bucket (the worker's)")
	case o.CheckMode != CheckList && o.CheckMode != CheckHead:
		return fmt.Errorf("check mode %q: want %s or %s", o.CheckMode, CheckList, CheckHead)
	case o.Rate < 0 || o.CheckRate < 0:
		return errors.New("rates must not be negative")
	}
	if o.Job.OutputPrefix != "" {
		if err := contract.CheckOutputPrefix(o.Job.OutputPrefix); err != nil {
			return err
		}
	}
	if o.Job.Model == "" && o.SkipDone && o.WorkerModel == "" {
		return errors.New("-skip-done needs the model: -job-model or -worker-model")
	}
	job := o.Job
	job.V, job.Bucket, job.Key = contract.JobVersion, "placeholder", "k" // checks the template's own fields
	if err := job.Validate(); err != nil {
		return err
	}
	return o.Filter.Validate()
}

// fingerprint identifies what a run sends, so a checkpoint is only
// resumed by the same run.
func (o *Options) fingerprint() string {
	s := o.Sources
	b, _ := json.Marshal(map[string]any{
		"queue": o.QueueURL, "bucket": s.Bucket, "prefixes": s.Prefixes, "inventory": s.Inventory,
		"file": s.File, "keys": s.Keys, "filter": o.Filter, "job": o.Job, "depth": o.ListDepth,
		"skip": o.SkipDone, "out": o.OutputBucket, "wprefix": o.WorkerOutputPrefix, "wmodel": o.WorkerModel,
	})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Counters count what a run did; they are read while it runs.
type Counters struct {
	Listed      atomic.Int64 // items the sources yielded
	Filtered    atomic.Int64 // left out by a filter
	SkippedDone atomic.Int64 // transcript already exists
	SentBefore  atomic.Int64 // sent by an earlier, interrupted run (checkpoint)
	Sent        atomic.Int64
	Failed      atomic.Int64 // could not be checked or sent (retried by a resumed run)
	Refused     atomic.Int64 // not a job the worker could take (bucket or key breaks S3's rules): never retried
	Retried     atomic.Int64 // entry retries
	SendCalls   atomic.Int64
	ListingDone atomic.Bool // every source has been listed to its end
}

// Finished is the number of items that reached an outcome.
func (c *Counters) Finished() int64 {
	return c.Filtered.Load() + c.SkippedDone.Load() + c.SentBefore.Load() + c.Sent.Load() + c.Failed.Load() + c.Refused.Load()
}

// Summary is the final count of a run.
type Summary struct {
	Listed, Filtered, SkippedDone, SentBefore, Sent, Failed, Refused, Retried, SendCalls int64
	Elapsed                                                                              time.Duration
	// FirstRefusal says why the first refused item was refused.
	FirstRefusal error
}

func (s Summary) String() string {
	return fmt.Sprintf("listed %d, filtered %d, skipped as done %d, sent earlier %d, sent %d, failed %d, refused %d (%d SendMessageBatch calls, %d entry retries) in %s",
		s.Listed, s.Filtered, s.SkippedDone, s.SentBefore, s.Sent, s.Failed, s.Refused, s.SendCalls, s.Retried, s.Elapsed.Round(time.Millisecond))
}

// Progress is told how a run is going.
type Progress interface {
	Update(c *Counters, elapsed time.Duration)
	Done(c *Counters, elapsed time.Duration)
}

// ErrFailed is returned (wrapped) when some items could not be sent.
var ErrFailed = errors.New("some jobs could not be enqueued")

// ErrRefused is returned (wrapped) when some items are not jobs the worker
// could take: a retry cannot send them.
var ErrRefused = errors.New("some items are not valid jobs")

// Run enqueues the jobs that opts describe and returns what it did. An
// interrupted run (ctx cancelled) finishes the calls in flight, writes the
// checkpoint, and returns the context's error.
func Run(ctx context.Context, s3c S3API, sqsc SQSAPI, opts Options) (Summary, error) {
	start := time.Now()
	if err := opts.Validate(); err != nil {
		return Summary{}, err
	}
	logf := opts.Log
	if logf == nil {
		logf = func(string, error) {}
	}
	sleep := opts.Sleep
	if sleep == nil {
		sleep = backoff.Sleep
	}
	journal := opts.Checkpoint
	if opts.DryRun {
		journal = "" // nothing is sent, so nothing may be marked as sent
	}
	tr, err := openTracker(journal, opts.fingerprint())
	if err != nil {
		return Summary{}, err
	}
	var stats Counters
	r := &runner{opts: opts, s3: s3c, track: tr, stats: &stats, log: logf}
	r.job = opts.Job
	r.check = &checker{
		s3: s3c, filter: opts.Filter, skip: opts.SkipDone, mode: opts.CheckMode, bucket: opts.OutputBucket,
		prefix: firstNonEmpty(opts.Job.OutputPrefix, opts.WorkerOutputPrefix), model: firstNonEmpty(opts.Job.Model, opts.WorkerModel),
		heads: opts.CheckConcurrency, versioned: map[string]bool{},
	}
	if opts.CheckRate > 0 {
		r.check.limiter = rate.NewLimiter(rate.Limit(opts.CheckRate), max(1, int(opts.CheckRate)))
	}
	snd := &sender{
		sqs: sqsc, queueURL: opts.QueueURL, concurrency: max(opts.SendConcurrency, 1), attempts: max(opts.Attempts, 1),
		linger: 20 * time.Millisecond, sleep: sleep, track: tr, stats: &stats, log: logf,
	}
	if opts.Rate > 0 {
		snd.limiter = rate.NewLimiter(rate.Limit(opts.Rate), maxBatchEntries)
	}

	out := make(chan outgoing, 4*maxBatchEntries*snd.concurrency)
	g, gctx := errgroup.WithContext(ctx)
	// The sender outlives the producers' context: it stops when out is
	// closed or the caller's ctx ends, finishing the calls in flight.
	sendDone := make(chan error, 1)
	go func() {
		if opts.DryRun {
			sendDone <- r.dryRun(out)
			return
		}
		sendDone <- snd.run(ctx, out)
	}()
	g.Go(func() error {
		defer close(out)
		return r.produce(gctx, out)
	})
	stopFlush := make(chan struct{})
	var flushWG sync.WaitGroup
	flushWG.Add(1)
	go func() {
		defer flushWG.Done()
		r.flushLoop(stopFlush, start)
	}()
	err = g.Wait()
	if serr := <-sendDone; err == nil {
		err = serr
	}
	close(stopFlush)
	flushWG.Wait()
	if cerr := tr.close(); err == nil && cerr != nil {
		err = fmt.Errorf("checkpoint: %w", cerr)
	}
	if opts.Progress != nil {
		opts.Progress.Done(&stats, time.Since(start))
	}
	sum := Summary{
		Listed: stats.Listed.Load(), Filtered: stats.Filtered.Load(), SkippedDone: stats.SkippedDone.Load(),
		SentBefore: stats.SentBefore.Load(), Sent: stats.Sent.Load(), Failed: stats.Failed.Load(), Refused: stats.Refused.Load(),
		Retried: stats.Retried.Load(), SendCalls: stats.SendCalls.Load(), Elapsed: time.Since(start), FirstRefusal: r.firstRefusal(),
	}
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	if err == nil && sum.Failed > 0 {
		err = fmt.Errorf("%w: %d failed (a run with the same -checkpoint retries them)", ErrFailed, sum.Failed)
	}
	if err == nil && sum.Refused > 0 {
		err = fmt.Errorf("%w: %d refused, which no retry can send (the first: %w)", ErrRefused, sum.Refused, sum.FirstRefusal)
	}
	return sum, err
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

type runner struct {
	opts  Options
	s3    S3API
	job   contract.Job
	check *checker
	track *tracker
	stats *Counters
	log   func(string, error)
	// refused is why the first item was refused, if one was.
	refused atomic.Pointer[error]
}

func (r *runner) firstRefusal() error {
	if p := r.refused.Load(); p != nil {
		return *p
	}
	return nil
}

// flushLoop writes the checkpoint's watermarks and reports progress.
func (r *runner) flushLoop(stop <-chan struct{}, start time.Time) {
	flush := time.NewTicker(time.Second)
	defer flush.Stop()
	interval := r.opts.ProgressInterval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	prog := time.NewTicker(interval)
	defer prog.Stop()
	for {
		select {
		case <-stop:
			return
		case <-flush.C:
			if err := r.track.flush(); err != nil {
				r.log("checkpoint write failed", err)
			}
		case <-prog.C:
			if r.opts.Progress != nil {
				r.opts.Progress.Update(r.stats, time.Since(start))
			}
		}
	}
}

// produce runs every stream, at most ListConcurrency at once; streams may
// spawn more. Failed entries of an earlier run go first.
func (r *runner) produce(ctx context.Context, out chan<- outgoing) error {
	if err := r.sendRetries(ctx, out); err != nil {
		return err
	}
	initial, err := r.streams(ctx)
	if err != nil {
		return err
	}
	var (
		mu      sync.Mutex
		queue   = initial
		running int
		wake    = make(chan struct{}, 1)
	)
	g, gctx := errgroup.WithContext(ctx)
	spawn := func(s *stream) {
		mu.Lock()
		queue = append(queue, s)
		mu.Unlock()
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	limit := max(r.opts.ListConcurrency, 1)
	for {
		mu.Lock()
		for running < limit && len(queue) > 0 {
			s := queue[0]
			queue = queue[1:]
			running++
			g.Go(func() error {
				defer func() {
					mu.Lock()
					running--
					mu.Unlock()
					select {
					case wake <- struct{}{}:
					default:
					}
				}()
				return r.runStream(gctx, s, spawn, out)
			})
		}
		idle := running == 0 && len(queue) == 0
		mu.Unlock()
		if idle {
			break
		}
		select {
		case <-wake:
		case <-gctx.Done():
			return g.Wait()
		}
	}
	err = g.Wait()
	if err == nil {
		r.stats.ListingDone.Store(true)
	}
	return err
}

// streams builds the streams of every source.
func (r *runner) streams(ctx context.Context) ([]*stream, error) {
	src := r.opts.Sources
	var out []*stream
	if len(src.Keys) > 0 {
		out = append(out, keyStream(src.Bucket, src.Keys))
	}
	switch src.File {
	case "":
	case "-":
		in := src.Stdin
		if in == nil {
			in = os.Stdin
		}
		out = append(out, lineStream("stdin", src.Bucket, func() (io.ReadCloser, error) { return io.NopCloser(in), nil }))
	default:
		path := src.File
		out = append(out, lineStream("file:"+path, src.Bucket, func() (io.ReadCloser, error) { return os.Open(path) }))
	}
	for _, p := range dedupePrefixes(src.Prefixes) {
		out = append(out, prefixStream(r.s3, src.Bucket, p, r.opts.ListDepth))
	}
	if src.Inventory != "" {
		inv, err := inventoryStreams(ctx, r.s3, src.Inventory)
		if err != nil {
			return nil, err
		}
		out = append(out, inv...)
	}
	if r.opts.SkipDone {
		// Outputs of versioned buckets are keyed by version id, which a
		// listing does not give: those inputs need a HeadObject.
		for _, b := range r.buckets(src) {
			v, err := detectVersioning(ctx, r.s3, b)
			if err != nil {
				r.log(fmt.Sprintf("cannot read the versioning of bucket %s; taking it as unversioned", b), err)
			}
			r.check.versioned[b] = v
		}
	}
	return out, nil
}

func (r *runner) buckets(src Sources) []string {
	var bs []string
	if src.Bucket != "" {
		bs = append(bs, src.Bucket)
	}
	for _, k := range src.Keys {
		if it, err := parseKeyLine(src.Bucket, k); err == nil && !slices.Contains(bs, it.Bucket) {
			bs = append(bs, it.Bucket)
		}
	}
	return bs
}

// dedupePrefixes drops prefixes that lie under another, so no key is
// listed twice.
func dedupePrefixes(ps []string) []string {
	s := slices.Clone(ps)
	slices.Sort(s)
	s = slices.Compact(s)
	var out []string
	for _, p := range s {
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue
		}
		out = append(out, p)
	}
	return out
}

// windowSize is how many items are skip-checked together.
const windowSize = 1000

// pendingItem is an item of a stream waiting for its check.
type pendingItem struct {
	ref itemRef
	it  Item
}

// runStream lists one stream and sends what passes the filters and the
// skip check, a window at a time.
func (r *runner) runStream(ctx context.Context, s *stream, spawn func(*stream), out chan<- outgoing) error {
	after, complete := r.track.begin(s.id)
	if complete {
		if !s.level {
			return nil
		}
		// Finished by an earlier run, but its sub-prefixes may not be:
		// list it again for them, yielding none of its own keys.
		after = "\xff"
	}
	var window []pendingItem
	flush := func() error {
		err := r.process(ctx, window, out)
		window = window[:0]
		return err
	}
	err := s.list(ctx, after, func(pos string, it Item) error {
		seq, sentBefore := r.track.add(s.id, pos)
		ref := itemRef{stream: s.id, seq: seq, entry: jentry{S: s.id, P: pos, B: it.Bucket, K: it.Key, V: it.VersionID}}
		if it.Key != "" {
			r.stats.Listed.Add(1)
		}
		switch {
		case it.Key == "" || !r.opts.Filter.matchKey(it.Key):
			if it.Key != "" {
				r.stats.Filtered.Add(1)
			}
			r.track.finish(ref)
			return nil
		case sentBefore:
			r.stats.SentBefore.Add(1)
			r.track.finish(ref)
			return nil
		}
		window = append(window, pendingItem{ref: ref, it: it})
		if len(window) >= windowSize {
			return flush()
		}
		return nil
	}, spawn)
	if err != nil {
		return err
	}
	if err := flush(); err != nil {
		return err
	}
	r.track.listed(s.id)
	return nil
}

// process checks a window of items and queues those to send.
func (r *runner) process(ctx context.Context, window []pendingItem, out chan<- outgoing) error {
	if len(window) == 0 {
		return nil
	}
	items := make([]Item, len(window))
	for i, p := range window {
		items[i] = p.it
	}
	verdicts, err := r.check.check(ctx, items)
	if err != nil {
		return err
	}
	for i, p := range window {
		v := verdicts[i]
		switch v.v {
		case vFiltered:
			r.stats.Filtered.Add(1)
			r.track.finish(p.ref)
		case vDone:
			r.stats.SkippedDone.Add(1)
			r.track.finish(p.ref)
		case vFailed:
			r.stats.Failed.Add(1)
			r.log(fmt.Sprintf("s3://%s/%s not enqueued", items[i].Bucket, items[i].Key), v.err)
			r.track.failedItems([]itemRef{p.ref}, v.err)
		default:
			if err := r.emit(ctx, p.ref, items[i], out); err != nil {
				return err
			}
		}
	}
	return nil
}

func (r *runner) emit(ctx context.Context, ref itemRef, it Item, out chan<- outgoing) error {
	job := r.job
	job.V, job.Bucket, job.Key, job.VersionID = contract.JobVersion, it.Bucket, it.Key, ref.entry.V
	body, err := job.Encode()
	if err != nil {
		// Not a job the worker could take: said, counted, never retried.
		r.stats.Refused.Add(1)
		err = fmt.Errorf("s3://%s/%s: %w", it.Bucket, it.Key, err)
		r.refused.CompareAndSwap(nil, &err)
		r.log(fmt.Sprintf("s3://%s/%s refused", it.Bucket, it.Key), err)
		r.track.finish(ref)
		return nil
	}
	select {
	case out <- outgoing{ref: ref, body: string(body)}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// sendRetries queues the entries an earlier run could not send.
func (r *runner) sendRetries(ctx context.Context, out chan<- outgoing) error {
	var window []pendingItem
	for _, e := range r.track.retry {
		window = append(window, pendingItem{ref: itemRef{entry: e}, it: Item{Bucket: e.B, Key: e.K, VersionID: e.V, Size: -1}})
		r.stats.Listed.Add(1)
		if len(window) == windowSize {
			if err := r.process(ctx, window, out); err != nil {
				return err
			}
			window = window[:0]
		}
	}
	return r.process(ctx, window, out)
}

// dryRun prints each job instead of sending it.
func (r *runner) dryRun(in <-chan outgoing) error {
	w := r.opts.DryRunOut
	if w == nil {
		w = io.Discard
	}
	var err error
	for m := range in {
		if err == nil {
			_, err = fmt.Fprintln(w, m.body)
		}
		r.stats.Sent.Add(1)
		r.track.finish(m.ref)
	}
	return err
}
