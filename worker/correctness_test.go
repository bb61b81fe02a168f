package worker_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	sqstypes "github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// s3Event is an S3 notification with one record per key.
func s3Event(bucket string, keys ...string) string {
	var recs []string
	for _, k := range keys {
		recs = append(recs, fmt.Sprintf(`{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":%q},"object":{"key":%q}}}`, bucket, k))
	}
	return `{"Records":[` + strings.Join(recs, ",") + `]}`
}

func (e *env) transcript(key string) (contract.Transcript, bool) {
	e.t.Helper()
	var tr contract.Transcript
	return tr, e.outputJSON(key, "json", &tr)
}

func (e *env) errorRecord(key string) (contract.ErrorRecord, bool) {
	e.t.Helper()
	var rec contract.ErrorRecord
	return rec, e.outputJSON(key, "error.json", &rec)
}

// outputJSON decodes the output of key with the given suffix into v and
// reports whether it exists.
func (e *env) outputJSON(key, suffix string, v any) bool {
	e.t.Helper()
	b, ok := e.outputs(key)[suffix]
	if !ok {
		return false
	}
	if err := json.Unmarshal(b, v); err != nil {
		e.t.Fatal(err)
	}
	return true
}

// Item 1: a permanent failure of one record does not stop the records
// after it, and a retryable failure of one does not redo the others.
func TestMultiRecordEventEveryRecordReachesAnOutcome(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("a.wav", tone(16000, 1600))
	e.put("c.wav", tone(16000, 3200))
	e.send(s3Event(e.in, "a.wav", "missing.wav", "c.wav"))
	e.run(e.config(), nil)
	for _, k := range []string{"a.wav", "c.wav"} {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript: records after a failed one were dropped", k)
		}
	}
	if rec, ok := e.errorRecord("missing.wav"); !ok || rec.Class != contract.ClassMissing {
		t.Errorf("missing.wav: record %+v, %v", rec, ok)
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue holds %d messages", v+f)
	}
}

// rejected returns the records of refused messages (not jobs, or refused
// by policy), by key.
func (e *env) rejected() map[string]contract.ErrorRecord {
	e.t.Helper()
	res, err := e.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.out), Prefix: aws.String("transcripts/_invalid-messages/")})
	if err != nil {
		e.t.Fatal(err)
	}
	out := map[string]contract.ErrorRecord{}
	for _, o := range res.Contents {
		obj, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(e.out), Key: o.Key})
		if err != nil {
			e.t.Fatal(err)
		}
		var rec contract.ErrorRecord
		if err := json.NewDecoder(obj.Body).Decode(&rec); err != nil {
			e.t.Fatal(err)
		}
		_ = obj.Body.Close()
		out[aws.ToString(o.Key)] = rec
	}
	return out
}

// A multi-record event with a record that names a bucket S3 cannot have
// keeps its valid records: each record succeeds or fails alone, and the
// refused one has its own record, named by the message and the record.
func TestMultiRecordEventKeepsItsValidRecords(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("a.wav", tone(16000, 1600))
	e.put("c.wav", tone(16000, 3200))
	body := `{"Records":[` + strings.Join([]string{
		fmt.Sprintf(`{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":%q},"object":{"key":"a.wav"}}}`, e.in),
		`{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"In_Valid"},"object":{"key":"b.wav"}}}`,
		fmt.Sprintf(`{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":%q},"object":{"key":"c.wav"}}}`, e.in),
	}, ",") + `]}`
	e.send(body)
	e.run(e.config(), nil)
	for _, k := range []string{"a.wav", "c.wav"} {
		if _, ok := e.transcript(k); !ok {
			t.Errorf("%s: no transcript: a valid record of the event was dropped", k)
		}
	}
	recs := e.rejected()
	if len(recs) != 1 {
		t.Fatalf("records of refused records: %v, want one", recs)
	}
	for key, rec := range recs {
		if !strings.HasSuffix(key, ".record-1.error.json") || rec.Class != contract.ClassBadMessage || !strings.Contains(rec.Message, "not an S3 bucket name") || rec.MessageBody != body {
			t.Errorf("%s: %+v, want record 1's bad_message record with the S3 rule and the message body", key, rec)
		}
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue holds %d messages", v+f)
	}
	e.recorder.check(t, 1)
}

