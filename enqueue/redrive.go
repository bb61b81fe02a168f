package enqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/backoff"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
)

// RedriveSQS is the SQS calls Redrive makes.
type RedriveSQS interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
	DeleteMessageBatch(ctx context.Context, params *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, params *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	ListDeadLetterSourceQueues(ctx context.Context, params *sqs.ListDeadLetterSourceQueuesInput, optFns ...func(*sqs.Options)) (*sqs.ListDeadLetterSourceQueuesOutput, error)
	StartMessageMoveTask(ctx context.Context, params *sqs.StartMessageMoveTaskInput, optFns ...func(*sqs.Options)) (*sqs.StartMessageMoveTaskOutput, error)
	ListMessageMoveTasks(ctx context.Context, params *sqs.ListMessageMoveTasksInput, optFns ...func(*sqs.Options)) (*sqs.ListMessageMoveTasksOutput, error)
}

// RecordS3 is the S3 calls that read a job's error record.
type RecordS3 interface {
	HeadObject(ctx context.Context, params *s3.HeadObjectInput, optFns ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, params *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
}

// ClassNone selects dead-lettered messages that have no error record.
const ClassNone = "none"

// RedriveOptions configure a Redrive.
type RedriveOptions struct {
	DLQURL string
	ToURL  string // empty: the DLQ's one source queue
	// Select by error record: its error_class is one of Classes (ClassNone
	// for a message without a record) and its error matches Match. With
	// neither, every message moves, by StartMessageMoveTask where SQS
	// offers it.
	Classes            []string
	Match              *regexp.Regexp
	OutputBucket       string // where the worker writes error records
	WorkerOutputPrefix string
	WorkerModel        string

	Max         int           // messages to move; 0: all
	Hold        time.Duration // messages that do not match stay hidden this long, then reappear in the DLQ
	Manual      bool          // receive, send, delete even when StartMessageMoveTask is offered
	DryRun      bool          // report what would move; move nothing
	PollEvery   time.Duration // move task progress polls
	Log         func(msg string, err error)
	ReportTo    io.Writer
	EmptyPolls  int // consecutive empty receives that end the run
	WaitSeconds int32
}

// RedriveSummary counts what a redrive did.
type RedriveSummary struct {
	Examined, Moved, Held, Failed int
	// DeleteFailed counts messages sent to the source queue whose delete
	// from the DLQ failed: they are in both queues (the worker's
	// idempotent outputs make the second copy cost a HeadObject).
	DeleteFailed int
	MoveTask     bool // moved by StartMessageMoveTask
}

func (s RedriveSummary) String() string {
	how := "receive, send, delete"
	if s.MoveTask {
		how = "SQS message move task"
	}
	return fmt.Sprintf("examined %d, moved %d, left in the DLQ %d, failed %d, delete failed after send %d (%s)",
		s.Examined, s.Moved, s.Held, s.Failed, s.DeleteFailed, how)
}

// Redrive moves dead-lettered messages back to their source queue. A
// message is deleted from the DLQ only after the source queue accepted
// it, so an interrupted redrive loses nothing: at worst a message is in
// both queues. Messages that do not match the selection are hidden for
// Hold and released at the end.
func Redrive(ctx context.Context, sqsc RedriveSQS, s3c RecordS3, o RedriveOptions) (RedriveSummary, error) {
	var sum RedriveSummary
	if o.DLQURL == "" {
		return sum, errors.New("a DLQ URL is required")
	}
	if (len(o.Classes) > 0 || o.Match != nil) && o.OutputBucket == "" {
		return sum, errors.New("selecting by error record needs -output-bucket (the worker's)")
	}
	if o.Log == nil {
		o.Log = func(string, error) {}
	}
	if o.EmptyPolls <= 0 {
		o.EmptyPolls = 2
	}
	if o.Hold <= 0 {
		o.Hold = 15 * time.Minute
	}
	if o.PollEvery <= 0 {
		o.PollEvery = 2 * time.Second
	}
	if o.ToURL == "" {
		src, err := sqsc.ListDeadLetterSourceQueues(ctx, &sqs.ListDeadLetterSourceQueuesInput{QueueUrl: aws.String(o.DLQURL)})
		if err != nil {
			return sum, fmt.Errorf("find the DLQ's source queue (or give -to): %w", err)
		}
		if len(src.QueueUrls) != 1 {
			return sum, fmt.Errorf("the DLQ has %d source queues; give -to", len(src.QueueUrls))
		}
		o.ToURL = src.QueueUrls[0]
	}
	if !o.Manual && !o.DryRun && len(o.Classes) == 0 && o.Match == nil && o.Max == 0 {
		ok, err := moveTask(ctx, sqsc, o, &sum)
		if ok || err != nil {
			return sum, err
		}
	}
	return sum, redriveManual(ctx, sqsc, s3c, o, &sum)
}

// moveTask moves every message with StartMessageMoveTask and follows it
// to the end. It returns false when SQS does not offer it here.
func moveTask(ctx context.Context, sqsc RedriveSQS, o RedriveOptions, sum *RedriveSummary) (bool, error) {
	arn := func(url string) (string, error) {
		out, err := sqsc.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn}})
		if err != nil {
			return "", fmt.Errorf("queue arn of %s: %w", url, err)
		}
		return out.Attributes[string(types.QueueAttributeNameQueueArn)], nil
	}
	src, err := arn(o.DLQURL)
	if err != nil {
		return false, err
	}
	dst, err := arn(o.ToURL)
	if err != nil {
		return false, err
	}
	if _, err := sqsc.StartMessageMoveTask(ctx, &sqs.StartMessageMoveTaskInput{SourceArn: aws.String(src), DestinationArn: aws.String(dst)}); err != nil {
		var ae smithy.APIError
		if errors.As(err, &ae) && slices.Contains([]string{"InvalidAction", "UnsupportedOperation", "AWS.SimpleQueueService.UnsupportedOperation"}, ae.ErrorCode()) {
			o.Log("StartMessageMoveTask is not available; moving messages one by one", err)
			return false, nil
		}
		return false, fmt.Errorf("start message move task: %w", err)
	}
	sum.MoveTask = true
	for {
		out, err := sqsc.ListMessageMoveTasks(ctx, &sqs.ListMessageMoveTasksInput{SourceArn: aws.String(src), MaxResults: aws.Int32(1)})
		if err != nil {
			return true, fmt.Errorf("follow message move task (it goes on in SQS): %w", err)
		}
		if len(out.Results) > 0 {
			t := out.Results[0]
			sum.Moved = int(t.ApproximateNumberOfMessagesMoved)
			switch aws.ToString(t.Status) {
			case "COMPLETED":
				return true, nil
			case "FAILED", "CANCELLED":
				return true, fmt.Errorf("message move task %s: %s", strings.ToLower(aws.ToString(t.Status)), aws.ToString(t.FailureReason))
			}
			if o.ReportTo != nil {
				fmt.Fprintf(o.ReportTo, "move task: %d of %d moved\n", t.ApproximateNumberOfMessagesMoved, aws.ToInt64(t.ApproximateNumberOfMessagesToMove))
			}
		}
		if err := backoff.Sleep(ctx, o.PollEvery); err != nil {
			return true, fmt.Errorf("stopped following the message move task (it goes on in SQS): %w", err)
		}
	}
}

