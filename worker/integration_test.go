package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/enqueue"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
	"github.com/fleetscribe/fleetscribe/lab/kit/syncbuf"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

var testSeq atomic.Int64

// env is one test's queue, buckets, inference partitions and worker wiring.
type env struct {
	t        *testing.T
	sqs      *sqs.Client
	s3       *s3.Client
	queue    localaws.Queue
	in, out  string
	servers  []*tritontest.Server
	pool     *triton.Pool
	recorder *recordingSQS
	reg      *prometheus.Registry // pool metrics
	wreg     *prometheus.Registry // the last run's worker metrics
}

func newEnv(t *testing.T, partitions, maxReceives int, aliases ...string) *env {
	t.Helper()
	return newEnvOn(t, emulator, partitions, maxReceives, aliases...)
}

// newEnvOn is newEnv on another local server (motoServer: S3's conditional
// writes, which claims rest on).
func newEnvOn(t *testing.T, srv *localaws.Server, partitions, maxReceives int, aliases ...string) *env {
	t.Helper()
	ctx := context.Background()
	n := testSeq.Add(1)
	emulator := srv
	sqsc, s3c := emulator.Clients()
	e := &env{t: t, sqs: sqsc, s3: s3c, in: fmt.Sprintf("in-%d", n), out: fmt.Sprintf("out-%d", n), reg: prometheus.NewRegistry()}
	var err error
	if e.queue, err = emulator.Provision(ctx, fmt.Sprintf("q-%d", n), maxReceives, e.in, e.out); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for range partitions {
		s, err := tritontest.Listen("127.0.0.1:0", triton.DefaultModelIO(), aliases...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		e.servers = append(e.servers, s)
		addrs = append(addrs, s.Addr)
	}
	e.recorder = &recordingSQS{Client: sqsc, s3: s3c, out: e.out, bodies: map[string]string{}, received: map[string]int{}}
	if partitions == 0 {
		return e // the test brings its own partitions and pool
	}
	e.startPool(addrs, 10*time.Second)
	return e
}

// startPool runs the worker's partition pool over addrs until the test
// ends, each request allowed timeout.
func (e *env) startPool(addrs []string, timeout time.Duration) {
	e.t.Helper()
	var err error
	e.pool, err = triton.NewPool(triton.PoolConfig{
		Addrs: addrs, MaxInflight: 4, RequestTimeout: timeout, Attempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, EjectAfter: 3, HealthInterval: time.Second,
		PoisonWait: 10 * time.Second,
	}, triton.DefaultModelIO(), e.reg)
	if err != nil {
		e.t.Fatal(err)
	}
	pctx, stopPool := context.WithCancel(context.Background())
	var poolDone sync.WaitGroup
	poolDone.Go(func() { _ = e.pool.Run(pctx) })
	e.t.Cleanup(func() { stopPool(); poolDone.Wait(); e.pool.Close() })
}

func (e *env) config() worker.Config {
	return worker.Config{
		Queues:  worker.QueueConfig{URL: e.queue.URL, WaitTime: time.Second, VisibilityTimeout: 30 * time.Second, MaxReceives: 3, RetryBackoff: time.Second},
		Jobs:    worker.JobConfig{Concurrency: 4, Timeout: time.Minute, DrainTimeout: 30 * time.Second, MemoryBudget: 1 << 30, ExitWhenIdle: 2 * time.Second, OutageWait: time.Minute},
		Inputs:  worker.InputConfig{Buckets: []string{e.in}, MaxObjectBytes: 1 << 24, MaxAudioSeconds: 3600, FFmpeg: "ffmpeg"},
		Outputs: worker.OutputConfig{Bucket: e.out, Prefix: "transcripts/"},
		Claims:  worker.ClaimConfig{Settle: 20 * time.Millisecond},
		Audio:   worker.AudioConfig{ChunkSeconds: 30, ChunkParallelism: 4, Timestamps: true, Normalize: true},
	}
}

func (e *env) run(cfg worker.Config, sqsAPI worker.SQSAPI) {
	e.t.Helper()
	if sqsAPI == nil {
		sqsAPI = e.recorder
	}
	e.runDeps(cfg, worker.Deps{Model: "asr", SQS: sqsAPI, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard)})
}

