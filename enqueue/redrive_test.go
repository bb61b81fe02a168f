package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/fleetscribe/fleetscribe/contract"
)

// dlqWorld is a queue whose DLQ holds jobs, each with an error record of
// a chosen class (or none) where the worker writes it.
type dlqWorld struct {
	*world
	in, out string
	q       struct{ URL, DLQURL string }
	class   map[string]string // key → error class ("" none)
}

func newDLQ(t *testing.T, newWorld func(*testing.T) *world, n int) *dlqWorld {
	w := newWorld(t)
	d := &dlqWorld{world: w, in: w.bucket(), out: w.bucket(), class: map[string]string{}}
	q := w.queue()
	d.q.URL, d.q.DLQURL = q.URL, q.DLQURL
	var entries []types.SendMessageBatchRequestEntry
	for i := range n {
		k := fmt.Sprintf("calls/%03d.wav", i)
		w.put(d.in, k)
		class := []string{contract.ClassExhausted, contract.ClassCorruptAudio, ""}[i%3]
		d.class[k] = class
		if class != "" {
			h, err := w.s3.HeadObject(context.Background(), &s3.HeadObjectInput{Bucket: aws.String(d.in), Key: aws.String(k)})
			if err != nil {
				t.Fatal(err)
			}
			ref := contract.InputRef{Bucket: d.in, Key: k, ETag: strings.Trim(aws.ToString(h.ETag), `"`)}
			msg := "triton: partition unavailable"
			if i%2 == 0 {
				msg = "s3: SlowDown"
			}
			rec, _ := json.Marshal(contract.ErrorRecord{Schema: contract.ErrorSchema, Input: ref, Model: "asr", Class: class, Message: msg})
			w.putBody(d.out, contract.KeysFor("transcripts/", ref, "asr").Error, rec)
		}
		body, _ := contract.Job{Bucket: d.in, Key: k}.Encode()
		entries = append(entries, types.SendMessageBatchRequestEntry{
			Id: aws.String(fmt.Sprint(len(entries))), MessageBody: aws.String(string(body)),
			MessageAttributes: map[string]types.MessageAttributeValue{"origin": {DataType: aws.String("String"), StringValue: aws.String("test")}},
		})
		if len(entries) == 10 || i == n-1 {
			if _, err := w.sqs.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: aws.String(d.q.DLQURL), Entries: entries}); err != nil {
				t.Fatal(err)
			}
			entries = nil
		}
	}
	return d
}

func (d *dlqWorld) opts() RedriveOptions {
	return RedriveOptions{
		DLQURL: d.q.DLQURL, ToURL: d.q.URL, OutputBucket: d.out, WorkerOutputPrefix: "transcripts/", WorkerModel: "asr",
		Hold: 30 * time.Second, Log: func(m string, err error) { d.t.Logf("log: %s: %v", m, err) },
	}
}

// drainKeys returns key → count of a queue's jobs.
func (d *dlqWorld) drainKeys(url string) map[string]int {
	got := map[string]int{}
	for bk, n := range d.drain(url) {
		got[strings.TrimPrefix(bk, d.in+"/")] += n
	}
	return got
}

func TestRedriveSelectsByErrorRecord(t *testing.T) {
	onServers(t, map[string]func(*testing.T) *world{"fauxqs": newWorld, "elasticmq": newMoveTaskWorld}, testRedriveSelectsByErrorRecord)
}

func testRedriveSelectsByErrorRecord(t *testing.T, newWorld func(*testing.T) *world) {
	d := newDLQ(t, newWorld, 30)
	o := d.opts()
	o.Classes = []string{contract.ClassExhausted, ClassNone}
	o.Match = regexp.MustCompile(`unavailable|^$`)
	sum, err := Redrive(context.Background(), d.sqs, d.s3, o)
	if err != nil {
		t.Fatal(err)
	}
	var moved, left []string
	for k, c := range d.class {
		// ClassNone has no record, so its text is "" (matches ^$).
		if c == "" || c == contract.ClassExhausted && strings.Contains(recordText(k), "unavailable") {
			moved = append(moved, k)
		} else {
			left = append(left, k)
		}
	}
	if sum.Moved != len(moved) || sum.Examined != 30 || sum.Held != len(left) {
		t.Errorf("%s; want %d moved", sum, len(moved))
	}
	// Attributes travel with the message.
	out, err := d.sqs.ReceiveMessage(context.Background(), &sqs.ReceiveMessageInput{QueueUrl: aws.String(d.q.URL), MaxNumberOfMessages: 1, MessageAttributeNames: []string{"All"}})
	if err != nil || len(out.Messages) != 1 || aws.ToString(out.Messages[0].MessageAttributes["origin"].StringValue) != "test" {
		t.Fatalf("moved message lost its attributes: %+v %v", out, err)
	}
	if _, err := d.sqs.ChangeMessageVisibility(context.Background(), &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(d.q.URL), ReceiptHandle: out.Messages[0].ReceiptHandle, VisibilityTimeout: 0}); err != nil {
		t.Fatal(err)
	}
	got, rest := d.drainKeys(d.q.URL), d.drainKeys(d.q.DLQURL)
	for _, k := range moved {
		if got[k] != 1 || rest[k] != 0 {
			t.Errorf("%s (%q): %d in the queue, %d in the DLQ; want moved", k, d.class[k], got[k], rest[k])
		}
	}
	for _, k := range left {
		if got[k] != 0 || rest[k] != 1 {
			t.Errorf("%s (%q): %d in the queue, %d in the DLQ; want left, visible again", k, d.class[k], got[k], rest[k])
		}
	}
}

