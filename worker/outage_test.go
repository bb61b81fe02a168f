package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/faultproxy"
	"github.com/fleetscribe/fleetscribe/worker"
)

// proxied returns an S3 client that reaches the emulator through a proxy
// that can take a bucket down (real S3 errors on the wire).
func proxied(t *testing.T) (*s3.Client, *faultproxy.Proxy) {
	t.Helper()
	return proxiedAnswering(t, awsconf.ResponseHeaderTimeout)
}

// proxiedAnswering is proxied with a client that gives a request answer
// to wait for its answer (the binaries' is awsconf.ResponseHeaderTimeout).
func proxiedAnswering(t *testing.T, answer time.Duration) (*s3.Client, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.NewProxy(emulator.Endpoint, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient: awsconf.Config{}.HTTPClient(answer)}
	_, s3c, err := awsconf.Local(cfg, srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return s3c, p
}

// running is a worker run in the background.
type running struct {
	w    *worker.Worker
	reg  *prometheus.Registry
	done chan error
	stop context.CancelFunc // as SIGTERM: the worker drains and Run returns
}

func (e *env) start(cfg worker.Config, s3c worker.S3API) *running {
	e.t.Helper()
	return e.startOn(cfg, e.recorder, s3c)
}

// startOn is start with the worker's SQS client given too.
func (e *env) startOn(cfg worker.Config, sqsc worker.SQSAPI, s3c worker.S3API) *running {
	e.t.Helper()
	r := &running{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	var err error
	if r.w, err = worker.New(cfg, worker.Deps{Model: "asr", SQS: sqsc, S3: s3c, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: r.reg}); err != nil {
		e.t.Fatal(err)
	}
	var ctx context.Context
	ctx, r.stop = context.WithTimeout(context.Background(), 3*time.Minute)
	e.t.Cleanup(r.stop)
	go func() { r.done <- r.w.Run(ctx) }()
	return r
}

func (r *running) wait(t *testing.T) {
	t.Helper()
	if err := <-r.done; err != nil {
		t.Fatalf("worker: %v", err)
	}
}

func (r *running) waiting(t *testing.T) float64 {
	return metricValue(t, r.reg, "fleetscribe_jobs_waiting_for_dependency", nil, 0)
}

// The output bucket goes away after a job's transcript was computed: the
// job keeps its message (no receive spent), the worker stops receiving and
// is not ready, and once the bucket is back the transcript computed before
// is written, not computed again.
func TestOutputOutageHoldsTheWork(t *testing.T) {
	e := newEnv(t, 1, 3)
	s3c, proxy := proxied(t)
	e.put("a.wav", tone(16000, 16000))
	e.put("b.wav", tone(16000, 16000))
	e.sendJob("a.wav")
	e.servers[0].Hold()
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = time.Second
	r := e.start(cfg, s3c)
	<-e.servers[0].Started() // a's chunk is in the model
	proxy.SetOutage(e.out, faultproxy.OutageMissing)
	e.servers[0].Release()
	testwait.For(t, "a's transcript waiting for the output bucket", func() bool { return r.waiting(t) == 1 })
	if err := r.w.Ready(); err == nil {
		t.Error("ready while the output bucket is missing")
	}
	// A long poll in flight is never cut short (SQS may have handed its
	// messages out already): let it end before b is sent.
	time.Sleep(cfg.Queues.WaitTime + 500*time.Millisecond)
	e.sendJob("b.wav")
	// Nothing more is received while it is down: b stays in the queue.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		if visible, _ := e.depth(e.queue.URL); visible != 1 {
			t.Fatalf("%d visible, want b still queued while the output bucket is down", visible)
		}
		time.Sleep(100 * time.Millisecond)
	}
	proxy.SetOutage(e.out, faultproxy.Outage{})
	r.wait(t)
	for _, k := range []string{"a.wav", "b.wav"} {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript", k)
		}
	}
	if n := e.servers[0].Calls(); n != 2 {
		t.Errorf("%d chunks transcribed, want 2: a's transcript was computed again", n)
	}
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages", v+f)
	}
	e.recorder.check(t, 2)
	if got := metricValue(t, r.reg, "fleetscribe_dependency_outages_total", map[string]string{"dependency": "output"}, 0); got != 1 {
		t.Errorf("output outages %v, want 1", got)
	}
}