// runDeps runs a worker of deps (its metrics on a registry of the run's
// own, e.wreg) until it is idle.
func (e *env) runDeps(cfg worker.Config, deps worker.Deps) {
	e.t.Helper()
	e.wreg = prometheus.NewRegistry()
	deps.Metrics = e.wreg
	w, err := worker.New(cfg, deps)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		e.t.Fatalf("worker: %v", err)
	}
}

func (e *env) put(key string, body []byte) {
	e.t.Helper()
	_, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(e.in), Key: aws.String(key), Body: bytes.NewReader(body)})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) send(body string) {
	e.t.Helper()
	_, err := e.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(e.queue.URL), MessageBody: aws.String(body)})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) sendJob(key string, formats ...string) {
	e.t.Helper()
	b, err := contract.Job{Bucket: e.in, Key: key, Formats: formats}.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	e.send(string(b))
}

// outputs returns the output objects written for an input key, by suffix.
func (e *env) outputs(key string) map[string][]byte {
	e.t.Helper()
	return listOutputs(e.t, e.s3, e.out, e.in, key)
}

func listOutputs(t testing.TB, c *s3.Client, bucket, inBucket, key string) map[string][]byte {
	ctx := context.Background()
	res, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("transcripts/" + inBucket + "/" + contract.EscapeKey(key) + "/")})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, o := range res.Contents {
		k := aws.ToString(o.Key)
		obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
		if s3errs.ObjectNotFound(err) {
			continue // removed since the listing by a worker still running (a claim, a provisional record)
		}
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(obj.Body)
		obj.Body.Close()
		_, ext, _ := strings.Cut(path.Base(k), ".") // "e-<etag>.error.json" → "error.json"
		out[ext] = b
	}
	return out
}

func (e *env) depth(url string) (int, int) {
	e.t.Helper()
	v, f, err := localaws.Depth(context.Background(), e.sqs, url)
	if err != nil {
		e.t.Fatal(err)
	}
	return v, f
}

// recordingSQS passes calls to the real client, counts receives per
// message, and at each DeleteMessage checks that an output for the
// message's input already exists in S3.
type recordingSQS struct {
	*sqs.Client
	s3  *s3.Client
	out string

	mu         sync.Mutex
	bodies     map[string]string // receipt handle → body
	received   map[string]int    // message id → receives
	deletes    int
	violations []string
}

func (r *recordingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	out, err := r.Client.ReceiveMessage(ctx, in, opts...)
	if err == nil {
		r.mu.Lock()
		for _, m := range out.Messages {
			r.bodies[aws.ToString(m.ReceiptHandle)] = aws.ToString(m.Body)
			r.received[aws.ToString(m.MessageId)]++
		}
		r.mu.Unlock()
	}
	return out, err
}

func (r *recordingSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	for _, e := range in.Entries {
		r.mu.Lock()
		body := r.bodies[aws.ToString(e.ReceiptHandle)]
		r.mu.Unlock()
		var job contract.Job
		if json.Unmarshal([]byte(body), &job) == nil && job.Key != "" {
			res, err := r.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(r.out), Prefix: aws.String(outputDir(job))})
			found := false
			if err == nil {
				for _, o := range res.Contents {
					found = found || strings.HasSuffix(aws.ToString(o.Key), ".json")
				}
			}
			if !found {
				r.mu.Lock()
				r.violations = append(r.violations, job.Key)
				r.mu.Unlock()
			}
		}
	}
	r.mu.Lock()
	r.deletes += len(in.Entries)
	r.mu.Unlock()
	return r.Client.DeleteMessageBatch(ctx, in, opts...)
}

func (r *recordingSQS) check(t *testing.T, wantMessages int) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.violations) > 0 {
		t.Errorf("messages deleted before their output existed: %v", r.violations)
	}
	if len(r.received) != wantMessages {
		t.Errorf("received %d distinct messages, want %d", len(r.received), wantMessages)
	}
	for id, n := range r.received {
		if n != 1 {
			t.Errorf("message %s received %d times, want once", id, n)
		}
	}
}

// tone returns a WAV of n samples at rate with channels channels.
func tone(rate, n int) []byte {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(0.3 * math.Sin(2*math.Pi*440*float64(i)/float64(rate)))
	}
	return audio.EncodeWAV(audio.Clip{Rate: rate, Samples: s})
}

