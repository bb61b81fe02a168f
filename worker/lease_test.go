package worker

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// batchSQS records the batch calls of the deleter and the heartbeat, and
// fails the receipts in fail.
type batchSQS struct {
	SQSAPI // the other calls are not made here
	mu     sync.Mutex
	calls  []string // "delete n" or "extend n vis"
	fail   map[string]bool
	down   bool // every call fails
}

func (s *batchSQS) DeleteMessageBatch(_ context.Context, in *sqs.DeleteMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "delete "+strconv.Itoa(len(in.Entries)))
	out := &sqs.DeleteMessageBatchOutput{}
	for _, e := range in.Entries {
		if s.fail[aws.ToString(e.ReceiptHandle)] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("gone")})
		}
	}
	return out, nil
}

func (s *batchSQS) ChangeMessageVisibilityBatch(_ context.Context, in *sqs.ChangeMessageVisibilityBatchInput, _ ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, "extend "+strconv.Itoa(len(in.Entries))+" "+strconv.Itoa(int(in.Entries[0].VisibilityTimeout)))
	if s.down {
		return nil, errors.New("sqs unreachable")
	}
	out := &sqs.ChangeMessageVisibilityBatchOutput{}
	for _, e := range in.Entries {
		if s.fail[aws.ToString(e.ReceiptHandle)] {
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("ReceiptHandleIsInvalid"), Message: aws.String("gone")})
		}
	}
	return out, nil
}

func (s *batchSQS) set(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f()
}

func (s *batchSQS) took() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls...)
}

// Deletes go out ten to a call at once when ten are waiting, the rest
// when the oldest has waited the interval; each Delete gets its own
// entry's result. Under synctest the interval passes in no time, and
// "nothing more was sent" is a fact, not a sleep.
func TestDeleterBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &batchSQS{fail: map[string]bool{"r7": true}}
		d := newDeleter(api, 50*time.Millisecond, newMetrics(prometheus.NewRegistry()))
		ctx, stop := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() { d.run(ctx); close(done) }()
		q := &queue{url: "q"}
		errs := make([]error, 25)
		var wg sync.WaitGroup
		for i := range 25 {
			wg.Go(func() { errs[i] = d.Delete(ctx, lease{q: q, id: strconv.Itoa(i), receipt: "r" + strconv.Itoa(i)}) })
		}
		synctest.Wait()
		if got := api.took(); len(got) != 2 || got[0] != "delete 10" || got[1] != "delete 10" {
			t.Fatalf("before the interval: %v, want two full batches", got)
		}
		time.Sleep(50 * time.Millisecond)
		wg.Wait()
		if got := api.took(); len(got) != 3 || got[2] != "delete 5" {
			t.Fatalf("after the interval: %v, want the last 5 in one call", got)
		}
		for i, err := range errs {
			if (err != nil) != (i == 7) {
				t.Errorf("delete %d: %v", i, err)
			}
		}
		stop()
		<-done
		// After the deleter stopped, a delete goes out on its own.
		if err := d.Delete(t.Context(), lease{q: q, id: "late", receipt: "late"}); err != nil {
			t.Fatal(err)
		}
		if got := api.took(); len(got) != 4 || got[3] != "delete 1" {
			t.Fatalf("after stop: %v", got)
		}
	})
}

// Every interval the heartbeat extends every message in hand, ten per call
// and queue, to the visibility timeout. A message SQS refuses is given up
// at once (its job cancelled: another worker may have it); a failed call
// is retried while the message is surely still hidden, and given up once
// the next tick would come too late.
func TestHeartbeatExtendsAndGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		api := &batchSQS{fail: map[string]bool{}}
		h := &heartbeat{sqs: api, visibility: 30 * time.Second, interval: 10 * time.Second, log: zerolog.New(io.Discard),
			m: newMetrics(prometheus.NewRegistry()), now: time.Now, beats: map[string]*beat{}}
		q := &queue{url: "q"}
		var mu sync.Mutex
		causes := make([]error, 12)
		cause := func(i int) error {
			mu.Lock()
			defer mu.Unlock()
			return causes[i]
		}
		for i := range 12 {
			h.add(lease{q: q, id: strconv.Itoa(i), receipt: "r" + strconv.Itoa(i)}, func(err error) {
				mu.Lock()
				defer mu.Unlock()
				causes[i] = err
			}, &progress{})
		}
		ctx, stop := context.WithCancel(t.Context())
		defer stop()
		go h.run(ctx)

		time.Sleep(10*time.Second + time.Millisecond)
		synctest.Wait()
		if got := api.took(); len(got) != 2 || got[0]+got[1] != "extend 10 30extend 2 30" && got[0]+got[1] != "extend 2 30extend 10 30" {
			t.Fatalf("first tick: %v, want 12 extended in calls of 10 and 2", got)
		}
		h.remove("11")
		api.set(func() { api.fail["r3"] = true })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if !errors.Is(cause(3), errHeartbeatLost) || len(api.took()) != 4 {
			t.Fatalf("refused message: cause %v, calls %v (want 11 extended in 2)", cause(3), api.took())
		}
		for i := range 12 {
			if c := cause(i); i != 3 && c != nil {
				t.Errorf("message %d cancelled: %v", i, c)
			}
		}
		// SQS unreachable: the next tick still falls inside the visibility
		// timeout (last extended 10 s ago, 30 s timeout), so keep trying;
		// the one after would not, so give up on every message.
		api.set(func() { api.down = true })
		time.Sleep(10 * time.Second)
		synctest.Wait()
		if c := cause(0); c != nil {
			t.Fatalf("gave up after one failed call with 20 s of visibility left: %v", c)
		}
		time.Sleep(10 * time.Second)
		synctest.Wait()
		for i := range 11 {
			if c := cause(i); !errors.Is(c, errHeartbeatLost) {
				t.Errorf("message %d after two failed calls: cause %v, want the heartbeat lost", i, c)
			}
		}
	})
}