// A worker whose output bucket cannot be written at start is not ready
// and receives nothing; it starts work as soon as the bucket takes writes.
func TestOutputUnwritableAtStart(t *testing.T) {
	for _, o := range []faultproxy.Outage{faultproxy.OutageMissing, faultproxy.OutageDenied} {
		t.Run(o.Code, func(t *testing.T) {
			e := newEnv(t, 1, 3)
			s3c, proxy := proxied(t)
			proxy.SetOutage(e.out, o)
			e.put("a.wav", tone(16000, 16000))
			e.sendJob("a.wav")
			cfg := e.config()
			cfg.Jobs.ExitWhenIdle = time.Second
			r := e.start(cfg, s3c)
			testwait.For(t, "the worker running, not ready", func() bool {
				err := r.w.Ready()
				return err != nil && err.Error() != "not running"
			})
			time.Sleep(1500 * time.Millisecond)
			if visible, _ := e.depth(e.queue.URL); visible != 1 {
				t.Fatalf("%d visible: received while the output bucket cannot be written", visible)
			}
			proxy.SetOutage(e.out, faultproxy.Outage{})
			testwait.For(t, "ready once the bucket takes writes", func() bool { return r.w.Ready() == nil })
			r.wait(t)
			if _, ok := e.transcript("a.wav"); !ok {
				t.Error("no transcript")
			}
			e.recorder.check(t, 1)
		})
	}
}

// inputOutage queues a.wav and b.wav in an input bucket that answers 403
// to every request, listings included: an outage, not the inputs' fault.
func inputOutage(t *testing.T) (*env, worker.S3API, *faultproxy.Proxy) {
	t.Helper()
	e := newEnv(t, 1, 3)
	s3c, proxy := proxied(t)
	e.put("a.wav", tone(16000, 16000))
	e.put("b.wav", tone(16000, 16000))
	proxy.SetOutage(e.in, faultproxy.OutageDenied)
	e.sendJob("a.wav")
	e.sendJob("b.wav")
	return e, s3c, proxy
}

// An input bucket that answers 403 for every key, its probe's listing
// included: the jobs in hand wait for it, and run once it reads again,
// each message received once.
func TestInputOutageHoldsTheJobs(t *testing.T) {
	e, s3c, proxy := inputOutage(t)
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = time.Second
	r := e.start(cfg, s3c)
	testwait.For(t, "both jobs waiting for the input bucket", func() bool { return r.waiting(t) == 2 })
	if err := r.w.Ready(); err != nil {
		t.Errorf("not ready (%v) for an input bucket's outage: the worker can still serve other buckets", err)
	}
	proxy.SetOutage(e.in, faultproxy.Outage{})
	r.wait(t)
	for _, k := range []string{"a.wav", "b.wav"} {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript", k)
		}
	}
	e.recorder.check(t, 2)
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages", v+f)
	}
}

