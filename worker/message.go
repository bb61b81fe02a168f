package worker

import (
	"context"
	"encoding/json"
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

	// Each job runs under its own -job-timeout (runJob); the message's
	// context ends only with a lost heartbeat or the drain deadline, so a
	// job waiting for a bucket that is down keeps its message in hand.
	mctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	l := lease{q: q, id: id, receipt: aws.ToString(msg.ReceiptHandle)}
	d := &delivery{id: id, body: aws.ToString(msg.Body), attempt: attempt, priority: q.priority, queue: q.rank, prog: &progress{start: w.now()}}
	hb.add(l, cancel, d.prog)

	outcome, err := w.runMessage(mctx, log, d)
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
	case errors.Is(context.Cause(mctx), errHeartbeatLost):
		outcome = MessageReleased
		log.Warn().Err(err).Msg("message abandoned: heartbeat lost")
	case errors.Is(context.Cause(mctx), errDrainTimeout):
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

// delivery is one receipt of a message: what its jobs share.
type delivery struct {
	id       string // message id
	body     string
	attempt  int
	priority uint64 // the Triton priority of its queue's chunks
	queue    int    // its queue's rank (0: -queue-url): whose defaults its jobs take
	prog     *progress
	records  int // records in the message, jobs or not
}

// rejectionKey is where the error record of record i goes when the
// message, not the input, is at fault (not a job, or refused by policy):
// named by the message, never beside the input's outputs.
func (d *delivery) rejectionKey(prefix string, i int) string {
	if d.records <= 1 {
		return contract.InvalidMessageKey(prefix, d.id)
	}
	return contract.RejectedRecordKey(prefix, d.id, i)
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
	// held counts the message's jobs waiting for a dependency that is
	// down: a drain releases such a message at once (it cannot progress).
	held atomic.Int32
}

// runMessage takes every job of a message to its own terminal outcome. It
// returns the outcome and nil when the message can be deleted (every job
// has a transcript or an error record, or needs none), or MessageRetry and
// the first retryable error (handle then decides between a retry and a
// release): never a deleting outcome beside an error. Jobs
// already done on an earlier delivery are skipped, so a retried message
// redoes no finished work. A record that is not a job gets its own error
// record; the others run.
func (w *Worker) runMessage(ctx context.Context, log zerolog.Logger, d *delivery) (outcome string, err error) {
	defer func() {
		if r := recover(); r != nil {
			outcome, err = MessageRetry, recoverError(r)
		}
	}()
	records, err := contract.ParseRecords([]byte(d.body))
	if err != nil {
		err = Permanent(contract.ClassBadMessage, err)
		// There is no input to put the record beside, so it goes under
		// the output prefix by message id and keeps the body: nothing is
		// lost, and the body is never logged.
		log.Warn().Int("body_bytes", len(d.body)).Err(err).Msg("unparseable message")
		if err := w.recordRejected(ctx, d, contract.InvalidMessageKey(w.cfg.Outputs.Prefix, d.id), err); err != nil {
			return MessageRetry, err
		}
		return MessageInvalid, nil
	}
	if len(records) == 0 {
		return MessageIgnored, nil
	}
	d.records = len(records)
	var retryErr error
	// A record that repeats an earlier one of the message (the same
	// object and options: a producer's loop, a replayed batch) is that
	// job again: it runs once, and the message's outcome is its.
	seen := make(map[string]bool, len(records))
	for i, rec := range records {
		if rec.Err == nil && len(records) > 1 {
			b, _ := json.Marshal(rec.Job)
			if seen[string(b)] {
				w.m.duplicateRecords.Inc()
				continue
			}
			seen[string(b)] = true
		}
		jlog := log
		if len(records) > 1 {
			jlog = jlog.With().Int("record", i).Logger()
		}
		if rec.Err != nil {
			err := Permanent(contract.ClassBadMessage, rec.Err)
			jlog.Warn().Err(err).Msg("record is not a job; the message's other records run")
			w.m.jobs.WithLabelValues(OutcomeFailed).Inc()
			err = w.recordRejected(ctx, d, d.rejectionKey(w.cfg.Outputs.Prefix, i), err)
			if err != nil && retryErr == nil {
				retryErr = fmt.Errorf("record %d of %d: %w", i+1, len(records), err)
			}
			continue
		}
		jlog = jlog.With().Str("bucket", rec.Job.Bucket).Str("key", rec.Job.Key).Logger()
		if err := w.runJob(ctx, jlog, d, i, rec.Job); err != nil && retryErr == nil {
			retryErr = fmt.Errorf("record %d of %d: %w", i+1, len(records), err)
		}
		if ctx.Err() != nil {
			break // shutdown or heartbeat loss: the rest waits for the redelivery
		}
	}
	if retryErr == nil && ctx.Err() != nil {
		retryErr = context.Cause(ctx)
	}
	if retryErr != nil {
		return MessageRetry, retryErr
	}
	return MessageDeleted, nil
}

// newRecord is every error record the worker writes, before what its
// writer adds (the input, the message): class and message, the worker's
// model, d's attempt, now.
func (w *Worker) newRecord(d *delivery, class, message string) contract.ErrorRecord {
	return contract.ErrorRecord{
		Schema: contract.ErrorSchema, Model: w.model, Class: class, Message: message,
		Attempt: d.attempt, CreatedAt: w.now().UTC(),
	}
}

// recordRejected writes the error record of a message, or of one of its
// records, that the worker refuses: at key (named by the message), with
// the message's id and body, so nothing is lost. A failed write leaves the
// message for redelivery.
func (w *Worker) recordRejected(ctx context.Context, d *delivery, key string, err error) error {
	w.m.errors.WithLabelValues(ErrorClass(err)).Inc()
	rec := w.newRecord(d, ErrorClass(err), err.Error())
	rec.Final, rec.MessageID, rec.MessageBody = true, d.id, d.body
	return w.untilWritten(ctx, ctx, d, func(ctx context.Context) error { return w.out.errorRecord(ctx, key, rec) })
}