// redriveManual receives from the DLQ, sends matching messages to the
// source queue and deletes them from the DLQ only once sent.
func redriveManual(ctx context.Context, sqsc RedriveSQS, s3c RecordS3, o RedriveOptions, sum *RedriveSummary) error {
	var held []string // receipt handles of messages left in the DLQ
	// Whatever happens, messages left alone become visible again now.
	defer func() {
		if n := releaseMessages(context.WithoutCancel(ctx), sqsc, o.DLQURL, held); n > 0 {
			o.Log(fmt.Sprintf("%d messages could not be released; they reappear in the DLQ after -hold", n), nil)
		}
	}()
	empty := 0
	for empty < o.EmptyPolls && (o.Max == 0 || sum.Moved < o.Max) {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		want := int32(10)
		if o.Max > 0 {
			want = int32(min(10, o.Max-sum.Moved))
		}
		out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
			QueueUrl: aws.String(o.DLQURL), MaxNumberOfMessages: want, WaitTimeSeconds: o.WaitSeconds,
			VisibilityTimeout: int32(o.Hold / time.Second), MessageAttributeNames: []string{"All"},
		})
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			return fmt.Errorf("receive from the DLQ: %w", err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		empty = 0
		var move []types.Message
		for _, m := range out.Messages {
			sum.Examined++
			ok, err := selected(ctx, s3c, o, m)
			switch {
			case err != nil:
				o.Log("cannot read the error record of a dead-lettered message; leaving it", err)
				fallthrough
			case !ok || o.DryRun:
				if ok && o.DryRun {
					sum.Moved++ // would move
				} else {
					sum.Held++
				}
				held = append(held, aws.ToString(m.ReceiptHandle))
			default:
				move = append(move, m)
			}
		}
		if len(move) > 0 {
			moved, kept := moveBatch(context.WithoutCancel(ctx), sqsc, o, move, sum)
			sum.Moved += moved
			held = append(held, kept...)
		}
	}
	return nil
}