// Objects that refuse the worker's read while their bucket serves the rest
// (403 for a KMS key or another account's object; InvalidObjectState for
// an archived one) are the objects' own: each gets its permanent record at
// once (access_denied; archived, naming the restore), nothing is held,
// the bucket is never taken for down, and the good jobs among them are
// transcribed, each message received once.
func TestObjectRefusalIsTheObjects(t *testing.T) {
	e := newEnv(t, 1, 3)
	s3c, proxy := proxied(t)
	refusals := map[string]faultproxy.Refusal{
		"kms-1.wav": faultproxy.RefusalAccessDenied, "kms-2.wav": faultproxy.RefusalAccessDenied, "kms-3.wav": faultproxy.RefusalAccessDenied,
		"glacier.wav": faultproxy.RefusalArchived, "deep.wav": faultproxy.RefusalDeepArchive,
	}
	good := []string{"a.wav", "b.wav", "c.wav"}
	for _, k := range good {
		e.put(k, tone(16000, 16000))
	}
	for k, r := range refusals {
		e.put(k, tone(16000, 16000))
		proxy.RefuseObject(e.in, k, r)
	}
	// The refusals first: no key has been read yet when they fail.
	for k := range refusals {
		e.sendJob(k)
	}
	for _, k := range good {
		e.sendJob(k)
	}
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = time.Second
	cfg.Jobs.OutageWait = 2 * time.Minute // longer than the test's own limit: a hold fails it
	start := time.Now()
	r := e.start(cfg, s3c)
	r.wait(t)
	took := time.Since(start)
	for _, k := range good {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript", k)
		}
	}
	for k, ref := range refusals {
		rec, ok := e.errorRecord(k)
		want := contract.ClassAccessDenied
		if ref.Code == "InvalidObjectState" {
			want = contract.ClassArchived
		}
		switch {
		case !ok:
			t.Errorf("%s: no error record", k)
		case rec.Class != want || !rec.Final:
			t.Errorf("%s: record %s final %v, want %s final", k, rec.Class, rec.Final, want)
		case want == contract.ClassArchived && (!strings.Contains(rec.Message, "restore-object") || !strings.Contains(rec.Message, ref.StorageClass)):
			t.Errorf("%s: %q does not name the restore or the storage class", k, rec.Message)
		}
	}
	e.recorder.check(t, len(good)+len(refusals))
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages", v+f)
	}
	if got := metricValue(t, r.reg, "fleetscribe_dependency_outages_total", map[string]string{"dependency": "input:" + e.in}, 0); got != 0 {
		t.Errorf("the input bucket was taken down %v times for its objects' refusals", got)
	}
	// Each refusal is settled by one probe, not by a wait for a second
	// key (10 s) or for the bucket (-outage-wait).
	if took > 20*time.Second {
		t.Errorf("%.0f s to settle: refusals were held", took.Seconds())
	}
}

// An input bucket whose policy breaks after it served a key: the listing
// may still answer, but the key it served no longer reads, so the bucket
// is down and the jobs wait for it (not access_denied records).
func TestInputPolicyBrokenAfterServing(t *testing.T) {
	e := newEnv(t, 1, 3)
	s3c, proxy := proxied(t)
	for _, k := range []string{"first.wav", "a.wav", "b.wav"} {
		e.put(k, tone(16000, 16000))
	}
	e.sendJob("first.wav")
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = 3 * time.Second
	r := e.start(cfg, s3c)
	testwait.For(t, "first.wav transcribed", func() bool { _, ok := e.transcript("first.wav"); return ok })
	// Every object refuses; listings still answer (a policy on
	// s3:GetObject alone).
	for _, k := range []string{"first.wav", "a.wav", "b.wav"} {
		proxy.RefuseObject(e.in, k, faultproxy.RefusalAccessDenied)
	}
	e.sendJob("a.wav")
	e.sendJob("b.wav")
	testwait.For(t, "both jobs waiting for the input bucket", func() bool { return r.waiting(t) == 2 })
	for _, k := range []string{"first.wav", "a.wav", "b.wav"} {
		proxy.RefuseObject(e.in, k, faultproxy.Refusal{})
	}
	r.wait(t)
	for _, k := range []string{"a.wav", "b.wav"} {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript", k)
		}
		if _, ok := e.errorRecord(k); ok {
			t.Errorf("%s: an error record for the bucket's outage", k)
		}
	}
	e.recorder.check(t, 3)
}

// Every partition answers INTERNAL to every request (a model that cannot
// load its weights, every MPS client down after a fault): no input is
// blamed and none spends a receive. The jobs in hand wait, the worker
// receives nothing more and is not ready, the canary probes, and once the
// partitions serve again every job is transcribed, each message received
// once, none in the DLQ.
func TestInferenceOutageHoldsTheJobs(t *testing.T) {
	e := newEnv(t, 2, 2)
	keys := []string{"a.wav", "b.wav", "c.wav", "d.wav", "e.wav", "f.wav"}
	for _, k := range keys {
		e.put(k, tone(16000, 16000))
	}
	for _, s := range e.servers {
		s.Fail(codes.Internal, 1_000_000)
	}
	for _, k := range keys[:2] {
		e.sendJob(k)
	}
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = 2 * time.Second
	r := e.start(cfg, e.s3)
	testwait.For(t, "the jobs waiting for inference", func() bool { return r.waiting(t) == 2 })
	if err := r.w.Ready(); err == nil || !strings.Contains(err.Error(), "inference unavailable") {
		t.Errorf("ready while every partition fails: %v", err)
	}
	// Nothing more is received while it lasts (a long poll in flight is
	// let end first).
	time.Sleep(cfg.Queues.WaitTime + 500*time.Millisecond)
	for _, k := range keys[2:] {
		e.sendJob(k)
	}
	time.Sleep(2 * time.Second)
	if visible, _ := e.depth(e.queue.URL); visible != len(keys)-2 {
		t.Errorf("%d visible, want the %d sent during the outage still queued", visible, len(keys)-2)
	}
	for _, s := range e.servers {
		s.Heal()
	}
	r.wait(t)
	for _, k := range keys {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript", k)
		}
		if rec, ok := e.errorRecord(k); ok {
			t.Errorf("%s: error record %s", k, rec.Class)
		}
	}
	e.recorder.check(t, len(keys))
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages", v+f)
	}
	if got := metricValue(t, r.reg, "fleetscribe_dependency_outages_total", map[string]string{"dependency": "inference"}, 0); got != 1 {
		t.Errorf("inference outages %v, want 1", got)
	}
}

