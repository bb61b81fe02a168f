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

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
)

var (
	emuOnce sync.Once
	emu     *localaws.Server
	emuErr  error
	names   atomic.Int64

	// The servers that do what the fast emulator does not (see
	// lab/servers/localaws): moto for S3's conditional writes and byte-order
	// listings, ElasticMQ for SQS move tasks. Started once, by the first
	// test that needs them.
	motoOnce, emqOnce sync.Once
	moto, emq         *localaws.Server
	motoErr, emqErr   error
)

func TestMain(m *testing.M) {
	code := m.Run()
	for _, s := range []*localaws.Server{emu, moto, emq} {
		if s != nil {
			s.Stop()
		}
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
	t         *testing.T
	sqs       *sqs.Client
	s3        *s3.Client
	end       string
	moveTasks bool // its SQS runs message move tasks
	byteOrder bool // its S3 lists in byte order
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

// second starts (once) a server of the package, skipping the test where it
// is not installed unless FLEETSCRIBE_REQUIRE_MOTO=1 (make test).
func second(t *testing.T, once *sync.Once, srv **localaws.Server, errp *error, start func(context.Context) (*localaws.Server, error), installed func() error) *localaws.Server {
	t.Helper()
	if err := installed(); err != nil {
		if os.Getenv(localaws.RequireMotoEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	once.Do(func() { *srv, *errp = start(context.Background()) })
	if *errp != nil {
		t.Fatal(*errp)
	}
	return *srv
}

// newMotoWorld is a world on moto, whose S3 writes conditionally and lists
// in byte order as S3 does.
func newMotoWorld(t *testing.T) *world {
	t.Helper()
	m := second(t, &motoOnce, &moto, &motoErr, localaws.StartMoto, func() error { _, err := localaws.MotoBin(); return err })
	sqsc, s3c := m.Clients()
	return &world{t: t, sqs: sqsc, s3: s3c, end: m.Endpoint, byteOrder: true}
}

// newMoveTaskWorld is a world whose SQS is ElasticMQ, which runs message
// move tasks as SQS does, and whose S3 is moto's.
func newMoveTaskWorld(t *testing.T) *world {
	t.Helper()
	w := newMotoWorld(t)
	e := second(t, &emqOnce, &emq, &emqErr, localaws.StartElasticMQ, func() error { _, err := localaws.ElasticMQLib(); return err })
	w.sqs, _ = e.Clients()
	w.moveTasks = true
	return w
}

// onServers runs test once on each local AWS the package's claim, resume
// and redrive paths are checked on: the fast emulator, and the server that
// does what it lacks.
func onServers(t *testing.T, worlds map[string]func(*testing.T) *world, test func(t *testing.T, newWorld func(*testing.T) *world)) {
	for _, name := range []string{"fauxqs", "moto", "elasticmq"} {
		if nw, ok := worlds[name]; ok {
			t.Run(name, func(t *testing.T) { test(t, nw) })
		}
	}
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
		ref := contract.InputRef{Bucket: bucket, Key: k, ETag: strings.Trim(aws.ToString(h.ETag), `"`)}
		w.putBody(out, contract.KeysFor(prefix, ref, model).JSON, []byte("{}"))
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
			jobs, err := contract.ParseMessage([]byte(aws.ToString(m.Body)))
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