// moveBatch sends up to ten messages to the source queue and deletes the
// ones it accepted from the DLQ. It returns how many moved and the
// receipt handles of those that stay.
func moveBatch(ctx context.Context, sqsc RedriveSQS, o RedriveOptions, msgs []types.Message, sum *RedriveSummary) (int, []string) {
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: m.Body, MessageAttributes: m.MessageAttributes}
	}
	out, err := sqsc.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(o.ToURL), Entries: entries})
	var kept []string
	if err != nil {
		o.Log("send to the source queue failed; the messages stay in the DLQ", err)
		sum.Failed += len(msgs)
		for _, m := range msgs {
			kept = append(kept, aws.ToString(m.ReceiptHandle))
		}
		return 0, kept
	}
	for _, f := range out.Failed {
		if i, err := strconv.Atoi(aws.ToString(f.Id)); err == nil && i >= 0 && i < len(msgs) {
			sum.Failed++
			kept = append(kept, aws.ToString(msgs[i].ReceiptHandle))
			o.Log("source queue refused a message; it stays in the DLQ", fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	var del []types.DeleteMessageBatchRequestEntry
	for _, s := range out.Successful {
		if i, err := strconv.Atoi(aws.ToString(s.Id)); err == nil && i >= 0 && i < len(msgs) {
			del = append(del, types.DeleteMessageBatchRequestEntry{Id: s.Id, ReceiptHandle: msgs[i].ReceiptHandle})
		}
	}
	if len(del) == 0 {
		return 0, kept
	}
	dout, err := sqsc.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(o.DLQURL), Entries: del})
	switch {
	case err != nil:
		sum.DeleteFailed += len(del)
		o.Log("messages were sent but not deleted from the DLQ; they are in both queues", err)
	case len(dout.Failed) > 0:
		sum.DeleteFailed += len(dout.Failed)
		o.Log(fmt.Sprintf("%d messages were sent but not deleted from the DLQ; they are in both queues", len(dout.Failed)), nil)
	}
	return len(del), kept
}

// releaseMessages makes held messages visible again; it returns how many
// could not be released.
func releaseMessages(ctx context.Context, sqsc RedriveSQS, url string, handles []string) int {
	failed := 0
	for len(handles) > 0 {
		n := min(10, len(handles))
		var e []types.ChangeMessageVisibilityBatchRequestEntry
		for i, h := range handles[:n] {
			e = append(e, types.ChangeMessageVisibilityBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h), VisibilityTimeout: 0})
		}
		handles = handles[n:]
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		out, err := sqsc.ChangeMessageVisibilityBatch(cctx, &sqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(url), Entries: e})
		cancel()
		if err != nil {
			failed += n
			continue
		}
		failed += len(out.Failed)
	}
	return failed
}

// selected reports whether a dead-lettered message matches the class and
// pattern selection, by the error records of its jobs.
func selected(ctx context.Context, s3c RecordS3, o RedriveOptions, m types.Message) (bool, error) {
	if len(o.Classes) == 0 && o.Match == nil {
		return true, nil
	}
	jobs, err := contract.ParseMessage([]byte(aws.ToString(m.Body)))
	if err != nil {
		return matchRecord(o, nil), nil
	}
	for _, j := range jobs {
		rec, err := errorRecord(ctx, s3c, o, j)
		if err != nil {
			return false, err
		}
		if matchRecord(o, rec) {
			return true, nil
		}
	}
	return false, nil
}

func matchRecord(o RedriveOptions, rec *contract.ErrorRecord) bool {
	class := ClassNone
	text := ""
	if rec != nil {
		class, text = rec.Class, rec.Message
	}
	if len(o.Classes) > 0 && !slices.Contains(o.Classes, class) {
		return false
	}
	return o.Match == nil || o.Match.MatchString(text)
}

// errorRecord reads the error record of a job, where the worker wrote it
// (KeysFor of the input's current ETag or version); nil when there is none.
func errorRecord(ctx context.Context, s3c RecordS3, o RedriveOptions, j contract.Job) (*contract.ErrorRecord, error) {
	in := contract.InputRef{Bucket: j.Bucket, Key: j.Key, VersionID: j.VersionID, ETag: j.ETag}
	if in.VersionID == "" {
		h, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(j.Bucket), Key: aws.String(j.Key)})
		if err != nil {
			if s3errs.NotFound(err) {
				return nil, nil // input gone: the worker can only record missing_object
			}
			return nil, fmt.Errorf("head input: %w", err)
		}
		in.ETag, in.VersionID = strings.Trim(aws.ToString(h.ETag), `"`), aws.ToString(h.VersionId)
	}
	keys := contract.KeysFor(firstNonEmpty(j.OutputPrefix, o.WorkerOutputPrefix), in, firstNonEmpty(j.Model, o.WorkerModel))
	obj, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(o.OutputBucket), Key: aws.String(keys.Error)})
	if err != nil {
		if s3errs.NotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get error record: %w", err)
	}
	defer obj.Body.Close()
	var rec contract.ErrorRecord
	if err := json.NewDecoder(io.LimitReader(obj.Body, 1<<20)).Decode(&rec); err != nil {
		return nil, fmt.Errorf("error record %s: %w", keys.Error, err)
	}
	return &rec, nil
}