func TestMultiRecordRetryRedoesNothingDone(t *testing.T) {
	e := newEnv(t, 1, 3)
	var callsB atomic.Int64
	e.servers[0].SetRecognizer(asrFunc(func(samples []float32) (triton.Result, error) {
		switch len(samples) {
		case 3200:
			// Fails every attempt of the first delivery (the pool tries 3
			// times), then works: the message must come back once.
			if callsB.Add(1) <= 3 {
				return triton.Result{}, errInternal
			}
		}
		return triton.Result{Text: tritontest.Text(len(samples))}, nil
	}))
	e.put("a.wav", tone(16000, 1600))
	e.put("b.wav", tone(16000, 3200))
	e.send(s3Event(e.in, "a.wav", "b.wav"))
	cfg := e.config()
	cfg.Jobs.ExitWhenIdle = 4 * time.Second
	e.run(cfg, nil)
	if _, ok := e.transcript("b.wav"); !ok {
		t.Fatal("b.wav not transcribed after its retry")
	}
	if got := counter(t, e.wreg, "fleetscribe_messages_total", "outcome", worker.MessageRetry); got != 1 {
		t.Errorf("message retried %v times, want once", got)
	}
	// a.wav's chunk was served once: the pool's requests (its canary,
	// a copy of a served chunk, asked when b's attempts ran out, is not
	// one).
	if n := counter(t, e.reg, "fleetscribe_triton_requests_total", "outcome", "ok"); n != 2 {
		t.Errorf("%v chunks served, want a's once and b's once: a.wav computed again", n)
	}
}

// Item 2: keys that path cleaning folds together, and one key in two
// buckets, get their own outputs.
func TestOutputKeysDoNotCollide(t *testing.T) {
	e := newEnv(t, 1, 3)
	other := e.in + "-2"
	if err := emulatorBucket(other); err != nil {
		t.Fatal(err)
	}
	keys := []string{"a//x.wav", "/a/x.wav", "a/./x.wav", "a/x.wav"}
	for i, k := range keys {
		e.put(k, tone(16000, 1000*(i+1)))
		e.sendJob(k)
	}
	putIn(t, e, other, "a/x.wav", tone(16000, 7000))
	b, _ := contract.Job{Bucket: other, Key: "a/x.wav"}.Encode()
	e.send(string(b))
	cfg := e.config()
	cfg.Inputs.Buckets = append(cfg.Inputs.Buckets, other)
	e.run(cfg, nil)
	for i, k := range keys {
		tr, ok := e.transcript(k)
		if !ok || tr.Text != tritontest.Text(1000*(i+1)) || tr.Input.Key != k {
			t.Errorf("%q: transcript %q of %q (found %v)", k, tr.Text, tr.Input.Key, ok)
		}
	}
	out := listOutputs(t, e.s3, e.out, other, "a/x.wav")
	var tr contract.Transcript
	if err := json.Unmarshal(out["json"], &tr); err != nil || tr.Text != tritontest.Text(7000) {
		t.Errorf("second bucket's transcript %q, %v", tr.Text, err)
	}
}

// keyLimitS3 refuses keys over S3's 1,024-byte limit as S3 does, and
// optionally every PUT whose key has a given suffix.
type keyLimitS3 struct {
	worker.S3API
	refuseSuffix string
}

func (k keyLimitS3) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	key := aws.ToString(in.Key)
	if len(key) > contract.MaxKeyBytes || k.refuseSuffix != "" && strings.Contains(key, k.refuseSuffix) && strings.HasSuffix(key, ".json") {
		return nil, &smithy.GenericAPIError{Code: "KeyTooLongError", Message: "Your key is too long"}
	}
	return k.S3API.PutObject(ctx, in, opts...)
}

