package enqueue

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"go.uber.org/goleak"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/internal/leaktest"
	"github.com/fleetscribe/fleetscribe/internal/localaws"
	"github.com/fleetscribe/fleetscribe/worker"
)

var (
	emuOnce sync.Once
	emu     *localaws.Server
	emuErr  error
	names   atomic.Int64
)

func TestMain(m *testing.M) {
	code := m.Run()
	if emu != nil {
		emu.Stop()
	}
	if code == 0 {
		if err := goleak.Find(leaktest.Ignore()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// world is the local emulator with clients, shared by the tests of this
// package; each test uses buckets and queues of its own.
type world struct {
	t   *testing.T
	sqs *sqs.Client
	s3  *s3.Client
	end string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	emuOnce.Do(func() { emu, emuErr = localaws.Start(context.Background()) })
	if emuErr != nil {
		t.Fatal(emuErr)
	}
	sqsc, s3c := emu.Clients()
	return &world{t: t, sqs: sqsc, s3: s3c, end: emu.Endpoint}
}

// name returns a fresh bucket or queue name.
func (w *world) name(base string) string {
	return fmt.Sprintf("%s-%d", base, names.Add(1))
}

func (w *world) bucket() string {
	w.t.Helper()
	b := w.name("b")
	if err := localaws.CreateBucket(context.Background(), w.s3, b); err != nil {
		w.t.Fatal(err)
	}
	return b
}

func (w *world) queue() localaws.Queue {
	w.t.Helper()
	q, err := localaws.CreateQueue(context.Background(), w.sqs, w.name("q"), 3, 30*time.Second)
	if err != nil {
		w.t.Fatal(err)
	}
	return q
}

// put writes objects with bodies of the given sizes (1 byte by default).
func (w *world) put(bucket string, keys ...string) {
	w.t.Helper()
	g, ctx := errgroup.WithContext(context.Background())
	g.SetLimit(32)
	for _, k := range keys {
		g.Go(func() error {
			_, err := w.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Body: strings.NewReader("x")})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) putBody(bucket, key string, body []byte) {
	w.t.Helper()
	if _, err := w.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: strings.NewReader(string(body))}); err != nil {
		w.t.Fatal(err)
	}
}

// markDone writes a transcript where the worker would for bucket/key and
// model, under prefix in out.
func (w *world) markDone(out, prefix, model, bucket string, keys ...string) {
	w.t.Helper()
	for _, k := range keys {
		h, err := w.s3.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
		if err != nil {
			w.t.Fatal(err)
		}
		ref := worker.InputRef{Bucket: bucket, Key: k, ETag: strings.Trim(aws.ToString(h.ETag), `"`)}
		w.putBody(out, worker.KeysFor(prefix, ref, model).JSON, []byte("{}"))
	}
}

// drain receives and deletes every message of a queue and returns the
// jobs, "bucket/key" → times received.
func (w *world) drain(url string) map[string]int {
	w.t.Helper()
	ctx := context.Background()
	got := map[string]int{}
	for empty := 0; empty < 2; {
		out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, WaitTimeSeconds: 0, VisibilityTimeout: 60})
		if err != nil {
			w.t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		for _, m := range out.Messages {
			jobs, err := worker.ParseMessage([]byte(aws.ToString(m.Body)))
			if err != nil {
				w.t.Fatalf("message %q: %v", aws.ToString(m.Body), err)
			}
			for _, j := range jobs {
				got[j.Bucket+"/"+j.Key]++
			}
			if _, err := w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
				w.t.Fatal(err)
			}
		}
	}
	return got
}

// opts returns options for sending to q with quiet output.
func (w *world) opts(q string) Options {
	o := Defaults()
	o.QueueURL = q
	o.Sleep = func(context.Context, time.Duration) error { return nil }
	o.Log = func(msg string, err error) { w.t.Logf("log: %s: %v", msg, err) }
	return o
}

// want builds the expected "bucket/key" set.
func want(bucket string, keys ...string) map[string]int {
	m := map[string]int{}
	for _, k := range keys {
		m[bucket+"/"+k] = 1
	}
	return m
}

func sameJobs(t *testing.T, got, want map[string]int) {
	t.Helper()
	for k, n := range got {
		if want[k] != n {
			t.Errorf("%s received %d times, want %d", k, n, want[k])
		}
	}
	for k, n := range want {
		if got[k] == 0 {
			t.Errorf("%s not received (want %d)", k, n)
		}
	}
}
