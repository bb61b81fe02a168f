package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// Message outcomes counted in fleetscribe_messages_total.
const (
	MessageDeleted  = "deleted"  // every job reached a terminal outcome
	MessageRetry    = "retry"    // a job failed retryably; the message comes back after a backoff
	MessageReleased = "released" // shutdown or lost heartbeat; returned to the queue
	MessageIgnored  = "ignored"  // an event that carries no work (test event, delete)
	MessageInvalid  = "invalid"  // not a job: recorded under _invalid-messages and deleted
)

// errPanic marks a recovered panic. It is retryable: a bug, not the input's fault.
var errPanic = errors.New("panic")

// recoverError turns a recovered panic value into an error with the stack.
func recoverError(r any) error {
	return fmt.Errorf("%w: %v\n%s", errPanic, r, debug.Stack())
}

// handle runs one message to its final action: delete, or leave it for
// redelivery with a backoff.
func (w *Worker) handle(ctx context.Context, hb *heartbeat, del *deleter, q *queue, msg types.Message) {
	start := w.now()
	id := aws.ToString(msg.MessageId)
	attempt, _ := strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	attempt = max(attempt, 1)
	log := w.log.With().Str("message_id", id).Int("attempt", attempt).Logger()
	w.m.inflight.Inc()
	defer w.m.inflight.Dec()
	w.inHand.Add(1)
	defer w.inHand.Add(-1)

	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jctx, cancelTimeout := context.WithTimeoutCause(jctx, w.cfg.Jobs.Timeout, errors.New("job timeout"))
	defer cancelTimeout()
	l := lease{q: q, id: id, receipt: aws.ToString(msg.ReceiptHandle)}
	prog := &progress{start: w.now()}
	hb.add(l, cancel, prog)

	outcome, err := w.runMessage(jctx, log, msg, attempt, q.priority, prog)
	// Stop extending before the final action: an extension racing the
	// delete would fail and be taken for a lost heartbeat.
	hb.remove(id)
	// The final action must happen even when shutdown cancelled the job.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer fcancel()
	switch {
	case err == nil:
		if derr := w.deleteMessage(fctx, del, l); derr != nil {
			// Outputs exist, so the redelivery is detected as a duplicate.
			log.Error().Err(derr).Msg("delete failed; a redelivery will find the jobs done")
		}
	case errors.Is(context.Cause(jctx), errHeartbeatLost):
		outcome = MessageReleased
		log.Warn().Err(err).Msg("message abandoned: heartbeat lost")
	case errors.Is(context.Cause(jctx), errDrainTimeout):
		outcome = MessageReleased
		w.setVisibility(fctx, log, q, msg, 0)
		log.Warn().Msg("message released to the queue at shutdown")
	default:
		outcome = MessageRetry
		backoff := w.retryBackoff(attempt)
		log.Warn().Err(err).Dur("retry_in", backoff).Bool("last_attempt", attempt >= w.cfg.Queues.MaxReceives).Msg("message will be retried")
		w.setVisibility(fctx, log, q, msg, backoff)
	}
	w.m.messages.WithLabelValues(outcome).Inc()
	log.Info().Str("outcome", outcome).Dur("took", w.now().Sub(start)).Msg("message done")
}

func (w *Worker) retryBackoff(attempt int) time.Duration {
	return backoff.Delay(w.cfg.Queues.RetryBackoff, 15*time.Minute, attempt)
}

// deleteMessage deletes through the batched deleter, trying three times.
func (w *Worker) deleteMessage(ctx context.Context, del *deleter, l lease) error {
	var err error
	for try := 0; try < 3; try++ {
		if err = del.Delete(ctx, l); err == nil {
			return nil
		}
		if backoff.Sleep(ctx, backoff.Delay(100*time.Millisecond, time.Second, try+1)) != nil {
			break
		}
	}
	return err
}

func (w *Worker) setVisibility(ctx context.Context, log zerolog.Logger, q *queue, msg types.Message, d time.Duration) {
	_, err := w.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(q.url), ReceiptHandle: msg.ReceiptHandle, VisibilityTimeout: int32(d / time.Second),
	})
	if err != nil {
		log.Warn().Err(err).Msg("change visibility failed; message returns after its visibility timeout")
	}
}

// progress is how far a job in hand has come, for deciding at an
// interruption whether it can finish by the deadline.
type progress struct {
	start       time.Time
	done, total atomic.Int64 // chunks
}

// runMessage takes every job of a message to its own terminal outcome. It
// returns nil when the message can be deleted (every job has a transcript
// or an error record, or needs none), or the first retryable error. Jobs
// already done on an earlier delivery are skipped, so a retried message
// redoes no finished work.
func (w *Worker) runMessage(ctx context.Context, log zerolog.Logger, msg types.Message, attempt int, priority uint64, prog *progress) (outcome string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = recoverError(r)
		}
	}()
	jobs, err := contract.ParseMessage([]byte(aws.ToString(msg.Body)))
	if err != nil {
		err = Permanent(contract.ClassBadMessage, err)
		// There is no input to put the record beside, so it goes under
		// the output prefix by message id and keeps the body: nothing is
		// lost, and the body is never logged.
		log.Warn().Int("body_bytes", len(aws.ToString(msg.Body))).Err(err).Msg("unparseable message")
		return MessageInvalid, w.recordInvalidMessage(ctx, msg, attempt, err)
	}
	if len(jobs) == 0 {
		return MessageIgnored, nil
	}
	var retryErr error
	for i, job := range jobs {
		jlog := log.With().Str("bucket", job.Bucket).Str("key", job.Key).Logger()
		if len(jobs) > 1 {
			jlog = jlog.With().Int("record", i).Logger()
		}
		if err := w.runJob(ctx, jlog, aws.ToString(msg.MessageId), job, attempt, priority, prog); err != nil && retryErr == nil {
			retryErr = fmt.Errorf("record %d of %d: %w", i+1, len(jobs), err)
		}
		if ctx.Err() != nil {
			break // shutdown or heartbeat loss: the rest waits for the redelivery
		}
	}
	if retryErr == nil && ctx.Err() != nil {
		retryErr = context.Cause(ctx)
	}
	return MessageDeleted, retryErr
}

// recordInvalidMessage writes the error record of a message that is not a
// job. A failed write leaves the message for redelivery.
func (w *Worker) recordInvalidMessage(ctx context.Context, msg types.Message, attempt int, err error) error {
	w.m.errors.WithLabelValues(ErrorClass(err)).Inc()
	rec := contract.ErrorRecord{
		Schema: contract.ErrorSchema, Model: w.model, Class: ErrorClass(err), Message: err.Error(),
		Attempt: attempt, Final: true, CreatedAt: w.now().UTC(),
		MessageID: aws.ToString(msg.MessageId), MessageBody: aws.ToString(msg.Body),
	}
	return w.out.errorRecord(ctx, contract.InvalidMessageKey(w.cfg.Outputs.Prefix, aws.ToString(msg.MessageId)), rec)
}
