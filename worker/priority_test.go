package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// sendJobs sends one job per key to url, ten per call.
func sendJobs(t *testing.T, e *env, url string, keys []string) {
	t.Helper()
	for i := 0; i < len(keys); i += 10 {
		var entries []types.SendMessageBatchRequestEntry
		for j, k := range keys[i:min(i+10, len(keys))] {
			b, _ := contract.Job{Bucket: e.in, Key: k}.Encode()
			entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(string(b))})
		}
		if _, err := e.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries}); err != nil {
			t.Fatal(err)
		}
	}
}

// finishedAt returns when each key's transcript was written.
func finishedAt(t *testing.T, e *env, keys []string) []time.Time {
	t.Helper()
	out := make([]time.Time, len(keys))
	for i, k := range keys {
		var tr contract.Transcript
		if !e.outputJSON(k, "json", &tr) {
			t.Fatalf("%s has no transcript", k)
		}
		out[i] = tr.CreatedAt
	}
	return out
}

// One worker drains a live and a bulk queue; two partitions serve one
// request at a time each, and a bulk backlog of 500 jobs saturates them.
// Latency: 20 live jobs sent at once all finish within 3 s, long before
// the backlog could drain. Share: a flood of 300 live jobs then takes
// most of the capacity, yet bulk keeps at least half of its guaranteed
// share (2 of 8 slots) of the rate it had alone. Live chunks carry Triton
// priority 1 and bulk chunks 2.
func TestLiveBeforeBulkInOneWorker(t *testing.T) {
	e := newEnv(t, 0, 3)
	bulkQ, err := localaws.CreateQueue(context.Background(), e.sqs, e.queue.URL[len(e.queue.URL)-8:]+"-bulk", 3, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		prios = map[uint64]int{}
	)
	var addrs []string
	for range 2 {
		srv := tritontest.StartWith(t, tritontest.Options{Batch: &kserve.BatchConfig{MaxBatchSize: 1, Instances: 1, PriorityLevels: 2}})
		srv.SetLatency(25 * time.Millisecond)
		addrs = append(addrs, srv.Addr)
	}
	pool, err := triton.NewPool(triton.PoolConfig{
		Addrs: addrs, MaxInflight: 16, RequestTimeout: 10 * time.Second, Attempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, EjectAfter: 3, HealthInterval: time.Second,
	}, triton.DefaultModelIO(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	tr := transcriberFunc(func(ctx context.Context, r triton.Request) (triton.Result, error) {
		mu.Lock()
		prios[r.Priority]++
		mu.Unlock()
		return pool.Transcribe(ctx, r)
	})

	keys := func(prefix string, n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("%s/%03d.wav", prefix, i))
		}
		return out
	}
	bulk, live, flood := keys("bulk", 500), keys("live", 20), keys("flood", 300)
	clip := tone(16000, 8000)
	g, gctx := errgroup.WithContext(context.Background())
	g.SetLimit(16)
	for _, k := range slices.Concat(bulk, live, flood) {
		g.Go(func() error {
			_, err := e.s3.PutObject(gctx, &s3.PutObjectInput{Bucket: aws.String(e.in), Key: aws.String(k), Body: bytes.NewReader(clip)})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	sendJobs(t, e, bulkQ.URL, bulk)

	cfg := e.config()
	cfg.Queues.LowerURLs = []string{bulkQ.URL}
	cfg.Jobs.Concurrency, cfg.Queues.LowerMinShare, cfg.Queues.Priorities = 8, 0.25, []uint64{1, 2}
	cfg.Audio.ChunkParallelism, cfg.Jobs.ExitWhenIdle = 1, 2*time.Second
	reg := prometheus.NewRegistry()
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.sqs, S3: e.s3, Transcriber: tr, Log: zerolog.New(io.Discard), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- w.Run(context.Background()) }()
	waitOK := func(n float64) {
		testwait.For(t, "jobs done", func() bool { return counter(t, reg, "fleetscribe_jobs_total", "outcome", "ok") >= n })
	}

	waitOK(100)
	sentLive := time.Now()
	bulkRateAlone := 100 / sentLive.Sub(start).Seconds()
	sendJobs(t, e, e.queue.URL, live)
	waitOK(220)
	sentFlood := time.Now()
	sendJobs(t, e, e.queue.URL, flood)
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	latest := func(ts []time.Time) time.Time {
		return slices.MaxFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
	}
	liveDone, floodDone, bulkDone := finishedAt(t, e, live), finishedAt(t, e, flood), finishedAt(t, e, bulk)
	liveTook := latest(liveDone).Sub(sentLive)
	floodEnd := latest(floodDone)
	bulkDuringFlood := 0
	for _, d := range bulkDone {
		if d.After(sentFlood) && !d.After(floodEnd) {
			bulkDuringFlood++
		}
	}
	floodWindow := floodEnd.Sub(sentFlood).Seconds()
	bulkRate, floodRate := float64(bulkDuringFlood)/floodWindow, float64(len(flood))/floodWindow
	t.Logf("bulk alone %.0f jobs/s; 20 live jobs all done %.2f s after they were sent (the last bulk job %.2f s after); during the flood: live %.0f jobs/s, bulk %.0f jobs/s (%d jobs); Triton priorities seen %v",
		bulkRateAlone, liveTook.Seconds(), latest(bulkDone).Sub(sentLive).Seconds(), floodRate, bulkRate, bulkDuringFlood, prios)
	if liveTook > 3*time.Second {
		t.Errorf("live jobs took %s behind the bulk backlog; bound 3 s", liveTook)
	}
	if floodRate < 0.5*bulkRateAlone {
		t.Errorf("the live flood ran at %.0f jobs/s, not most of the capacity (%.0f/s)", floodRate, bulkRateAlone)
	}
	if lo, hi := 0.5*0.25*bulkRateAlone, 0.5*bulkRateAlone; bulkRate < lo || bulkRate > hi {
		t.Errorf("bulk ran at %.1f jobs/s during the live flood; want its guaranteed share, between %.1f and %.1f", bulkRate, lo, hi)
	}
	if prios[1] < len(live)+len(flood) || prios[2] < len(bulk) || len(prios) != 2 {
		t.Errorf("Triton priorities %v; want live chunks at 1 and bulk at 2", prios)
	}
}

type transcriberFunc func(context.Context, triton.Request) (triton.Result, error)

func (f transcriberFunc) Transcribe(ctx context.Context, r triton.Request) (triton.Result, error) {
	return f(ctx, r)
}

// Queue priorities must name every queue; a minimum share must leave the
// higher queue something.
func TestPriorityValidation(t *testing.T) {
	cfg := worker.Config{
		Queues:  worker.QueueConfig{URL: "q", WaitTime: time.Second, VisibilityTimeout: time.Minute, MaxReceives: 3, LowerURLs: []string{"b"}, Priorities: []uint64{1}},
		Jobs:    worker.JobConfig{Concurrency: 4, Timeout: time.Minute},
		Inputs:  worker.InputConfig{MaxObjectBytes: 1, MaxAudioSeconds: 1},
		Outputs: worker.OutputConfig{Bucket: "o"},
		Audio:   worker.AudioConfig{ChunkSeconds: 30, ChunkParallelism: 1},
	}
	if err := cfg.Validate(); err == nil {
		t.Error("one priority for two queues accepted")
	}
	cfg.Queues.Priorities = []uint64{1, 2}
	cfg.Queues.LowerMinShare = 1
	if err := cfg.Validate(); err == nil {
		t.Error("a min share of 1 accepted")
	}
}

// Readiness covers every queue: with the bulk queue gone, the worker is
// not ready, however well the live queue answers.
func TestReadyNeedsEveryQueue(t *testing.T) {
	e := newEnv(t, 1, 3)
	bulkQ, err := localaws.CreateQueue(context.Background(), e.sqs, e.queue.URL[len(e.queue.URL)-8:]+"-gone", 3, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	// Short polls: the live queue answers many times a second.
	cfg.Queues.LowerURLs, cfg.Jobs.ExitWhenIdle, cfg.Queues.WaitTime = []string{bulkQ.URL}, 0, 0
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.sqs, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if w.Ready() == nil {
		t.Error("ready before it runs")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	testwait.For(t, "the worker ready", func() bool { return w.Ready() == nil })
	if _, err := e.sqs.DeleteQueue(context.Background(), &sqs.DeleteQueueInput{QueueUrl: aws.String(bulkQ.URL)}); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the worker not ready with its bulk queue gone", func() bool { return w.Ready() != nil })
	// The live queue keeps answering meanwhile.
	for range 60 {
		if w.Ready() == nil {
			t.Fatal("ready again while the bulk queue is gone")
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if w.Ready() == nil {
		t.Error("ready after it stopped")
	}
}