func TestTwentyJobsEndToEnd(t *testing.T) {
	e := newEnv(t, 2, 3)
	want := map[string]string{}
	for i := range 20 {
		key := fmt.Sprintf("calls/2026/clip %02d.wav", i) // a space, as real uploads have
		rate, n := 16000, 16000+i*800
		if i%4 == 3 {
			rate = 8000 // resampled to 16 kHz: twice the samples
		}
		e.put(key, tone(rate, n))
		if rate == 8000 {
			n *= 2
		}
		want[key] = tritontest.Text(n)
		e.sendJob(key, "txt", "srt", "vtt")
	}
	e.run(e.config(), nil)

	for key, text := range want {
		outs := e.outputs(key)
		var tr contract.Transcript
		if err := json.Unmarshal(outs["json"], &tr); err != nil {
			t.Fatalf("%s: transcript: %v (outputs %v)", key, err, keysOf(outs))
		}
		if tr.Text != text || tr.Schema != contract.TranscriptSchema || tr.Input.Key != key || tr.Input.ETag == "" {
			t.Errorf("%s: transcript %+v, want text %q", key, tr, text)
		}
		if len(tr.Words) != 2 || len(tr.Segments) == 0 {
			t.Errorf("%s: want 2 timed words and segments, got %d words %d segments", key, len(tr.Words), len(tr.Segments))
		}
		for _, ext := range []string{"txt", "srt", "vtt"} {
			if len(outs[ext]) == 0 {
				t.Errorf("%s: missing %s output", key, ext)
			}
		}
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue not drained: %d visible, %d in flight", v, f)
	}
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages", v+f)
	}
	e.recorder.check(t, 20)
	wantMetrics := `
# HELP fleetscribe_jobs_total Jobs (one per recording; an S3 event may carry several) by outcome.
# TYPE fleetscribe_jobs_total counter
fleetscribe_jobs_total{outcome="ok"} 20
# HELP fleetscribe_messages_received_total Queue messages received.
# TYPE fleetscribe_messages_received_total counter
fleetscribe_messages_received_total 20
# HELP fleetscribe_jobs_inflight Messages in hand.
# TYPE fleetscribe_jobs_inflight gauge
fleetscribe_jobs_inflight 0
`
	if err := testutil.GatherAndCompare(e.wreg, strings.NewReader(wantMetrics),
		"fleetscribe_jobs_total", "fleetscribe_messages_received_total", "fleetscribe_jobs_inflight", "fleetscribe_job_errors_total"); err != nil {
		t.Error(err)
	}
	var calls int64
	for _, s := range e.servers {
		calls += s.Calls()
	}
	if calls != 20 {
		t.Errorf("inference calls = %d, want 20 (one chunk per clip)", calls)
	}
}

func keysOf(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// counter returns one labelled series of a counter in reg (0 if absent).
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	return metricValue(t, reg, name, map[string]string{label: value}, 0)
}

// metricValue returns the counter or gauge series of name whose labels
// include all of labels, or absent when there is none.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string, absent float64) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue series
				}
			}
			if m.GetGauge() != nil {
				return m.GetGauge().GetValue()
			}
			return m.GetCounter().GetValue()
		}
	}
	return absent
}