func (e *env) runS3(cfg worker.Config, s3c worker.S3API) {
	e.t.Helper()
	e.runS3For(cfg, s3c, 2*time.Minute)
}

// runFor runs the worker for at most d.
func (e *env) runFor(cfg worker.Config, d time.Duration) {
	e.t.Helper()
	e.runS3For(cfg, e.s3, d)
}

func (e *env) runS3For(cfg worker.Config, s3c worker.S3API, d time.Duration) {
	e.t.Helper()
	e.wreg = prometheus.NewRegistry()
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.recorder, S3: s3c, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: e.wreg})
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		e.t.Fatal(err)
	}
}

// Item 3: a 970-byte key finishes, and an output S3 refuses is a
// permanent error with a record, not a retry loop.
func TestLongKeyFinishesAndRefusedOutputIsPermanent(t *testing.T) {
	e := newEnv(t, 1, 3)
	long := strings.Repeat("k", 970) + ".wav"
	e.put(long, tone(16000, 1600))
	e.sendJob(long)
	e.put("refused.wav", tone(16000, 1600))
	e.sendJob("refused.wav")
	e.runS3(e.config(), keyLimitS3{S3API: e.s3, refuseSuffix: "refused.wav/asr/"})
	all, err := e.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.out)})
	if err != nil {
		t.Fatal(err)
	}
	var hashed, unwritable int
	for _, o := range all.Contents {
		k := aws.ToString(o.Key)
		if strings.Contains(k, "/%hashed/") && strings.HasSuffix(k, ".json") && !strings.HasSuffix(k, ".error.json") {
			hashed++
		}
		if strings.HasPrefix(k, "transcripts/_unwritable/") {
			unwritable++
		}
	}
	if hashed != 1 || unwritable != 1 {
		t.Errorf("%d transcripts under a hashed key, %d records under _unwritable; want 1 and 1", hashed, unwritable)
	}
	// Each message received once: nothing retried. (refused.wav's record is
	// under _unwritable, so the recorder's own output check does not apply.)
	e.recorder.mu.Lock()
	for id, n := range e.recorder.received {
		if n != 1 {
			t.Errorf("message %s received %d times", id, n)
		}
	}
	e.recorder.mu.Unlock()
	if got := counter(t, e.wreg, "fleetscribe_job_errors_total", "class", contract.ClassOutputRejected); got != 1 {
		t.Errorf("output_rejected errors = %v, want 1", got)
	}
}

// Item 4: a recording that would grow past the budget when resampled is
// refused from its header, before the object is downloaded.
func TestLowRateRecordingIsRefusedBeforeDownload(t *testing.T) {
	e := newEnv(t, 1, 3)
	// 2 MB of 8-bit audio at 1 kHz: 33 minutes, about 150 MB once decoded
	// and resampled to 16 kHz float.
	e.put("low.wav", wav8bit(1000, 2_000_000))
	e.put("long.wav", wav8bit(8000, 1_000_000)) // 125 s
	e.sendJob("low.wav")
	e.sendJob("long.wav")
	cfg := e.config()
	cfg.Jobs.MemoryBudget = 64 << 20
	cfg.Inputs.MaxAudioSeconds = 120
	counting := &countingS3{S3API: e.s3}
	e.runS3(cfg, counting)
	for _, k := range []string{"low.wav", "long.wav"} {
		rec, ok := e.errorRecord(k)
		if !ok || rec.Class != contract.ClassTooLarge || !rec.Final {
			t.Errorf("%s: record %+v (found %v), want final too_large", k, rec, ok)
		}
	}
	if n := counting.fullGets.Load(); n != 0 {
		t.Errorf("%d whole-object GETs for refused recordings", n)
	}
}

type countingS3 struct {
	worker.S3API
	fullGets atomic.Int64
}

func (c *countingS3) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	if in.Range == nil {
		c.fullGets.Add(1)
	}
	return c.S3API.GetObject(ctx, in, opts...)
}

