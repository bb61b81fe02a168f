package enqueue

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// interruptingSQS passes calls to the queue until call number at, where
// it stops the run: cancel (Ctrl-C), or crash (the checkpoint as it is on
// disk at that instant is saved, and nothing after it counts).
type interruptingSQS struct {
	SQSAPI
	at      int64
	calls   atomic.Int64
	cancel  context.CancelFunc
	crash   func()
	stopped atomic.Bool
}

func (s *interruptingSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	if n := s.calls.Add(1); n == s.at {
		s.stopped.Store(true)
		if s.crash != nil {
			s.crash()
		}
		s.cancel()
	}
	if s.stopped.Load() && s.crash != nil {
		return nil, errors.New("process killed")
	}
	return s.SQSAPI.SendMessageBatch(ctx, in, o...)
}

// archive puts n keys under several prefixes, some filtered out. On a
// server that lists in byte order as S3 does, some keys start with upper
// case, '_' or a non-ASCII letter, whose byte order differs from a
// locale's: resuming after the last key sent is right only in byte order.
func archive(w *world, b string, n int) (all, wanted []string) {
	for i := range n {
		k := fmt.Sprintf("day-%d/rec-%04d.wav", i%5, i)
		if w.byteOrder {
			k = fmt.Sprintf("day-%d/%s%04d.wav", i%5, []string{"rec-", "Rec-", "_rec-", "été-", "REC-", "rec_", "Été-"}[i%7], i)
		}
		if i%17 == 0 {
			k = strings.TrimSuffix(k, ".wav") + ".txt"
		} else {
			wanted = append(wanted, k)
		}
		all = append(all, k)
	}
	w.put(b, all...)
	return all, wanted
}

// Interrupted at a random point, by Ctrl-C with calls in flight or by a
// crash that loses everything not yet on disk, and run again with the
// same checkpoint: every key is sent exactly once across both runs, with
// listing in parallel over sub-prefixes.
func TestResumeAfterInterruptionSendsEachKeyOnce(t *testing.T) {
	onServers(t, map[string]func(*testing.T) *world{"fauxqs": newWorld, "moto": newMotoWorld}, testResumeAfterInterruptionSendsEachKeyOnce)
}

func testResumeAfterInterruptionSendsEachKeyOnce(t *testing.T, newWorld func(*testing.T) *world) {
	w := newWorld(t)
	b, q := w.bucket(), w.queue()
	n := 1200
	if w.byteOrder {
		n = 300 // moto is slower; the mixed keys are what it is here for
	}
	_, wanted := archive(w, b, n)
	for trial := range 6 {
		crash := trial%2 == 1
		t.Run(fmt.Sprintf("trial%d-crash=%v", trial, crash), func(t *testing.T) {
			path := t.TempDir() + "/ckpt"
			o := w.opts(q.URL)
			o.Sources = Sources{Bucket: b, Prefixes: []string{"day-"}}
			o.Filter.Suffixes = []string{".wav"}
			o.ListConcurrency, o.ListDepth, o.SendConcurrency = 3, 1, 4
			o.Checkpoint = path
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := &interruptingSQS{SQSAPI: w.sqs, at: 2 + rand.Int64N(int64(n/12)), cancel: cancel} // before the last of about n/10 calls
			if crash {
				// One call at a time, so the saved journal holds every call
				// that returned before the crash.
				o.SendConcurrency = 1
				s.crash = func() { copyFile(t, path, path+".crash") }
			}
			first, err := Run(ctx, w.s3, s, o)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("first run: %v", err)
			}
			if crash {
				if err := os.Rename(path+".crash", path); err != nil {
					t.Fatal(err)
				}
			}
			second, err := Run(context.Background(), w.s3, w.sqs, o)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("stopped at call %d; first run %s; second run %s", s.at, first, second)
			if first.Sent+second.Sent != int64(len(wanted)) {
				t.Errorf("sent %d + %d, want %d", first.Sent, second.Sent, len(wanted))
			}
			sameJobs(t, w.drain(q.URL), want(b, wanted...))
			// Once complete, a third run sends nothing.
			third, err := Run(context.Background(), w.s3, w.sqs, o)
			if err != nil || third.Sent != 0 {
				t.Errorf("third run: %s, %v", third, err)
			}
		})
	}
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	if err != nil {
		t.Error(err)
		return
	}
	if err := os.WriteFile(to, b, 0o600); err != nil {
		t.Error(err)
	}
}

// A checkpoint of other options is refused rather than misapplied.
func TestCheckpointOfAnotherRunIsRefused(t *testing.T) {
	onServers(t, map[string]func(*testing.T) *world{"fauxqs": newWorld, "moto": newMotoWorld}, testCheckpointOfAnotherRunIsRefused)
}