// SIGTERM while jobs wait for a bucket that is down: they cannot
// progress, so the drain hands their messages back at once instead of
// waiting out -drain-timeout; nothing is written for them, and they are
// in the queue for the next worker.
func TestDrainReleasesHeldJobs(t *testing.T) {
	e, s3c, _ := inputOutage(t)
	cfg := e.config()
	cfg.Jobs.DrainTimeout = time.Minute
	r := e.start(cfg, s3c)
	testwait.For(t, "both jobs waiting for the input bucket", func() bool { return r.waiting(t) == 2 })
	start := time.Now()
	r.stop()
	select {
	case err := <-r.done:
		if err != nil {
			t.Fatalf("worker: %v", err)
		}
	case <-time.After(cfg.Jobs.DrainTimeout):
		t.Fatal("the drain waited -drain-timeout for jobs that cannot progress")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("SIGTERM to exit %.1f s with only held jobs in hand", took.Seconds())
	}
	testwait.For(t, "both messages back in the queue", func() bool {
		visible, _ := e.depth(e.queue.URL)
		return visible == 2
	})
	for _, k := range []string{"a.wav", "b.wav"} {
		if _, ok := e.errorRecord(k); ok {
			t.Errorf("%s: an error record for a job released at shutdown", k)
		}
	}
}

// Jobs held for an input bucket that is down lend their slots: with every
// slot taken by them, work from a bucket that answers still runs (to at
// most -concurrency held besides); once the bucket is back the held jobs
// finish, each message received once.
func TestHeldJobsLendTheirSlots(t *testing.T) {
	e := newEnv(t, 1, 3)
	s3c, proxy := proxied(t)
	ctx := context.Background()
	down := e.in + "-archive"
	if _, err := e.s3.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(down)}); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"x.wav", "y.wav"} {
		if _, err := e.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(down), Key: aws.String(k), Body: bytes.NewReader(tone(16000, 16000))}); err != nil {
			t.Fatal(err)
		}
		b, _ := contract.Job{Bucket: down, Key: k}.Encode()
		e.send(string(b))
	}
	proxy.SetOutage(down, faultproxy.OutageDenied)
	cfg := e.config()
	cfg.Jobs.Concurrency = 2
	cfg.Inputs.Buckets = []string{e.in, down}
	cfg.Jobs.ExitWhenIdle = 2 * time.Second
	r := e.start(cfg, s3c)
	testwait.For(t, "both slots' jobs waiting for the bucket that is down", func() bool { return r.waiting(t) == 2 })
	good := []string{"a.wav", "b.wav", "c.wav"}
	for _, k := range good {
		e.put(k, tone(16000, 16000))
		e.sendJob(k)
	}
	testwait.For(t, "the other bucket's jobs transcribed while the held ones wait", func() bool {
		for _, k := range good {
			if _, ok := e.transcript(k); !ok {
				return false
			}
		}
		return true
	})
	proxy.SetOutage(down, faultproxy.Outage{})
	r.wait(t)
	out, err := e.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(e.out), Prefix: aws.String("transcripts/" + down + "/")})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range out.Contents {
		if k := aws.ToString(o.Key); strings.HasSuffix(k, ".json") && !strings.HasSuffix(k, ".error.json") {
			n++
		}
	}
	if n != 2 {
		t.Errorf("%d transcripts of the held jobs, want 2", n)
	}
	e.recorder.check(t, 5)
}

