package worker_test

import (
	"context"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/lab/chaos"
	"github.com/fleetscribe/fleetscribe/lab/testwait"
	"github.com/fleetscribe/fleetscribe/worker"
)

// proxied returns an S3 client that reaches the emulator through a proxy
// that can take a bucket down (real S3 errors on the wire).
func proxied(t *testing.T) (*s3.Client, *chaos.Proxy) {
	t.Helper()
	p, err := chaos.NewProxy(emulator.Endpoint, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	cfg := aws.Config{Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")}
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
}

func (e *env) start(cfg worker.Config, s3c worker.S3API) *running {
	e.t.Helper()
	r := &running{reg: prometheus.NewRegistry(), done: make(chan error, 1)}
	var err error
	if r.w, err = worker.New(cfg, worker.Deps{Model: "asr", SQS: e.recorder, S3: s3c, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: r.reg}); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	e.t.Cleanup(cancel)
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
	proxy.SetOutage(e.out, chaos.OutageMissing)
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
	proxy.SetOutage(e.out, chaos.Outage{})
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
	for _, o := range []chaos.Outage{chaos.OutageMissing, chaos.OutageDenied} {
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
			proxy.SetOutage(e.out, chaos.Outage{})
			testwait.For(t, "ready once the bucket takes writes", func() bool { return r.w.Ready() == nil })
			r.wait(t)
			if _, ok := e.transcript("a.wav"); !ok {
				t.Error("no transcript")
			}
			e.recorder.check(t, 1)
		})
	}
}

// An input bucket that answers 403 for every key: the jobs in hand wait
// for it (two keys failing is an outage, not the inputs' fault), and run
// once it reads again, each message received once.
func TestInputOutageHoldsTheJobs(t *testing.T) {
	e := newEnv(t, 1, 3)
	s3c, proxy := proxied(t)
	e.put("a.wav", tone(16000, 16000))
	e.put("b.wav", tone(16000, 16000))
	proxy.SetOutage(e.in, chaos.OutageDenied)
	e.sendJob("a.wav")
	e.sendJob("b.wav")
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = time.Second
	r := e.start(cfg, s3c)
	testwait.For(t, "both jobs waiting for the input bucket", func() bool { return r.waiting(t) == 2 })
	if err := r.w.Ready(); err != nil {
		t.Errorf("not ready (%v) for an input bucket's outage: the worker can still serve other buckets", err)
	}
	proxy.SetOutage(e.in, chaos.Outage{})
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