// wav8bit returns an 8-bit mono WAV of n samples at rate.
func wav8bit(rate, n int) []byte {
	b := make([]byte, 44, 44+n)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+n))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(rate))
	binary.LittleEndian.PutUint16(b[32:], 1)
	binary.LittleEndian.PutUint16(b[34:], 8)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(n))
	for i := range n {
		b = append(b, byte(128+int(40*float64(i%20)/20)))
	}
	return b
}

// Item 4: on the last receive a record exists before the work starts, so
// a process that dies during that attempt still leaves one; success
// removes it.
func TestLastAttemptLeavesARecordUntilItSucceeds(t *testing.T) {
	e := newEnv(t, 1, 1) // max receives 1: the first attempt is the last
	e.put("a.wav", tone(16000, 1600))
	e.sendJob("a.wav")
	e.servers[0].Hold()
	cfg := e.config()
	cfg.Queues.MaxReceives = 1
	done := make(chan struct{})
	go func() { defer close(done); e.run(cfg, nil) }()
	<-e.servers[0].Started()
	rec, ok := e.errorRecord("a.wav")
	if !ok || rec.Class != contract.ClassExhausted || rec.Final {
		t.Errorf("during the last attempt: record %+v (found %v), want a provisional retries_exhausted record", rec, ok)
	}
	e.servers[0].Release()
	<-done
	if _, ok := e.transcript("a.wav"); !ok {
		t.Fatal("no transcript")
	}
	if _, ok := e.errorRecord("a.wav"); ok {
		t.Error("provisional record left beside the transcript")
	}
}

// Item 5: inputs outside the allow-list and unsafe output prefixes are
// refused with bad_message records; allowed ones work.
func TestUntrustedMessagesAreRefused(t *testing.T) {
	e := newEnv(t, 1, 3)
	secret := e.in + "-secret"
	if err := emulatorBucket(secret); err != nil {
		t.Fatal(err)
	}
	putIn(t, e, secret, "payroll.wav", tone(16000, 1600))
	e.put("ok.wav", tone(16000, 1600))
	e.send(s3Event(secret, "payroll.wav"))
	for _, p := range []string{"../../", "other-tenant/", "transcripts/../x/"} {
		b, _ := json.Marshal(map[string]any{"v": 1, "bucket": e.in, "key": "ok.wav", "output_prefix": p})
		e.send(string(b))
	}
	b, _ := json.Marshal(map[string]any{"v": 1, "bucket": e.in, "key": "ok.wav", "output_prefix": "transcripts/tenant-a/"})
	e.send(string(b))
	cfg := e.config()
	cfg.Inputs.Buckets = []string{e.in}
	e.run(cfg, nil)
	if out := listOutputs(t, e.s3, e.out, secret, "payroll.wav"); len(out) != 0 {
		t.Errorf("outputs %v beside an input outside the allow-list", keysOf(out))
	}
	// Each refused message has its own record, named by the message and
	// holding its body; none lies beside ok.wav's outputs, where a reader
	// would take it for that input's outcome.
	recs := e.rejected()
	if len(recs) != 4 {
		t.Errorf("%d records of refused messages, want 4 (one each): %v", len(recs), recs)
	}
	for key, rec := range recs {
		if rec.Class != contract.ClassBadMessage || rec.MessageID == "" || !strings.Contains(key, rec.MessageID) || rec.MessageBody == "" || !rec.Final {
			t.Errorf("%s: record %+v, want a final bad_message record naming its message, with its body", key, rec)
		}
	}
	if _, ok := e.outputs("ok.wav")["error.json"]; ok {
		t.Error("an error record of a refused message lies beside ok.wav's outputs")
	}
	if got := counter(t, e.wreg, "fleetscribe_job_errors_total", "class", contract.ClassBadMessage); got != 4 {
		t.Errorf("bad_message errors = %v, want 4", got)
	}
	res, err := e.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.out)})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Contents {
		if k := aws.ToString(o.Key); !strings.HasPrefix(k, "transcripts/") || strings.Contains(k, "..") {
			t.Errorf("written outside the output prefix: %q", k)
		}
	}
	k := contract.KeysFor("transcripts/tenant-a/", contract.InputRef{Bucket: e.in, Key: "ok.wav"}, "asr")
	found := false
	for _, o := range res.Contents {
		found = found || strings.HasPrefix(aws.ToString(o.Key), k.Base[:strings.LastIndex(k.Base, "/")]) && strings.HasSuffix(aws.ToString(o.Key), ".json") && !strings.HasSuffix(aws.ToString(o.Key), ".error.json")
	}
	if !found {
		t.Error("a job with an allowed output prefix was not transcribed there")
	}
}