func TestBadInputsGetErrorRecordsAndNoRedelivery(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("corrupt.wav", append([]byte("RIFF\x10\x00\x00\x00WAVEfmt "), bytes.Repeat([]byte{0xAB}, 64)...))
	// Valid, but an encoding neither the Go decoder nor ffmpeg reads: WAV
	// format tag 0x1234 (ffmpeg reads ADPCM, tag 0x0011).
	e.put("song.wav", append([]byte("RIFF\x34\x01\x00\x00WAVEfmt \x14\x00\x00\x00\x34\x12\x01\x00\x40\x1f\x00\x00\xd7\x0f\x00\x00\x00\x01\x04\x00\x02\x00\xf9\x01data\x00\x01\x00\x00"), make([]byte, 256)...))
	e.put("huge.wav", tone(16000, 16000*40)) // 1.28 MB, over the limit below
	e.put("good.wav", tone(16000, 8000))
	for _, k := range []string{"corrupt.wav", "missing.wav", "song.wav", "huge.wav", "good.wav"} {
		e.sendJob(k)
	}
	e.send(`{"not": "a job"}`)
	e.send(`this is not json`)
	cfg := e.config()
	cfg.Inputs.MaxObjectBytes = 1 << 20
	e.run(cfg, nil)

	wantClass := map[string]string{
		"corrupt.wav": contract.ClassCorruptAudio,
		"missing.wav": contract.ClassMissing,
		"song.wav":    contract.ClassUnsupported,
		"huge.wav":    contract.ClassTooLarge,
	}
	for key, class := range wantClass {
		outs := e.outputs(key)
		var rec contract.ErrorRecord
		if err := json.Unmarshal(outs["error.json"], &rec); err != nil {
			t.Fatalf("%s: error record: %v (outputs %v)", key, err, keysOf(outs))
		}
		if rec.Class != class || rec.Schema != contract.ErrorSchema || rec.Attempt != 1 || !rec.Final || rec.Message == "" || rec.Input.Key != key {
			t.Errorf("%s: record %+v, want class %s, attempt 1, final", key, rec, class)
		}
		if _, ok := outs["json"]; ok {
			t.Errorf("%s: a transcript was written for bad input", key)
		}
	}
	if _, ok := e.outputs("good.wav")["json"]; !ok {
		t.Error("the good file next to bad ones was not transcribed")
	}
	// Messages that are not jobs are kept, body and all, in error records.
	res, err := e.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.out), Prefix: aws.String("transcripts/_invalid-messages/")})
	if err != nil {
		t.Fatal(err)
	}
	bodies := map[string]bool{}
	for _, o := range res.Contents {
		obj, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(e.out), Key: o.Key})
		if err != nil {
			t.Fatal(err)
		}
		var rec contract.ErrorRecord
		if err := json.NewDecoder(obj.Body).Decode(&rec); err != nil || rec.Class != contract.ClassBadMessage || rec.MessageID == "" {
			t.Errorf("invalid-message record %+v, %v", rec, err)
		}
		obj.Body.Close()
		bodies[rec.MessageBody] = true
	}
	if !bodies[`{"not": "a job"}`] || !bodies[`this is not json`] {
		t.Errorf("invalid messages not kept: %v", bodies)
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue not drained: %d visible, %d in flight", v, f)
	}
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages; permanent errors must not loop", v+f)
	}
	e.recorder.check(t, 7)
	if got := counter(t, e.wreg, "fleetscribe_jobs_total", "outcome", "failed"); got != 4 {
		t.Errorf("failed jobs = %v, want 4", got)
	}
	if got := counter(t, e.wreg, "fleetscribe_messages_total", "outcome", "invalid"); got != 2 {
		t.Errorf("invalid messages = %v, want 2", got)
	}
}

// failingJob queues one job, a.wav, that its one partition always fails
// (INTERNAL) while serving other inputs (so the pool's canary passes: the
// partition is not down, and the failure is the job's, retried), under a
// configuration that allows it two receives; heal makes a.wav work.
func failingJob(t *testing.T) (e *env, cfg worker.Config, heal func()) {
	t.Helper()
	e = newEnv(t, 1, 2)
	var healed atomic.Bool
	e.servers[0].SetRecognizer(asrFunc(func(samples []float32) (triton.Result, error) {
		if len(samples) == 4000 && !healed.Load() {
			return triton.Result{}, errInternal
		}
		return triton.Result{Text: tritontest.Text(len(samples))}, nil
	}))
	e.put("a.wav", tone(16000, 4000))
	e.sendJob("a.wav")
	cfg = e.config()
	cfg.Queues.MaxReceives = 2
	return e, cfg, func() { healed.Store(true) }
}

