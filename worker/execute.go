package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
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
	jctx, cancelTimeout := context.WithTimeoutCause(jctx, w.cfg.JobTimeout, errors.New("job timeout"))
	defer cancelTimeout()
	l := lease{q: q, id: id, receipt: aws.ToString(msg.ReceiptHandle)}
	prog := &progress{start: w.now()}
	hb.add(l, cancel, prog)
	jctx = withJob(jctx, q.priority, prog)

	outcome, err := w.runMessage(jctx, log, msg, attempt)
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
		log.Warn().Err(err).Dur("retry_in", backoff).Bool("last_attempt", attempt >= w.cfg.MaxReceives).Msg("message will be retried")
		w.setVisibility(fctx, log, q, msg, backoff)
	}
	w.m.messages.WithLabelValues(outcome).Inc()
	log.Info().Str("outcome", outcome).Dur("took", w.now().Sub(start)).Msg("message done")
}

func (w *Worker) retryBackoff(attempt int) time.Duration {
	return backoff.Delay(w.cfg.RetryBackoff, 15*time.Minute, attempt)
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

type jobKey struct{}

type jobValues struct {
	priority uint64
	prog     *progress
}

// withJob puts the queue's Triton priority and the job's progress in ctx.
func withJob(ctx context.Context, priority uint64, prog *progress) context.Context {
	return context.WithValue(ctx, jobKey{}, jobValues{priority, prog})
}

func jobFrom(ctx context.Context) jobValues {
	v, _ := ctx.Value(jobKey{}).(jobValues)
	if v.prog == nil {
		v.prog = &progress{}
	}
	return v
}

// runMessage takes every job of a message to its own terminal outcome. It
// returns nil when the message can be deleted (every job has a transcript
// or an error record, or needs none), or the first retryable error. Jobs
// already done on an earlier delivery are skipped, so a retried message
// redoes no finished work.
func (w *Worker) runMessage(ctx context.Context, log zerolog.Logger, msg types.Message, attempt int) (outcome string, err error) {
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
		if err := w.runJob(ctx, jlog, aws.ToString(msg.MessageId), job, attempt); err != nil && retryErr == nil {
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

// runJob processes one job to an outcome. It returns nil when the job is
// terminal (transcript written, error record written, already done or
// taken by another message), and a retryable error otherwise. On the last
// receive a retryable failure is recorded too (final=false), and the
// queue's redrive policy moves the message to the DLQ.
func (w *Worker) runJob(ctx context.Context, log zerolog.Logger, msgID string, job contract.Job, attempt int) (err error) {
	start := w.now()
	in := contract.InputRef{Bucket: job.Bucket, Key: job.Key, ETag: job.ETag, VersionID: job.VersionID}
	model, prefix := w.model, w.cfg.OutputPrefix
	var outcome string
	defer func() {
		if r := recover(); r != nil {
			outcome, err = OutcomeRetry, recoverError(r)
			log.Error().Err(err).Msg("job panicked")
		}
		w.m.jobs.WithLabelValues(outcome).Inc()
		w.m.duration.WithLabelValues(outcome).Observe(w.now().Sub(start).Seconds())
		log.Info().Str("outcome", outcome).Dur("took", w.now().Sub(start)).Msg("job done")
	}()

	var keys contract.OutputKeys
	err = w.admitJob(job)
	if err == nil {
		if job.Model != "" {
			model = job.Model
		}
		if job.OutputPrefix != "" {
			prefix = job.OutputPrefix
		}
		outcome, keys, err = w.process(ctx, log, msgID, job, &in, prefix, model, attempt)
	}
	if err == nil {
		return nil
	}
	class := ErrorClass(err)
	final := class != ""
	if !final {
		w.m.errors.WithLabelValues("retryable").Inc()
	}
	if cause := context.Cause(ctx); !final && (errors.Is(cause, errHeartbeatLost) || errors.Is(cause, errDrainTimeout)) {
		outcome = OutcomeReleased // shutdown or heartbeat loss, not the job's fault
		return err
	}
	if !final && attempt < w.cfg.MaxReceives {
		outcome = OutcomeRetry
		log.Warn().Err(err).Msg("job failed; will retry")
		return err
	}
	if keys.JSON == "" {
		keys = contract.KeysFor(prefix, in, model)
	}
	if class == "" {
		class = contract.ClassExhausted
	}
	w.m.errors.WithLabelValues(class).Inc()
	rec := contract.ErrorRecord{
		Schema: contract.ErrorSchema, Input: in, Model: model, Class: class, Message: err.Error(),
		Attempt: attempt, Final: final, CreatedAt: w.now().UTC(),
	}
	werr := w.writeErrorRecord(ctx, keys.Error, rec)
	if ErrorClass(werr) == contract.ClassOutputRejected {
		// S3 refused the record's key itself: put it where any key fits.
		fallback := contract.UnwritableRecordKey(prefix, keys)
		log.Warn().Err(werr).Str("error_key", fallback).Msg("error record refused by S3; writing it under _unwritable")
		keys.Error = fallback
		werr = w.writeErrorRecord(ctx, fallback, rec)
	}
	if werr != nil {
		// Without its record the failure would be silent: retry instead.
		outcome = OutcomeRetry
		return fmt.Errorf("%w (job error: %v)", werr, err) //nolint:errorlint // flattened: must not match as permanent
	}
	outcome = OutcomeFailed
	log.Warn().Str("error_class", class).Bool("final", final).Str("error_key", keys.Error).Err(err).Msg("job failed; error record written")
	if final {
		return nil
	}
	return err
}

// admitJob applies the input and output policy to a job from the queue:
// anyone who can send to the queue could otherwise make the worker read
// any bucket its role reaches or write anywhere in the output bucket.
func (w *Worker) admitJob(job contract.Job) error {
	if !w.cfg.InputAllowed(job.Bucket, job.Key) {
		return Permanentf(contract.ClassBadMessage, "input s3://%s/%s is outside the allowed input buckets and prefixes", job.Bucket, job.Key)
	}
	if job.OutputPrefix != "" {
		if err := contract.CheckOutputPrefix(job.OutputPrefix); err != nil {
			return Permanent(contract.ClassBadMessage, err)
		}
		if !w.cfg.OutputPrefixAllowed(job.OutputPrefix) {
			return Permanentf(contract.ClassBadMessage, "output prefix %q is not under an allowed output prefix", job.OutputPrefix)
		}
	}
	if job.Model != "" && job.Model != w.model && !slices.Contains(w.cfg.Models, job.Model) {
		return Permanentf(contract.ClassBadMessage, "job asks for model %q; this worker serves %s", job.Model, w.servedModels())
	}
	return nil
}

func (w *Worker) servedModels() string {
	s := strconv.Quote(w.model)
	for _, m := range w.cfg.Models {
		if m != w.model {
			s += ", " + strconv.Quote(m)
		}
	}
	return s
}

// writeErrorRecord writes rec at key, even after ctx is cancelled. A final
// record carries metadata so a redelivery can skip the job with one HEAD.
func (w *Worker) writeErrorRecord(ctx context.Context, key string, rec contract.ErrorRecord) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	meta := map[string]string{contract.MetaFinal: strconv.FormatBool(rec.Final)}
	if err := w.putJSON(wctx, key, rec, contract.ErrorRecordTag, meta); err != nil {
		return fmt.Errorf("write error record: %w", err)
	}
	return nil
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
	return w.writeErrorRecord(ctx, contract.InvalidMessageKey(w.cfg.OutputPrefix, aws.ToString(msg.MessageId)), rec)
}