// Item 7: a header-only WAV gets a clear empty_audio record.
func TestHeaderOnlyWAVIsEmptyAudio(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("empty.wav", tone(16000, 0))
	e.sendJob("empty.wav")
	e.run(e.config(), nil)
	if rec, ok := e.errorRecord("empty.wav"); !ok || rec.Class != contract.ClassEmptyAudio {
		t.Errorf("record %+v (found %v), want empty_audio", rec, ok)
	}
}

// Item 8: events that carry no work are not counted as jobs, and a short
// heartbeat interval never reports a finished job's heartbeat as lost.
func TestIgnoredEventsAndHeartbeatsAfterDelete(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.send(`{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"in"}`)
	e.send(`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"in"},"object":{"key":"x.wav"}}}]}`)
	for i := range 10 {
		k := fmt.Sprintf("k%d.wav", i)
		e.put(k, tone(16000, 1600))
		e.sendJob(k)
	}
	cfg := e.config()
	cfg.Queues.HeartbeatInterval = 2 * time.Millisecond
	e.run(cfg, &strictSQS{recordingSQS: e.recorder, deleted: map[string]bool{}})
	if got := counter(t, e.wreg, "fleetscribe_jobs_total", "outcome", "ok"); got != 10 {
		t.Errorf("ok jobs = %v, want 10 (ignored events are not jobs)", got)
	}
	if got := counter(t, e.wreg, "fleetscribe_messages_total", "outcome", worker.MessageIgnored); got != 2 {
		t.Errorf("ignored messages = %v, want 2", got)
	}
	if got := counter(t, e.wreg, "fleetscribe_heartbeats_total", "outcome", "failed"); got != 0 {
		t.Errorf("%v heartbeats failed for jobs that finished normally", got)
	}
}

// Item 9: the same input enqueued twice and received by two workers at
// once is computed once, or rarely twice; the rate is printed. On the fast
// emulator, which ignores If-None-Match, claims rest on their read-back
// alone (at most 10% twice); on moto, whose S3 refuses a second claim as
// S3 does, never twice.
func TestConcurrentDuplicatesAreRare(t *testing.T) {
	t.Run("fauxqs", func(t *testing.T) { concurrentDuplicates(t, emulator, n10pct) })
	t.Run("moto", func(t *testing.T) { concurrentDuplicates(t, motoServer(t), 0) })
}

// n10pct: at most a tenth of the inputs computed twice.
const n10pct = -1

func concurrentDuplicates(t *testing.T, srv *localaws.Server, maxDup int) {
	e := newEnvOn(t, srv, 2, 3)
	const n = 40
	for i := range n {
		k := fmt.Sprintf("dup%02d.wav", i)
		e.put(k, tone(16000, 1600+i))
		e.sendJob(k)
		e.sendJob(k)
	}
	cfg := e.config()
	cfg.Claims.Settle = 100 * time.Millisecond
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.sqs, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
			if err != nil {
				t.Error(err)
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			_ = w.Run(ctx)
		})
	}
	wg.Wait()
	calls := e.servers[0].Calls() + e.servers[1].Calls()
	dup := calls - n
	t.Logf("%d inputs enqueued twice: %d computed twice (%.1f%%)", n, dup, 100*float64(dup)/n)
	for i := range n {
		if _, ok := e.transcript(fmt.Sprintf("dup%02d.wav", i)); !ok {
			t.Errorf("dup%02d.wav: no transcript", i)
		}
	}
	if maxDup == n10pct {
		maxDup = n / 10
	}
	if dup > int64(maxDup) {
		t.Errorf("%d of %d inputs computed twice, want at most %d", dup, n, maxDup)
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue holds %d messages", v+f)
	}
}