func TestRetryableFailuresEndInDLQWithRecord(t *testing.T) {
	e, cfg, heal := failingJob(t)
	cfg.Jobs.ExitWhenIdle = 4 * time.Second // longer than the 1 s and 2 s backoffs
	e.run(cfg, nil)

	var rec contract.ErrorRecord
	if err := json.Unmarshal(e.outputs("a.wav")["error.json"], &rec); err != nil {
		t.Fatalf("error record: %v", err)
	}
	if rec.Class != contract.ClassExhausted || rec.Final || rec.Attempt != 2 {
		t.Errorf("record %+v, want retries_exhausted at attempt 2, not final", rec)
	}
	if v, f := e.depth(e.queue.DLQURL); v+f != 1 {
		t.Errorf("DLQ depth %d, want the message there", v+f)
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue still holds %d", v+f)
	}

	// After the cause is fixed, enqueue's redrive (selecting by the
	// record's class) brings the job back; the worker does it, and the
	// transcript replaces the record, so the job has one outcome.
	heal()
	sum, err := enqueue.Redrive(context.Background(), e.sqs, e.s3, enqueue.RedriveOptions{
		DLQURL: e.queue.DLQURL, ToURL: e.queue.URL, Classes: []string{contract.ClassExhausted},
		OutputBucket: cfg.Outputs.Bucket, WorkerOutputPrefix: cfg.Outputs.Prefix, WorkerModel: "asr", Hold: time.Minute,
	})
	if err != nil || sum.Moved != 1 {
		t.Fatalf("redrive: %s: %v", sum, err)
	}
	e.run(cfg, nil)
	if _, ok := e.transcript("a.wav"); !ok {
		t.Fatal("no transcript after the redrive")
	}
	if rec, ok := e.errorRecord("a.wav"); ok {
		t.Errorf("error record %+v left beside the transcript", rec)
	}
}

// The queue counts a receive that never reaches a worker (its response lost
// in transit) like any other; when it is the last one, the message goes to
// the DLQ with no last attempt to leave a record. The attempt before the
// last leaves one, so the job still has an outcome (the chaos suite once
// found an exhausted job with none).
func TestLastReceiveLostStillLeavesARecord(t *testing.T) {
	e, cfg, _ := failingJob(t)
	cfg.Queues.RetryBackoff = 5 * time.Second // the run is over before the message returns
	cfg.Jobs.ExitWhenIdle = time.Second
	e.run(cfg, nil)
	if _, ok := e.errorRecord("a.wav"); !ok {
		t.Fatal("no error record after the attempt before the last")
	}
	// The last receive, lost: taken from the queue and never handled.
	testwait.For(t, "the last receive", func() bool {
		out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL), WaitTimeSeconds: 1, VisibilityTimeout: 1})
		return err == nil && len(out.Messages) == 1
	})
	rec, ok := e.errorRecord("a.wav")
	if !ok || rec.Class != contract.ClassExhausted || rec.Final || rec.Attempt != 1 || !strings.Contains(rec.Message, "attempt 1 of 2 failed") {
		t.Errorf("record %+v (%v), want retries_exhausted from attempt 1 of 2, not final", rec, ok)
	}
}

// The record of the attempt before the last does not outlive a transcript
// that another delivery of the same input wrote meanwhile (the other
// delivery removed the record before this one wrote it).
func TestRecordBeforeTheLastDoesNotOutliveATranscript(t *testing.T) {
	e, cfg, _ := failingJob(t)
	cfg.Queues.RetryBackoff = 5 * time.Second // the run is over before the message returns
	cfg.Jobs.ExitWhenIdle = time.Second
	elsewhere := &finishedElsewhereS3{S3API: e.s3}
	e.runS3For(cfg, elsewhere, 2*time.Minute)
	if !elsewhere.wrote.Load() {
		t.Fatal("no error record was written before the last attempt")
	}
	outs := e.outputs("a.wav")
	if _, ok := outs["json"]; !ok {
		t.Fatal("the other delivery's transcript is gone")
	}
	if _, ok := outs["error.json"]; ok {
		t.Error("an error record stayed beside the transcript")
	}
}

// finishedElsewhereS3 writes a transcript just before the first error
// record is written: another delivery of the same input finished then.
type finishedElsewhereS3 struct {
	worker.S3API
	wrote atomic.Bool
}

func (f *finishedElsewhereS3) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	if key := aws.ToString(in.Key); strings.HasSuffix(key, ".error.json") && f.wrote.CompareAndSwap(false, true) {
		tr := &s3.PutObjectInput{Bucket: in.Bucket, Key: aws.String(strings.TrimSuffix(key, ".error.json") + ".json"), Body: strings.NewReader(`{"text":""}`)}
		if _, err := f.S3API.PutObject(ctx, tr); err != nil {
			return nil, err
		}
	}
	return f.S3API.PutObject(ctx, in, opts...)
}