func testCheckpointOfAnotherRunIsRefused(t *testing.T, newWorld func(*testing.T) *world) {
	w := newWorld(t)
	b, q := w.bucket(), w.queue()
	w.put(b, "a.wav")
	o := w.opts(q.URL)
	o.Sources = Sources{Bucket: b, Keys: []string{"a.wav"}}
	o.Checkpoint = t.TempDir() + "/ckpt"
	if _, err := Run(context.Background(), w.s3, w.sqs, o); err != nil {
		t.Fatal(err)
	}
	o.Job.Model = "other"
	if _, err := Run(context.Background(), w.s3, w.sqs, o); err == nil || !strings.Contains(err.Error(), "other sources, filters, queue or job options") {
		t.Errorf("err = %v", err)
	}
	w.drain(q.URL)
}

// flakySQS fails chosen entries a number of times (or always), and the
// first failCalls whole calls.
type flakySQS struct {
	SQSAPI
	mu        sync.Mutex
	failEntry map[string]int // key → failures left (-1: always)
	senderBad map[string]bool
	failCalls int
	calls     [][]string
}

func keyOf(body string) string {
	i := strings.Index(body, `"key":"`)
	rest := body[i+7:]
	return rest[:strings.IndexByte(rest, '"')]
}

func (f *flakySQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	var keys []string
	for _, e := range in.Entries {
		keys = append(keys, keyOf(aws.ToString(e.MessageBody)))
	}
	f.calls = append(f.calls, keys)
	if f.failCalls > 0 {
		f.failCalls--
		f.mu.Unlock()
		return nil, errors.New("connection reset by peer")
	}
	out := &sqs.SendMessageBatchOutput{}
	var pass []types.SendMessageBatchRequestEntry
	for i, e := range in.Entries {
		k := keys[i]
		switch {
		case f.senderBad[k]:
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), Message: aws.String("refused"), SenderFault: true})
		case f.failEntry[k] != 0:
			if f.failEntry[k] > 0 {
				f.failEntry[k]--
			}
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError"), Message: aws.String("try again")})
		default:
			pass = append(pass, e)
		}
	}
	f.mu.Unlock()
	if len(pass) > 0 {
		res, err := f.SQSAPI.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: in.QueueUrl, Entries: pass})
		if err != nil {
			return nil, err
		}
		out.Successful = append(out.Successful, res.Successful...)
		out.Failed = append(out.Failed, res.Failed...)
	}
	return out, nil
}

// Only the entries the queue refused are sent again, with backoff; an
// entry that keeps failing, and one refused as the sender's fault, count
// as failed, make the run fail, and are sent by the next run with the
// same checkpoint, without resending anything else.
func TestEntryFailuresRetriedAndResumed(t *testing.T) {
	onServers(t, map[string]func(*testing.T) *world{"fauxqs": newWorld, "moto": newMotoWorld}, testEntryFailuresRetriedAndResumed)
}

func testEntryFailuresRetriedAndResumed(t *testing.T, newWorld func(*testing.T) *world) {
	w := newWorld(t)
	b, q := w.bucket(), w.queue()
	var keys []string
	for i := range 45 {
		keys = append(keys, fmt.Sprintf("k%02d.wav", i))
	}
	w.put(b, keys...)
	f := &flakySQS{SQSAPI: w.sqs, failCalls: 1,
		failEntry: map[string]int{"k03.wav": 2, "k15.wav": 1, "k30.wav": -1},
		senderBad: map[string]bool{"k20.wav": true}}
	o := w.opts(q.URL)
	o.Sources = Sources{Bucket: b, Keys: keys}
	o.Attempts, o.SendConcurrency = 4, 1
	o.Checkpoint = t.TempDir() + "/ckpt"
	sum, err := Run(context.Background(), w.s3, f, o)
	if !errors.Is(err, ErrFailed) || sum.Failed != 2 || sum.Sent != 43 {
		t.Fatalf("%s: %v", sum, err)
	}
	for i, c := range f.calls {
		if len(c) > 10 {
			t.Errorf("call %d sent %d entries", i, len(c))
		}
	}
	// The first call failed whole and was retried; then only refused
	// entries went again, alone.
	if len(f.calls[0]) != 10 || strings.Join(f.calls[1], ",") != strings.Join(f.calls[0], ",") || strings.Join(f.calls[2], ",") != "k03.wav" || strings.Join(f.calls[3], ",") != "k03.wav" {
		t.Errorf("call shapes: %v", f.calls[:4])
	}
	got := w.drain(q.URL)
	delete(f.failEntry, "k30.wav")
	delete(f.senderBad, "k20.wav")
	f.calls = nil
	sum, err = Run(context.Background(), w.s3, f, o)
	if err != nil || sum.Sent != 2 || len(f.calls) != 1 {
		t.Fatalf("resumed: %s: %v (calls %v)", sum, err, f.calls)
	}
	for k, n := range w.drain(q.URL) {
		got[k] += n
	}
	sameJobs(t, got, want(b, keys...))
}