// Item 10: a panic in a chunk's goroutine fails that job, not the process.
type panickingTranscriber struct{}

func (panickingTranscriber) Transcribe(context.Context, triton.Request) (triton.Result, error) {
	panic("model client bug")
}

func TestPanicInChunkFailsOnlyTheJob(t *testing.T) {
	e := newEnv(t, 1, 1)
	e.put("a.wav", tone(16000, 1600))
	e.sendJob("a.wav")
	cfg := e.config()
	cfg.Queues.MaxReceives = 1
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.sqs, S3: e.s3, Transcriber: panickingTranscriber{}, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := w.Run(ctx); err != nil {
		t.Fatal(err)
	}
	rec, ok := e.errorRecord("a.wav")
	if !ok || !strings.Contains(rec.Message, "model client bug") {
		t.Errorf("record %+v (found %v), want the panic recorded", rec, ok)
	}
}

// Item 10: a job may ask for another model the partitions serve (bulk
// reprocessing after a model change); one they do not is refused.
func TestJobModelOverride(t *testing.T) {
	e := newEnv(t, 1, 3, "asr-v2")
	e.put("a.wav", tone(16000, 1600))
	for _, m := range []string{"asr-v2", "asr-v9"} {
		b, _ := contract.Job{Bucket: e.in, Key: "a.wav", Model: m}.Encode()
		e.send(string(b))
	}
	cfg := e.config()
	cfg.Jobs.Models = []string{"asr-v2"}
	e.run(cfg, nil)
	if n := e.servers[0].ModelCalls("asr-v2"); n != 1 {
		t.Errorf("%d requests for asr-v2, want 1", n)
	}
	k := contract.KeysFor("transcripts/", contract.InputRef{Bucket: e.in, Key: "a.wav"}, "asr-v2")
	res, err := e.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.out), Prefix: aws.String(k.Base[:strings.LastIndex(k.Base, "/")+1])})
	if err != nil || len(res.Contents) != 1 {
		t.Fatalf("asr-v2 outputs: %v, %v", res, err)
	}
	if got := counter(t, e.wreg, "fleetscribe_job_errors_total", "class", contract.ClassBadMessage); got != 1 {
		t.Errorf("bad_message errors = %v, want 1 (the unserved model)", got)
	}
}

var errInternal = status.Error(codes.Internal, "injected: model crashed")

// asrFunc adapts a function of the samples to a recognizer.
func asrFunc(f func([]float32) (triton.Result, error)) kserve.Recognizer {
	return kserve.RecognizerFunc(func(_ context.Context, samples []float32, _ bool) (triton.Result, error) {
		return f(samples)
	})
}

func emulatorBucket(name string) error {
	_, s3c := emulator.Clients()
	return localaws.CreateBucket(context.Background(), s3c, name)
}

func putIn(t *testing.T, e *env, bucket, key string, body []byte) {
	t.Helper()
	if _, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
		t.Fatal(err)
	}
}

// signallingSQS reports each ReceiveMessage call as it starts.
type signallingSQS struct {
	*recordingSQS
	polling chan struct{}
}

func (s signallingSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, opts ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	select {
	case s.polling <- struct{}{}:
	default:
	}
	return s.recordingSQS.ReceiveMessage(ctx, in, opts...)
}

