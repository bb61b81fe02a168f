//go:build accuracy

package accuracy_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// emulator is the local SQS+S3 server of the package's benchmarks.
var emulator *localaws.Server

func TestMain(m *testing.M) {
	srv, err := localaws.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "local AWS emulator:", err)
		os.Exit(1)
	}
	emulator = srv
	code := m.Run()
	srv.Stop()
	os.Exit(code)
}

// env is one benchmark's queue, buckets and partition pool.
type env struct {
	t       *testing.T
	sqs     *sqs.Client
	s3      *s3.Client
	queue   localaws.Queue
	in, out string
	pool    *triton.Pool
}

// newEnv provisions a queue (its DLQ after maxReceives) and the input and
// output buckets, and runs a pool over the partitions at addrs (each
// request allowed timeout) until the test ends.
func newEnv(t *testing.T, name string, maxReceives int, addrs []string, timeout time.Duration) *env {
	t.Helper()
	ctx := context.Background()
	sqsc, s3c := emulator.Clients()
	e := &env{t: t, sqs: sqsc, s3: s3c, in: name + "-in", out: name + "-out"}
	var err error
	if e.queue, err = emulator.Provision(ctx, name, maxReceives, e.in, e.out); err != nil {
		t.Fatal(err)
	}
	e.pool, err = triton.NewPool(triton.PoolConfig{
		Addrs: addrs, MaxInflight: 4, RequestTimeout: timeout, Attempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, EjectAfter: 3, HealthInterval: time.Second,
		PoisonWait: 10 * time.Second,
	}, triton.DefaultModelIO(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	pctx, stop := context.WithCancel(context.Background())
	var done sync.WaitGroup
	done.Go(func() { _ = e.pool.Run(pctx) })
	t.Cleanup(func() { stop(); done.Wait(); e.pool.Close() })
	return e
}

// config is the worker's configuration for one long job at a time.
func (e *env) config() worker.Config {
	return worker.Config{
		Queues:  worker.QueueConfig{URL: e.queue.URL, WaitTime: time.Second, VisibilityTimeout: 2 * time.Minute, MaxReceives: 3, RetryBackoff: time.Second},
		Jobs:    worker.JobConfig{Concurrency: 4, Timeout: 30 * time.Minute, DrainTimeout: 30 * time.Second, MemoryBudget: 1 << 30, ExitWhenIdle: 2 * time.Second, OutageWait: time.Minute},
		Inputs:  worker.InputConfig{Buckets: []string{e.in}, MaxObjectBytes: 1 << 24, MaxAudioSeconds: 3600, FFmpeg: "ffmpeg"},
		Outputs: worker.OutputConfig{Bucket: e.out, Prefix: "transcripts/"},
		Claims:  worker.ClaimConfig{Settle: 20 * time.Millisecond},
		Audio:   worker.AudioConfig{ChunkSeconds: 30, ChunkParallelism: 4, Timestamps: true, Normalize: true},
	}
}

// transcribe uploads body as key, sends its job and runs a worker with
// cfg until it is idle (at most 30 minutes), returning the transcript.
func (e *env) transcribe(key string, body []byte, cfg worker.Config) contract.Transcript {
	e.t.Helper()
	ctx := context.Background()
	if err := localaws.Upload(ctx, e.s3, e.in, key, body); err != nil {
		e.t.Fatal(err)
	}
	job, err := contract.Job{Bucket: e.in, Key: key}.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(e.queue.URL), MessageBody: aws.String(string(job))}); err != nil {
		e.t.Fatal(err)
	}
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.sqs, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
	if err != nil {
		e.t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if err := w.Run(rctx); err != nil {
		e.t.Fatal(err)
	}
	tr, err := localaws.ReadTranscript(ctx, e.s3, e.out, e.in, key)
	if err != nil {
		e.t.Fatal(err)
	}
	return tr
}