func TestRedeliveredJobIsNotDoneTwice(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("a.wav", tone(16000, 4000))
	e.sendJob("a.wav")
	e.run(e.config(), nil)
	first := e.outputs("a.wav")["json"]
	calls := e.servers[0].Calls()

	e.sendJob("a.wav") // e.g. a duplicate S3 event, or a delete that was lost
	e.run(e.config(), nil)
	if e.servers[0].Calls() != calls {
		t.Errorf("inference ran again for a finished job (%d → %d calls)", calls, e.servers[0].Calls())
	}
	if !bytes.Equal(first, e.outputs("a.wav")["json"]) {
		t.Error("transcript was rewritten")
	}
	if got := counter(t, e.wreg, "fleetscribe_jobs_total", "outcome", "duplicate"); got != 1 {
		t.Errorf("duplicate outcomes = %v, want 1", got)
	}
}

func TestS3EventNotificationIsProcessed(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("up loads/x.wav", tone(16000, 3200))
	e.send(fmt.Sprintf(`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":%q},"object":{"key":"up+loads/x.wav","size":6444}}}]}`, e.in))
	e.run(e.config(), nil)
	var tr contract.Transcript
	if err := json.Unmarshal(e.outputs("up loads/x.wav")["json"], &tr); err != nil || tr.Text != tritontest.Text(3200) {
		t.Fatalf("transcript %+v, %v", tr, err)
	}
}

// taggingS3 records the tags each PutObject asks for. The emulator stores
// no tags, so the test checks what the worker sends.
type taggingS3 struct {
	worker.S3API
	mu   sync.Mutex
	tags map[string]string // key → Tagging
}

func (r *taggingS3) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	r.mu.Lock()
	if !strings.HasSuffix(aws.ToString(in.Key), ".claim") { // claims are deleted when the job ends
		r.tags[aws.ToString(in.Key)] = aws.ToString(in.Tagging)
	}
	r.mu.Unlock()
	return r.S3API.PutObject(ctx, in, opts...)
}

func TestErrorRecordsAreTaggedForExpiry(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("corrupt.wav", []byte("RIFF\x10\x00\x00\x00WAVEjunkjunk"))
	e.put("good.wav", tone(16000, 4000))
	e.sendJob("corrupt.wav")
	e.sendJob("good.wav", "srt")
	e.send("not json")
	rec := &taggingS3{S3API: e.s3, tags: map[string]string{}}
	e.wreg = prometheus.NewRegistry()
	w, err := worker.New(e.config(), worker.Deps{Model: "asr", SQS: e.recorder, S3: rec, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: e.wreg})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	delete(rec.tags, "transcripts/_write-check") // the worker's, not a job's
	if len(rec.tags) != 4 {
		t.Fatalf("%d objects written, want 2 error records, a transcript and its srt: %v", len(rec.tags), rec.tags)
	}
	for key, tagging := range rec.tags {
		isRecord := strings.HasSuffix(key, ".error.json")
		if isRecord && tagging != contract.ErrorRecordTag || !isRecord && tagging != "" {
			t.Errorf("%s tagged %q", key, tagging)
		}
	}
}