// Item 10: SIGTERM during a long poll lets the poll return, and what it
// returns goes straight back to the queue instead of staying invisible.
func TestShutdownDuringLongPollStrandsNothing(t *testing.T) {
	e := newEnv(t, 1, 3)
	cfg := e.config()
	cfg.Queues.WaitTime = 3 * time.Second
	cfg.Jobs.ExitWhenIdle = 0
	polling := make(chan struct{}, 1)
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: signallingSQS{e.recorder, polling}, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	<-polling // the first long poll is in flight
	cancel()  // SIGTERM
	e.put("a.wav", tone(16000, 1600))
	e.sendJob("a.wav") // arrives while the poll still waits
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	out, err := e.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(e.queue.URL), WaitTimeSeconds: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatal("the message sent during the shutdown poll is not visible: stranded until its visibility timeout")
	}
}

// strictSQS answers a visibility change for a deleted message with a
// failed entry, as SQS does (the emulator accepts it), and makes each
// delete take a little while, so an extension racing a delete shows.
type strictSQS struct {
	*recordingSQS
	mu      sync.Mutex
	deleted map[string]bool
}

func (s *strictSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, opts ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	s.mu.Lock()
	for _, e := range in.Entries {
		s.deleted[aws.ToString(e.ReceiptHandle)] = true
	}
	s.mu.Unlock()
	time.Sleep(10 * time.Millisecond)
	return s.recordingSQS.DeleteMessageBatch(ctx, in, opts...)
}

func (s *strictSQS) ChangeMessageVisibilityBatch(ctx context.Context, in *sqs.ChangeMessageVisibilityBatchInput, opts ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	var live []sqstypes.ChangeMessageVisibilityBatchRequestEntry
	s.mu.Lock()
	for _, en := range in.Entries {
		if s.deleted[aws.ToString(en.ReceiptHandle)] {
			out.Failed = append(out.Failed, sqstypes.BatchResultErrorEntry{Id: en.Id, Code: aws.String("ReceiptHandleIsInvalid"), SenderFault: true})
		} else {
			live = append(live, en)
		}
	}
	s.mu.Unlock()
	if len(live) > 0 {
		res, err := s.recordingSQS.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: in.QueueUrl, Entries: live}, opts...)
		if err != nil {
			return nil, err
		}
		out.Successful = append(out.Successful, res.Successful...)
		out.Failed = append(out.Failed, res.Failed...)
	}
	return out, nil
}

// floatWAV is a 32-bit float WAV (format 3) of samples at 16 kHz.
func floatWAV(samples []float32) []byte {
	var b bytes.Buffer
	le := func(v any) { _ = binary.Write(&b, binary.LittleEndian, v) }
	b.WriteString("RIFF")
	le(uint32(36 + 4*len(samples)))
	b.WriteString("WAVEfmt ")
	le(uint32(16))
	le(uint16(3)) // IEEE float
	le(uint16(1))
	le(uint32(16000))
	le(uint32(16000 * 4))
	le(uint16(4))
	le(uint16(32))
	b.WriteString("data")
	le(uint32(4 * len(samples)))
	le(samples)
	return b.Bytes()
}