// recordText is the error text newDLQ gave key's record.
func recordText(k string) string {
	var i int
	_, _ = fmt.Sscanf(strings.TrimPrefix(k, "calls/"), "%03d.wav", &i)
	if i%2 == 0 {
		return "s3: SlowDown"
	}
	return "triton: partition unavailable"
}

// cutSQS stops the run at a random call of any kind: the context is
// cancelled before the call, as Ctrl-C would.
type cutSQS struct {
	RedriveSQS
	at     int64
	n      atomic.Int64
	cancel context.CancelFunc
}

func (c *cutSQS) tick() {
	if c.n.Add(1) == c.at {
		c.cancel()
	}
}

func (c *cutSQS) ReceiveMessage(ctx context.Context, in *sqs.ReceiveMessageInput, o ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error) {
	c.tick()
	return c.RedriveSQS.ReceiveMessage(ctx, in, o...)
}

func (c *cutSQS) SendMessageBatch(ctx context.Context, in *sqs.SendMessageBatchInput, o ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	c.tick()
	return c.RedriveSQS.SendMessageBatch(ctx, in, o...)
}

func (c *cutSQS) DeleteMessageBatch(ctx context.Context, in *sqs.DeleteMessageBatchInput, o ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error) {
	c.tick()
	return c.RedriveSQS.DeleteMessageBatch(ctx, in, o...)
}

// A redrive interrupted at any call and run again loses nothing: every
// message ends in the source queue, none stays in the DLQ, and a message
// is in the source queue twice only if its delete was cut off after its
// send (counted; none here, since the delete of a sent batch completes).
func TestRedriveInterruptedLosesNothing(t *testing.T) {
	onServers(t, map[string]func(*testing.T) *world{"fauxqs": newWorld, "elasticmq": newMoveTaskWorld}, testRedriveInterruptedLosesNothing)
}

func testRedriveInterruptedLosesNothing(t *testing.T, newWorld func(*testing.T) *world) {
	for trial := range 4 {
		d := newDLQ(t, newWorld, 35)
		ctx, cancel := context.WithCancel(context.Background())
		c := &cutSQS{RedriveSQS: d.sqs, at: 1 + rand.Int64N(10), cancel: cancel}
		o := d.opts()
		o.Manual = true
		first, err := Redrive(ctx, c, d.s3, o)
		cancel()
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		second, err := Redrive(context.Background(), d.sqs, d.s3, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("trial %d: cut at call %d: %s; then %s", trial, c.at, first, second)
		got, rest := d.drainKeys(d.q.URL), d.drainKeys(d.q.DLQURL)
		if len(rest) != 0 {
			t.Errorf("left in the DLQ: %v", rest)
		}
		for k := range d.class {
			if got[k] != 1 {
				t.Errorf("%s is %d times in the queue", k, got[k])
			}
		}
		if first.Moved+second.Moved != 35 || first.DeleteFailed+second.DeleteFailed != 0 {
			t.Errorf("moved %d + %d", first.Moved, second.Moved)
		}
	}
}

// moveTaskSQS offers StartMessageMoveTask, as SQS does for a DLQ with SQS
// sources, and reports a task that runs, then completes.
type moveTaskSQS struct {
	RedriveSQS
	started *sqs.StartMessageMoveTaskInput
	polls   int
}

func (m *moveTaskSQS) StartMessageMoveTask(_ context.Context, in *sqs.StartMessageMoveTaskInput, _ ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error) {
	m.started = in
	return &sqs.StartMessageMoveTaskOutput{TaskHandle: aws.String("h")}, nil
}

func (m *moveTaskSQS) ListMessageMoveTasks(context.Context, *sqs.ListMessageMoveTasksInput, ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error) {
	m.polls++
	st, moved := "RUNNING", int64(10)
	if m.polls == 3 {
		st, moved = "COMPLETED", 30
	}
	return &sqs.ListMessageMoveTasksOutput{Results: []types.ListMessageMoveTasksResultEntry{{Status: aws.String(st), ApproximateNumberOfMessagesMoved: moved, ApproximateNumberOfMessagesToMove: aws.Int64(30)}}}, nil
}

func TestRedriveUsesMoveTaskWhereOffered(t *testing.T) {
	onServers(t, map[string]func(*testing.T) *world{"fauxqs": newWorld, "elasticmq": newMoveTaskWorld}, testRedriveUsesMoveTaskWhereOffered)
}

func testRedriveUsesMoveTaskWhereOffered(t *testing.T, newWorld func(*testing.T) *world) {
	d := newDLQ(t, newWorld, 3)
	m := &moveTaskSQS{RedriveSQS: d.sqs}
	o := d.opts()
	o.PollEvery = time.Millisecond
	sum, err := Redrive(context.Background(), m, d.s3, o)
	if err != nil || !sum.MoveTask || sum.Moved != 30 || m.polls != 3 {
		t.Fatalf("%s: %v (polls %d)", sum, err, m.polls)
	}
	if !strings.HasSuffix(aws.ToString(m.started.SourceArn), "-dlq") || strings.HasSuffix(aws.ToString(m.started.DestinationArn), "-dlq") {
		t.Errorf("task from %s to %s", aws.ToString(m.started.SourceArn), aws.ToString(m.started.DestinationArn))
	}
	// A server that runs move tasks (ElasticMQ, as SQS) moves them by a
	// task; the fast emulator answers InvalidAction, and the same call
	// falls back to moving messages one by one.
	sum, err = Redrive(context.Background(), d.sqs, d.s3, o)
	if err != nil || sum.MoveTask != d.moveTasks || sum.Moved != 3 {
		t.Fatalf("move task offered %v: %s: %v", d.moveTasks, sum, err)
	}
	if got := d.drainKeys(d.q.URL); len(got) != 3 {
		t.Errorf("moved %v", got)
	}
}
