package enqueue

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// deletingSQS deletes messages from the queue while Status samples it,
// the second time it reads the queue.
type deletingSQS struct {
	StatusSQS
	w      *world
	url    string
	reads  int
	remove int
}

func (d *deletingSQS) GetQueueAttributes(ctx context.Context, in *sqs.GetQueueAttributesInput, o ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error) {
	if aws.ToString(in.QueueUrl) == d.url {
		d.reads++
		if d.reads == 2 {
			for n := 0; n < d.remove; {
				out, err := d.w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: in.QueueUrl, MaxNumberOfMessages: int32(min(10, d.remove-n))})
				if err != nil {
					return nil, err
				}
				for _, m := range out.Messages {
					if _, err := d.w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: in.QueueUrl, ReceiptHandle: m.ReceiptHandle}); err != nil {
						return nil, err
					}
					n++
				}
			}
		}
	}
	return d.StatusSQS.GetQueueAttributes(ctx, in, o...)
}

func sendN(t *testing.T, w *world, url string, n int, delay int32) {
	t.Helper()
	for i := 0; i < n; i += 10 {
		var e []types.SendMessageBatchRequestEntry
		for j := i; j < min(n, i+10); j++ {
			e = append(e, types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String("{}"), DelaySeconds: delay})
		}
		if _, err := w.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: e}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestStatusShowsQueuesDLQsDrainAndETA(t *testing.T) {
	w := newWorld(t)
	q := w.queue()
	sendN(t, w, q.URL, 40, 0)
	sendN(t, w, q.URL, 5, 600)
	sendN(t, w, q.DLQURL, 3, 0)
	if _, err := w.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 4}); err != nil {
		t.Fatal(err)
	}
	api := &deletingSQS{StatusSQS: w.sqs, w: w, url: q.URL, remove: 10}
	age := func(_ context.Context, name string) (time.Duration, bool) {
		return 90 * time.Second, !strings.HasSuffix(name, "-dlq")
	}
	qs, err := Status(context.Background(), api, []string{q.URL}, 200*time.Millisecond, age)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 2 || qs[1].URL != q.DLQURL || !qs[1].DLQ {
		t.Fatalf("queues %+v", qs)
	}
	main, dlq := qs[0], qs[1]
	if main.Visible != 26 || main.InFlight != 4 || main.Delayed != 5 || dlq.Visible != 3 {
		t.Errorf("counts: %+v / %+v", main, dlq)
	}
	if main.DrainPerSec <= 0 || main.ETA <= 0 || dlq.ETA != -1 || main.Oldest != 90*time.Second || dlq.Oldest != -1 {
		t.Errorf("rate and eta: %+v / %+v", main, dlq)
	}
	// 10 of 45 gone in about 0.2 s: 35 left at ~50/s is about 0.7 s.
	if main.ETA > 2*time.Second {
		t.Errorf("eta %s", main.ETA)
	}
	var buf bytes.Buffer
	if err := WriteStatus(&buf, qs); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, s := range []string{"VISIBLE", "IN FLIGHT", "DELAYED", "OLDEST", "ETA", "1m30s", "dlq " + dlq.Name} {
		if !strings.Contains(out, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
	t.Logf("\n%s", out)
}
