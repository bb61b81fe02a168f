package enqueue

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/time/rate"
)

// acceptAll accepts every entry and records each call's entry count and bytes.
type acceptAll struct {
	mu    sync.Mutex
	calls [][2]int
}

func (a *acceptAll) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	out := &sqs.SendMessageBatchOutput{}
	n := 0
	for _, e := range in.Entries {
		n += len(*e.MessageBody)
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	a.mu.Lock()
	a.calls = append(a.calls, [2]int{len(in.Entries), n})
	a.mu.Unlock()
	return out, nil
}

func testSender(api SQSAPI) *sender {
	tr, _ := openTracker("", "fp")
	return &sender{sqs: api, queueURL: "q", concurrency: 2, attempts: 3, linger: 5 * time.Millisecond,
		sleep: func(context.Context, time.Duration) error { return nil }, track: tr, stats: &Counters{}, log: func(string, error) {}}
}

func feed(n int, body string) <-chan outgoing {
	ch := make(chan outgoing, n)
	for i := range n {
		ch <- outgoing{ref: itemRef{stream: "s", seq: int64(i)}, body: body}
	}
	close(ch)
	return ch
}

// A batch never passes ten entries or 256 KiB of bodies.
func TestBatchesStayWithinSQSLimits(t *testing.T) {
	api := &acceptAll{}
	s := testSender(api)
	for i := range 25 {
		s.track.add("s", rowPos(int64(i)))
	}
	if err := s.run(context.Background(), feed(25, strings.Repeat("x", 100<<10))); err != nil {
		t.Fatal(err)
	}
	sent := 0
	for _, c := range api.calls {
		if c[0] > 10 || c[1] > 256<<10 {
			t.Errorf("a call with %d entries, %d bytes", c[0], c[1])
		}
		sent += c[0]
	}
	if sent != 25 || len(api.calls) != 13 {
		t.Errorf("%d sent in %d calls; 100 KiB bodies go two to a call", sent, len(api.calls))
	}
	api.calls = nil
	s = testSender(api)
	for i := range 95 {
		s.track.add("s", rowPos(int64(i)))
	}
	if err := s.run(context.Background(), feed(95, "{}")); err != nil {
		t.Fatal(err)
	}
	if len(api.calls) != 10 {
		t.Errorf("95 small messages in %d calls, want 10", len(api.calls))
	}
}

// The rate limit holds: 120 messages at 300 per second take at least the
// 0.37 s the limit allows after its first batch.
func TestRateLimit(t *testing.T) {
	api := &acceptAll{}
	s := testSender(api)
	s.limiter = rate.NewLimiter(300, maxBatchEntries)
	for i := range 120 {
		s.track.add("s", rowPos(int64(i)))
	}
	start := time.Now()
	if err := s.run(context.Background(), feed(120, "{}")); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 360*time.Millisecond {
		t.Errorf("120 messages at 300/s took %s", d)
	}
}