// A float recording of NaN samples gets a clear permanent error record,
// and one scaled far past full scale (1e30) is levelled like any other:
// before, the first ended "ok" with empty text and the second reached the
// model as silence (its frame energies overflowed and the gain became 0).
func TestNonFiniteAndHugeFloatRecordings(t *testing.T) {
	e := newEnv(t, 1, 3)
	var heard []float64
	var mu sync.Mutex
	e.servers[0].SetRecognizer(asrFunc(func(x []float32) (triton.Result, error) {
		var sum float64
		for _, v := range x {
			sum += float64(v) * float64(v)
		}
		mu.Lock()
		heard = append(heard, math.Sqrt(sum/float64(len(x))))
		mu.Unlock()
		return triton.Result{Text: tritontest.Text(len(x))}, nil
	}))
	nan := make([]float32, 16000)
	huge := make([]float32, 16000)
	for i := range nan {
		nan[i] = float32(math.NaN())
		huge[i] = float32(1e30 * math.Sin(float64(i)*0.1))
	}
	e.put("nan.wav", floatWAV(nan))
	e.put("huge.wav", floatWAV(huge))
	e.sendJob("nan.wav")
	e.sendJob("huge.wav")
	e.run(e.config(), nil)
	if rec, ok := e.errorRecord("nan.wav"); !ok || rec.Class != contract.ClassCorruptAudio || !strings.Contains(rec.Message, "NaN") {
		t.Errorf("NaN recording: record %+v (found %v), want corrupt_audio naming NaN", rec, ok)
	}
	if _, ok := e.transcript("huge.wav"); !ok {
		t.Error("the 1e30 recording has no transcript")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(heard) != 1 || math.Abs(heard[0]-0.1) > 0.02 {
		t.Errorf("the model heard RMS %v, want one chunk at 0.1 (-20 dBFS)", heard)
	}
}

// A job whose ETag is not the object's (overwritten since its event: the
// new upload has an event of its own) is dropped: no transcript, no error
// record, the message deleted.
func TestOverwrittenInputIsSuperseded(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("a.wav", tone(16000, 1600))
	b, err := contract.Job{Bucket: e.in, Key: "a.wav", ETag: `"0123456789abcdef0123456789abcdef"`}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	e.send(string(b))
	e.run(e.config(), nil)
	if out := e.outputs("a.wav"); len(out) != 0 {
		t.Errorf("outputs written for a superseded job: %v", slices.Collect(maps.Keys(out)))
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue holds %d messages", v+f)
	}
	if e.servers[0].Calls() != 0 {
		t.Errorf("%d inference calls for a superseded job", e.servers[0].Calls())
	}
}

// A recording whose last chunk the model fails (the same error on both
// partitions, which serve its other chunk meanwhile) ends at once in a
// model_failed record naming the model's error: one receive, no retries,
// no ejected partition, nothing in the DLQ.
func TestPoisonChunkIsAPermanentRecord(t *testing.T) {
	e := newEnv(t, 2, 3)
	for _, s := range e.servers {
		s.SetRecognizer(asrFunc(func(x []float32) (triton.Result, error) {
			crossings := 0
			for i := 1; i < len(x); i++ {
				if (x[i-1] < 0) != (x[i] < 0) {
					crossings++
				}
			}
			if crossings > len(x)/10 { // the second chunk's 3 kHz, not the first's 300 Hz
				return triton.Result{}, status.Error(codes.Internal, "transcription failed: 'NoneType' object is not iterable")
			}
			return triton.Result{Text: tritontest.Text(len(x))}, nil
		}))
	}
	// 40 s in two chunks: 20 s at 300 Hz, the model's good input, then 20 s
	// at 3 kHz, which it fails.
	x := make([]float32, 40*16000)
	for i := range x {
		f := 300.0
		if i >= len(x)/2 {
			f = 3000
		}
		x[i] = 0.3 * float32(math.Sin(2*math.Pi*f*float64(i)/16000))
	}
	e.put("long.wav", floatWAV(x))
	e.sendJob("long.wav")
	e.run(e.config(), nil)
	rec, ok := e.errorRecord("long.wav")
	if !ok {
		t.Fatalf("no error record (outputs %v)", keysOf(e.outputs("long.wav")))
	}
	if rec.Class != contract.ClassModelFailed || !rec.Final || rec.Attempt != 1 || !strings.Contains(rec.Message, "'NoneType' object is not iterable") {
		t.Errorf("record %+v, want a final model_failed record of attempt 1 naming the model's error", rec)
	}
	for _, s := range e.servers {
		if v := metricValue(t, e.reg, "fleetscribe_triton_partition_healthy", map[string]string{"partition": s.Addr}, -1); v != 1 {
			t.Errorf("partition %s ejected", s.Addr)
		}
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("queue not drained: %d visible, %d in flight", v, f)
	}
	if v, f := e.depth(e.queue.DLQURL); v+f != 0 {
		t.Errorf("DLQ has %d messages", v+f)
	}
	e.recorder.check(t, 1)
}