// hangingSQS answers receives not at all while hang is set (a network
// path that swallows requests), and passes everything else on.
type hangingSQS struct {
	worker.SQSAPI
	hang atomic.Bool
	cut  chan struct{} // closed: hanging receives fail at once
}

func (h *hangingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	if h.hang.Load() {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-h.cut:
			return nil, errors.New("connection reset")
		}
	}
	return h.SQSAPI.ReceiveMessage(ctx, in, opts...)
}

// A receive that hangs makes the worker not ready once it has run well
// past its long poll, well before it gives up on it; the readiness
// message names the queue.
func TestReadinessSeesAHangingReceive(t *testing.T) {
	e := newEnv(t, 1, 3)
	h := &hangingSQS{SQSAPI: e.recorder, cut: make(chan struct{})}
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = 0
	r := e.startOn(cfg, h, e.s3)
	defer func() { r.stop(); close(h.cut); <-r.done }()
	testwait.For(t, "ready", func() bool { return r.w.Ready() == nil })
	h.hang.Store(true)
	start := time.Now()
	testwait.Within(t, time.Minute, func() bool {
		err := r.w.Ready()
		return err != nil && strings.Contains(err.Error(), "unanswered")
	})
	// Past the long poll and the allowance; before the receive's own
	// limit (30 s past the poll) would have said so.
	if took := time.Since(start); took > cfg.Queues.WaitTime+25*time.Second {
		t.Errorf("not ready only after %.0f s of a hanging receive", took.Seconds())
	}
}

// An object whose every read fails (503) while its bucket serves the rest
// is the job's own retryable failure: it is retried until its receives
// run out, never taken for the bucket's outage and held (the chaos
// suite's exhaust job, in miniature).
func TestObjectThatAlwaysFailsExhaustsItsRetries(t *testing.T) {
	e := newEnv(t, 1, 2)
	s3c, proxy := proxied(t)
	proxy.Exhaust = "/" + e.in + "/exhaust/"
	e.put("a.wav", tone(16000, 16000))
	e.put("exhaust/x.wav", tone(16000, 16000))
	e.sendJob("a.wav")
	e.sendJob("exhaust/x.wav")
	cfg := e.config()
	cfg.Queues.MaxReceives = 2
	cfg.Jobs.ExitWhenIdle = 4 * time.Second
	r := e.start(cfg, s3c)
	r.wait(t)
	if _, ok := e.transcript("a.wav"); !ok {
		t.Error("a.wav: no transcript")
	}
	rec, ok := e.errorRecord("exhaust/x.wav")
	if !ok || rec.Class != contract.ClassExhausted {
		t.Errorf("exhaust/x.wav: record %+v (%v), want retries_exhausted", rec, ok)
	}
	if got := metricValue(t, r.reg, "fleetscribe_dependency_outages_total", map[string]string{"dependency": "input:" + e.in}, 0); got != 0 {
		t.Errorf("the input bucket taken down %v times for one object's failures", got)
	}
}

// An output bucket that swallows requests (no answer at all) is an outage
// like one that refuses them: the request gives up at the client's answer
// timeout, the write check does too, and the worker is not ready and
// holds the job; once the bucket answers, the job's transcript is written.
func TestHangingOutputBucketIsAnOutage(t *testing.T) {
	e := newEnv(t, 1, 3)
	s3c, proxy := proxiedAnswering(t, time.Second)
	e.put("a.wav", tone(16000, 16000))
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = 2 * time.Second
	r := e.start(cfg, s3c)
	testwait.For(t, "ready", func() bool { return r.w.Ready() == nil })
	proxy.SetOutage(e.out, faultproxy.OutageHanging)
	e.sendJob("a.wav")
	start := time.Now()
	testwait.Within(t, time.Minute, func() bool {
		err := r.w.Ready()
		return err != nil && strings.Contains(err.Error(), "output bucket unavailable")
	})
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("not ready %.0f s into a hanging output bucket", took.Seconds())
	}
	proxy.SetOutage(e.out, faultproxy.Outage{})
	r.wait(t)
	if _, ok := e.transcript("a.wav"); !ok {
		t.Error("no transcript once the bucket answers")
	}
	e.recorder.check(t, 1)
}