// Each job ends with one "job done" line that carries its whole result:
// the outcome and, where it left an error record, the record's class,
// finality and key (and never a second line of its own for the failure).
func TestEachJobEndsWithOneLineOfItsResult(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("corrupt.wav", []byte("RIFF\x10\x00\x00\x00WAVEjunkjunk"))
	e.put("good.wav", tone(16000, 4000))
	e.sendJob("corrupt.wav")
	e.sendJob("good.wav")
	var log syncbuf.Buffer
	w, err := worker.New(e.config(), worker.Deps{Model: "asr", SQS: e.recorder, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(&log), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	type line struct {
		Level, Message, Key, Outcome, Class, ErrorKey, Error string
		Final                                                *bool
	}
	done := map[string]line{}
	for l := range strings.Lines(log.String()) {
		var ev struct {
			Level    string `json:"level"`
			Message  string `json:"message"`
			Key      string `json:"key"`
			Outcome  string `json:"outcome"`
			Class    string `json:"error_class"`
			ErrorKey string `json:"error_key"`
			Error    string `json:"error"`
			Final    *bool  `json:"final"`
		}
		if json.Unmarshal([]byte(l), &ev) != nil {
			t.Fatalf("not JSON: %q", l)
		}
		if strings.HasPrefix(ev.Message, "job failed") {
			t.Errorf("a line of the failure beside the job's result: %s", l)
		}
		if ev.Message != "job done" {
			continue
		}
		if _, twice := done[ev.Key]; twice {
			t.Errorf("a second \"job done\" line for %s", ev.Key)
		}
		done[ev.Key] = line(ev)
	}
	bad, good := done["corrupt.wav"], done["good.wav"]
	if bad.Level != "warn" || bad.Outcome != worker.OutcomeFailed || bad.Class != contract.ClassCorruptAudio || bad.Final == nil || !*bad.Final ||
		!strings.HasSuffix(bad.ErrorKey, ".error.json") || bad.Error == "" {
		t.Errorf("corrupt.wav's line: %+v", bad)
	}
	if good.Level != "info" || good.Outcome != worker.OutcomeOK || good.Class != "" || good.Final != nil || good.Error != "" {
		t.Errorf("good.wav's line: %+v", good)
	}
}

// failingErrorRecords makes every error-record write fail.
type failingErrorRecords struct{ worker.S3API }

func (f failingErrorRecords) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	if strings.HasSuffix(aws.ToString(in.Key), ".error.json") {
		return nil, fmt.Errorf("injected: S3 unavailable")
	}
	return f.S3API.PutObject(ctx, in, opts...)
}

func TestUnwritableErrorRecordKeepsMessage(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("corrupt.wav", []byte("RIFF\x10\x00\x00\x00WAVEjunkjunk"))
	e.sendJob("corrupt.wav")
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = time.Second
	cfg.Queues.RetryBackoff = 3 * time.Second // the first run is over before the message returns
	e.wreg = prometheus.NewRegistry()
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.recorder, S3: failingErrorRecords{e.s3}, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: e.wreg})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	if e.recorder.deletes != 0 {
		t.Fatal("message deleted although its error record could not be written")
	}
	if v, f := e.depth(e.queue.URL); v+f != 1 {
		t.Fatalf("message should wait for redelivery, depth %d", v+f)
	}
	// Once S3 works again, the redelivery writes the record and deletes.
	cfg.Jobs.ExitWhenIdle = 5 * time.Second // past the 3 s retry backoff
	e.run(cfg, nil)
	var rec contract.ErrorRecord
	if err := json.Unmarshal(e.outputs("corrupt.wav")["error.json"], &rec); err != nil || rec.Class != contract.ClassCorruptAudio || rec.Attempt != 2 {
		t.Fatalf("record after recovery: %+v, %v", rec, err)
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Fatalf("queue not drained after recovery: %d", v+f)
	}
}

func TestMissingQueueIsAClearError(t *testing.T) {
	e := newEnv(t, 1, 3)
	cfg := e.config()
	cfg.Queues.URL = e.queue.URL + "-nope"
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.sqs, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "-nope") {
		t.Fatalf("want an error naming the queue, got %v", err)
	}
}

// failingHeartbeats makes every visibility extension fail, as when the
// message was already returned to the queue.
type failingHeartbeats struct{ *recordingSQS }

func (f failingHeartbeats) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, en := range in.Entries {
		out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: en.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("injected"), SenderFault: true})
	}
	return out, nil
}

func TestLostHeartbeatAbandonsJob(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.servers[0].Hold() // the job stays in inference until the heartbeat fails
	e.put("a.wav", tone(16000, 4000))
	e.sendJob("a.wav")
	cfg := e.config()
	cfg.Queues.HeartbeatInterval = 100 * time.Millisecond
	cfg.Jobs.ExitWhenIdle = time.Second
	e.run(cfg, failingHeartbeats{e.recorder})

	if outs := e.outputs("a.wav"); len(outs) != 0 {
		t.Errorf("outputs written for an abandoned job: %v", keysOf(outs))
	}
	if e.recorder.deletes != 0 {
		t.Error("abandoned job's message was deleted")
	}
	if got := counter(t, e.wreg, "fleetscribe_jobs_total", "outcome", "released"); got != 1 {
		t.Errorf("released outcomes = %v, want 1", got)
	}
	if v, f := e.depth(e.queue.URL); v+f != 1 {
		t.Errorf("message should still be queued for another worker, depth %d", v+f)
	}
}

// outputDir is the folder of a job's outputs, whatever its ETag (single
// uploads have 32-hex-digit ETags).
func outputDir(job contract.Job) string {
	base := contract.KeysFor("transcripts/", contract.InputRef{Bucket: job.Bucket, Key: job.Key, ETag: strings.Repeat("0", 32)}, "asr").Base
	return base[:strings.LastIndex(base, "/")+1]
}
