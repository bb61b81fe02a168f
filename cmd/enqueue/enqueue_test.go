package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/fleetscribe/fleetscribe/internal/localaws"
	"github.com/fleetscribe/fleetscribe/worker"
)

// flakySQS fails chosen entries a number of times, and whole calls once.
type flakySQS struct {
	failEntry map[string]int // body → remaining failures
	senderBad map[string]bool
	failCall  int
	calls     [][]string
	sent      []string
}

func (f *flakySQS) SendMessageBatch(_ context.Context, in *sqs.SendMessageBatchInput, _ ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error) {
	var bodies []string
	for _, e := range in.Entries {
		bodies = append(bodies, aws.ToString(e.MessageBody))
	}
	f.calls = append(f.calls, bodies)
	if f.failCall > 0 {
		f.failCall--
		return nil, fmt.Errorf("connection reset")
	}
	out := &sqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		b := aws.ToString(e.MessageBody)
		switch {
		case f.senderBad[b]:
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidMessageContents"), SenderFault: true})
		case f.failEntry[b] > 0:
			f.failEntry[b]--
			out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InternalError")})
		default:
			f.sent = append(f.sent, b)
			out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
		}
	}
	return out, nil
}

func body(t *testing.T, key string) string {
	b, err := worker.Job{Bucket: "in", Key: key}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func noSleep(context.Context, time.Duration) error { return nil }

func TestBatchesOfTenAndEntryRetries(t *testing.T) {
	var keys []string
	for i := range 23 {
		keys = append(keys, fmt.Sprintf("k%02d.wav", i))
	}
	f := &flakySQS{
		failEntry: map[string]int{body(t, "k03.wav"): 2, body(t, "k15.wav"): 1},
		senderBad: map[string]bool{body(t, "k20.wav"): true},
		failCall:  1,
	}
	e := &Enqueuer{SQS: f, Opts: Options{QueueURL: "q", Bucket: "in", Attempts: 4}, Log: io.Discard, Sleep: noSleep}
	st, err := e.Run(context.Background(), SliceKeys(keys))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range f.calls {
		if len(c) > 10 {
			t.Errorf("call %d sent %d entries", i, len(c))
		}
	}
	if st.Sent != 22 || st.Failed != 1 || len(f.sent) != 22 {
		t.Errorf("stats %+v, sent %d; want 22 sent and the sender-fault entry failed", st, len(f.sent))
	}
	seen := map[string]bool{}
	for _, b := range f.sent {
		if seen[b] {
			t.Errorf("sent twice: %s", b)
		}
		seen[b] = true
	}
	if !seen[body(t, "k03.wav")] || !seen[body(t, "k15.wav")] {
		t.Error("retried entries were not sent")
	}
	// First batch: one failed call, then 10 entries with k03 failing twice.
	if len(f.calls[0]) != 10 || len(f.calls[1]) != 10 || len(f.calls[2]) != 1 || len(f.calls[3]) != 1 {
		t.Errorf("unexpected call shapes: %v", f.calls)
	}
}

func TestGivesUpAfterAttempts(t *testing.T) {
	f := &flakySQS{failEntry: map[string]int{body(t, "a.wav"): 100}}
	e := &Enqueuer{SQS: f, Opts: Options{QueueURL: "q", Bucket: "in", Attempts: 3}, Log: io.Discard, Sleep: noSleep}
	st, err := e.Run(context.Background(), SliceKeys([]string{"a.wav", "b.wav"}))
	if err != nil || st.Sent != 1 || st.Failed != 1 || len(f.calls) != 3 {
		t.Fatalf("stats %+v err %v calls %d", st, err, len(f.calls))
	}
}

func TestBackfillPrefixAgainstEmulator(t *testing.T) {
	ctx := context.Background()
	emu, err := localaws.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Stop()
	sqsc, s3c := emu.Clients()
	q, err := emu.Provision(ctx, "backfill", 3, "archive")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for i := range 25 {
		key := fmt.Sprintf("2025/%02d.wav", i)
		want[key] = true
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("archive"), Key: aws.String(key), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range []string{"2025/notes.txt", "2024/00.wav"} {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("archive"), Key: aws.String(k), Body: strings.NewReader("x")}); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{"-aws-endpoint", emu.Endpoint, "-queue-url", q.URL, "-bucket", "archive",
		"-prefix", "2025/", "-suffix", ".wav", "-job-formats", "srt,vtt", "-job-model", "asr"}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), "enqueued 25 jobs in 3 batch calls") {
		t.Errorf("summary: %q", stdout.String())
	}
	for len(want) > 0 {
		out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.URL), MaxNumberOfMessages: 10, WaitTimeSeconds: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			t.Fatalf("queue ran dry; missing %v", want)
		}
		for _, m := range out.Messages {
			jobs, err := worker.ParseMessage([]byte(aws.ToString(m.Body)))
			if err != nil || len(jobs) != 1 {
				t.Fatalf("message %q: %v", aws.ToString(m.Body), err)
			}
			j := jobs[0]
			if !want[j.Key] || j.Bucket != "archive" || j.Model != "asr" || strings.Join(j.Formats, ",") != "srt,vtt" {
				b, _ := json.Marshal(j)
				t.Fatalf("unexpected job %s", b)
			}
			delete(want, j.Key)
		}
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-bucket", "b", "k"},
		{"-queue-url", "q", "-bucket", "b"},
		{"-queue-url", "q", "-bucket", "b", "-prefix", "p/", "k"},
	} {
		if err := run(context.Background(), args, io.Discard, io.Discard); err == nil {
			t.Errorf("%v: want an error", args)
		}
	}
}
