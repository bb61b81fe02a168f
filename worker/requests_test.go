package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/worker"
)

// tallyS3 counts the S3 calls the worker makes, by operation, and keeps
// the ranges and conditions of its GETs.
type tallyS3 struct {
	worker.S3API
	mu    sync.Mutex
	calls map[string]int
	gets  []string // "range if-match" of each GET of an input
}

func (c *tallyS3) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string]int{}
	}
	c.calls[op]++
}

func (c *tallyS3) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	c.add("get")
	c.mu.Lock()
	c.gets = append(c.gets, aws.ToString(in.Range)+" "+aws.ToString(in.IfMatch))
	c.mu.Unlock()
	return c.S3API.GetObject(ctx, in, opts...)
}

func (c *tallyS3) HeadObject(ctx context.Context, in *s3.HeadObjectInput, opts ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	c.add("head")
	return c.S3API.HeadObject(ctx, in, opts...)
}

func (c *tallyS3) PutObject(ctx context.Context, in *s3.PutObjectInput, opts ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	switch k := aws.ToString(in.Key); {
	case strings.HasSuffix(k, ".claim"):
		c.add("put claim")
	case strings.HasSuffix(k, "/_write-check"):
		c.add("write check") // once per worker start, not per job
	default:
		c.add("put")
	}
	return c.S3API.PutObject(ctx, in, opts...)
}

func (c *tallyS3) DeleteObject(ctx context.Context, in *s3.DeleteObjectInput, opts ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	c.add("delete")
	return c.S3API.DeleteObject(ctx, in, opts...)
}

// A short recording costs one GET (the whole object, with its ETag), one
// HEAD (the transcript check), one PUT (the transcript) and one DELETE
// (free: an error record of an earlier delivery, if any); no claim below
// -claim-min-audio. (A worker writes its write check once at start.) A recording past the first read costs a second GET of
// exactly the rest, of the same version; a long one gets a claim.
func TestRequestsPerJob(t *testing.T) {
	e := newEnv(t, 1, 3)
	short := tone(16000, 5*16000) // 160 KB
	e.put("short.wav", short)
	e.sendJob("short.wav")
	cfg := e.config()
	cfg.Claims.MinAudio = time.Minute
	cfg.Audio.Timestamps = false // chunks meet end to end: the model sees each sample once
	tally := &tallyS3{S3API: e.s3}
	e.runS3(cfg, tally)
	want := map[string]int{"get": 1, "head": 1, "put": 1, "delete": 1, "write check": 1}
	if fmt.Sprint(tally.calls) != fmt.Sprint(want) {
		t.Errorf("short recording: S3 calls %v, want %v", tally.calls, want)
	}
	if out := e.outputs("short.wav"); out["json"] == nil {
		t.Fatal("no transcript")
	}

	// 70 s at 16 kHz is 2.2 MB: past the first read, and past the claim
	// threshold.
	long := tone(16000, 70*16000)
	e.put("long.wav", long)
	e.sendJob("long.wav")
	tally = &tallyS3{S3API: e.s3}
	e.runS3(cfg, tally)
	// The claim is read back after it settles, and again (to be sure it is
	// still ours) before it is deleted.
	want = map[string]int{"get": 4, "head": 1, "put": 1, "put claim": 1, "delete": 2, "write check": 1}
	if fmt.Sprint(tally.calls) != fmt.Sprint(want) {
		t.Errorf("long recording: S3 calls %v, want %v", tally.calls, want)
	}
	if len(tally.gets) < 2 || tally.gets[0] != "bytes=0-1048575 " || !slices.Contains(tally.gets, `bytes=1048576- "`+etagOf(t, e, "long.wav")+`"`) {
		t.Errorf("GETs %q: want the first MiB, then the rest with If-Match", tally.gets)
	}
	obj, err := e.s3.GetObject(context.Background(), &s3.GetObjectInput{Bucket: aws.String(e.out), Key: aws.String(jsonKey(t, e, "long.wav"))})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(obj.Body)
	obj.Body.Close()
	// The fake model answers with each chunk's sample count: the whole
	// recording (both reads, joined) reached it.
	var tr contract.Transcript
	if err := json.Unmarshal(b, &tr); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range strings.Fields(tr.Text) {
		if n, err := strconv.Atoi(f); err == nil {
			total += n
		}
	}
	if total != 70*16000 || tr.DurationSec != 70 {
		t.Errorf("the model saw %d samples (%v s), want all %d", total, tr.DurationSec, 70*16000)
	}
}

func etagOf(t *testing.T, e *env, key string) string {
	t.Helper()
	h, err := e.s3.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(e.in), Key: aws.String(key)})
	if err != nil {
		t.Fatal(err)
	}
	return strings.Trim(aws.ToString(h.ETag), `"`)
}

func jsonKey(t *testing.T, e *env, key string) string {
	t.Helper()
	res, err := e.s3.ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(e.out), Prefix: aws.String("transcripts/" + e.in + "/" + contract.EscapeKey(key) + "/")})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range res.Contents {
		if k := aws.ToString(o.Key); strings.HasSuffix(k, ".json") && !strings.HasSuffix(k, ".error.json") {
			return k
		}
	}
	t.Fatalf("no transcript for %s", key)
	return ""
}

// A message whose records name one object over and over (a producer's
// loop) reads and writes it once, as a message naming it once would; a
// second object in it still runs.
func TestRepeatedRecordsRunOnce(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("same.wav", tone(16000, 16000))
	e.put("other.wav", tone(16000, 16000))
	keys := []string{"other.wav"}
	for range 300 {
		keys = append(keys, "same.wav")
	}
	e.send(s3Event(e.in, keys...))
	cfg := e.config()
	cfg.Claims.MinAudio = time.Minute
	tally := &tallyS3{S3API: e.s3}
	e.runS3(cfg, tally)
	for _, k := range []string{"same.wav", "other.wav"} {
		if out := e.outputs(k); out["json"] == nil {
			t.Errorf("%s: no transcript", k)
		}
	}
	want := map[string]int{"get": 2, "head": 2, "put": 2, "delete": 2, "write check": 1}
	if fmt.Sprint(tally.calls) != fmt.Sprint(want) {
		t.Errorf("S3 calls %v, want %v (each object once)", tally.calls, want)
	}
	if got := metricValue(t, e.wreg, "fleetscribe_duplicate_records_total", nil, 0); got != 299 {
		t.Errorf("duplicate records counted %v, want 299", got)
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("the message is still queued (%d)", v+f)
	}
}
