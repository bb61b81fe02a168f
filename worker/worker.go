package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
	"github.com/fleetscribe/fleetscribe/triton"
)

// SQSAPI is the part of the SQS client the worker uses.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessage(ctx context.Context, params *sqs.DeleteMessageInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageOutput, error)
	ChangeMessageVisibility(ctx context.Context, params *sqs.ChangeMessageVisibilityInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityOutput, error)
	ChangeMessageVisibilityBatch(ctx context.Context, params *sqs.ChangeMessageVisibilityBatchInput, optFns ...func(*sqs.Options)) (*sqs.ChangeMessageVisibilityBatchOutput, error)
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
}

// S3API is the part of the S3 client the worker uses.
type S3API interface {
	HeadObject(ctx context.Context, params *s3.HeadObjectInput, optFns ...func(*s3.Options)) (*s3.HeadObjectOutput, error)
	GetObject(ctx context.Context, params *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	PutObject(ctx context.Context, params *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
}

// Transcriber turns 16 kHz mono samples into text. *triton.Pool is one.
// Errors wrapping triton.ErrRejected are permanent; all others are retried.
type Transcriber interface {
	Transcribe(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error)
}

// Worker drains one queue.
type Worker struct {
	cfg   Config
	model string
	sqs   SQSAPI
	s3    S3API
	tr    Transcriber
	log   zerolog.Logger
	m     *metrics
	now   func() time.Time
}

// New returns a worker for the model that tr serves. Metrics are
// registered on reg.
func New(cfg Config, model string, sqsc SQSAPI, s3c S3API, tr Transcriber, log zerolog.Logger, reg prometheus.Registerer) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if model == "" {
		return nil, errors.New("model name is required")
	}
	return &Worker{cfg: cfg, model: model, sqs: sqsc, s3: s3c, tr: tr, log: log, m: newMetrics(reg), now: time.Now}, nil
}

// Run receives and processes messages until ctx is cancelled (or, with
// ExitWhenIdle, until the queue has been quiet that long), then drains the
// jobs in hand. It returns nil after a clean drain.
func (w *Worker) Run(ctx context.Context) error {
	if err := w.checkQueue(ctx); err != nil {
		return err
	}
	// Jobs outlive ctx: cancelling ctx only stops receiving.
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	hb := &heartbeat{
		sqs: w.sqs, queueURL: w.cfg.QueueURL, visibility: w.cfg.VisibilityTimeout,
		interval: w.cfg.HeartbeatInterval, log: w.log, m: w.m, now: w.now, beats: map[string]*beat{},
	}
	hbCtx, stopHB := context.WithCancel(workCtx)
	var hbDone sync.WaitGroup
	hbDone.Go(func() { hb.run(hbCtx) })
	defer func() { stopHB(); hbDone.Wait() }()

	slots := make(chan struct{}, w.cfg.Concurrency) // one token per job in hand
	var jobs sync.WaitGroup
	lastActive := w.now()
	w.log.Info().Str("queue_url", w.cfg.QueueURL).Int("concurrency", w.cfg.Concurrency).Msg("worker started")

	reason := "shutdown requested"
receive:
	for {
		// Take a slot before fetching; then as many more as are free, up to 10.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			break receive
		}
		n := 1
	more:
		for n < 10 {
			select {
			case slots <- struct{}{}:
				n++
			default:
				break more
			}
		}
		msgs, err := w.receive(ctx, n)
		for range n - len(msgs) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				break receive
			}
			w.log.Error().Err(err).Msg("receive failed; backing off")
			if backoff.Sleep(ctx, time.Second) != nil {
				break receive
			}
			continue
		}
		switch {
		case len(msgs) > 0 || len(slots) > 0: // work arrived or is in hand
			lastActive = w.now()
		case w.cfg.ExitWhenIdle > 0 && w.now().Sub(lastActive) >= w.cfg.ExitWhenIdle:
			reason = "queue idle"
			break receive
		}
		for _, msg := range msgs {
			jobs.Go(func() {
				defer func() { <-slots }()
				w.handle(workCtx, hb, msg)
			})
		}
	}

	w.log.Info().Str("reason", reason).Int("jobs_in_hand", len(slots)).Msg("stopped receiving; draining")
	drained := make(chan struct{})
	go func() { jobs.Wait(); close(drained) }()
	if w.cfg.DrainTimeout > 0 {
		t := time.NewTimer(w.cfg.DrainTimeout)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			w.log.Warn().Dur("drain_timeout", w.cfg.DrainTimeout).Msg("drain timeout; releasing jobs in hand to the queue")
			cancelWork(errDrainTimeout)
			<-drained
		}
	} else {
		cancelWork(errDrainTimeout)
		<-drained
	}
	w.log.Info().Msg("worker stopped")
	return nil
}

var errDrainTimeout = errors.New("drain timeout reached during shutdown")

func (w *Worker) receive(ctx context.Context, n int) ([]types.Message, error) {
	out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(w.cfg.QueueURL),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(w.cfg.WaitTime / time.Second),
		VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("receive messages: %w", err)
	}
	w.m.received.Add(float64(len(out.Messages)))
	return out.Messages, nil
}

// handle runs one message to its final action: delete, or leave it for
// redelivery with a backoff.
func (w *Worker) handle(ctx context.Context, hb *heartbeat, msg types.Message) {
	start := w.now()
	id := aws.ToString(msg.MessageId)
	attempt, _ := strconv.Atoi(msg.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	attempt = max(attempt, 1)
	log := w.log.With().Str("message_id", id).Int("attempt", attempt).Logger()
	w.m.inflight.Inc()
	defer w.m.inflight.Dec()

	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jctx, cancelTimeout := context.WithTimeoutCause(jctx, w.cfg.JobTimeout, errors.New("job timeout"))
	defer cancelTimeout()
	hb.add(id, aws.ToString(msg.ReceiptHandle), cancel)
	defer hb.remove(id)

	outcome, err := w.runMessage(jctx, log, msg, attempt)
	// The final action must happen even when shutdown cancelled the job.
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer fcancel()
	switch {
	case err == nil:
		if derr := w.deleteMessage(fctx, msg); derr != nil {
			// Outputs exist, so the redelivery is detected as a duplicate.
			log.Error().Err(derr).Msg("delete after success failed; redelivery will find the transcript")
		}
	case errors.Is(context.Cause(jctx), errHeartbeatLost):
		outcome = OutcomeReleased
		log.Warn().Err(err).Msg("job abandoned: heartbeat lost")
	case errors.Is(context.Cause(jctx), errDrainTimeout):
		outcome = OutcomeReleased
		w.setVisibility(fctx, log, msg, 0)
		log.Warn().Msg("job released to the queue at shutdown")
	case ErrorClass(err) != "":
		outcome = OutcomeFailed
		w.m.errors.WithLabelValues(ErrorClass(err)).Inc()
		log.Warn().Str("error_class", ErrorClass(err)).Err(err).Msg("job failed permanently; error record written")
		if derr := w.deleteMessage(fctx, msg); derr != nil {
			log.Error().Err(derr).Msg("delete after error record failed")
		}
	default:
		outcome = OutcomeRetry
		w.m.errors.WithLabelValues("retryable").Inc()
		backoff := w.retryBackoff(attempt)
		log.Warn().Err(err).Dur("retry_in", backoff).Bool("last_attempt", attempt >= w.cfg.MaxReceives).Msg("job failed; will retry")
		w.setVisibility(fctx, log, msg, backoff)
	}
	w.m.jobs.WithLabelValues(outcome).Inc()
	w.m.duration.WithLabelValues(outcome).Observe(w.now().Sub(start).Seconds())
	log.Info().Str("outcome", outcome).Dur("took", w.now().Sub(start)).Msg("job done")
}

func (w *Worker) retryBackoff(attempt int) time.Duration {
	return backoff.Delay(w.cfg.RetryBackoff, 15*time.Minute, attempt)
}

func (w *Worker) deleteMessage(ctx context.Context, msg types.Message) error {
	var err error
	for try := 0; try < 3; try++ {
		_, err = w.sqs.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: aws.String(w.cfg.QueueURL), ReceiptHandle: msg.ReceiptHandle})
		if err == nil {
			return nil
		}
		if backoff.Sleep(ctx, backoff.Delay(100*time.Millisecond, time.Second, try+1)) != nil {
			break
		}
	}
	return fmt.Errorf("delete message: %w", err)
}

func (w *Worker) setVisibility(ctx context.Context, log zerolog.Logger, msg types.Message, d time.Duration) {
	_, err := w.sqs.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(w.cfg.QueueURL), ReceiptHandle: msg.ReceiptHandle, VisibilityTimeout: int32(d / time.Second),
	})
	if err != nil {
		log.Warn().Err(err).Msg("change visibility failed; message returns after its visibility timeout")
	}
}

// runMessage processes every job in a message. Jobs already done (an
// earlier delivery, or an earlier record of the same S3 event) are
// skipped, so a retried message does no work twice.
func (w *Worker) runMessage(ctx context.Context, log zerolog.Logger, msg types.Message, attempt int) (outcome string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	jobs, err := ParseMessage([]byte(aws.ToString(msg.Body)))
	if err != nil {
		// There is no input to put the record beside, so it goes under
		// the output prefix by message id and keeps the body: nothing is
		// lost, and the body is never logged.
		log.Warn().Int("body_bytes", len(aws.ToString(msg.Body))).Err(err).Msg("unparseable message")
		return w.recordInvalidMessage(ctx, msg, attempt, err)
	}
	outcome = OutcomeOK
	for _, job := range jobs {
		jlog := log.With().Str("bucket", job.Bucket).Str("key", job.Key).Logger()
		o, err := w.runJob(ctx, jlog, job, attempt)
		if err != nil {
			return o, err
		}
		if o != OutcomeOK {
			outcome = o
		}
	}
	return outcome, nil
}

// runJob processes one job and writes its error record when it fails for
// good (or for the last time the queue will deliver it).
func (w *Worker) runJob(ctx context.Context, log zerolog.Logger, job Job, attempt int) (string, error) {
	in := InputRef{Bucket: job.Bucket, Key: job.Key, ETag: job.ETag, VersionID: job.VersionID}
	model := w.model
	prefix := w.cfg.OutputPrefix
	if job.OutputPrefix != "" {
		prefix = job.OutputPrefix
	}
	outcome, keys, err := w.process(ctx, log, job, &in, prefix, attempt)
	if err == nil {
		return outcome, nil
	}
	final := ErrorClass(err) != ""
	if !final && attempt < w.cfg.MaxReceives {
		return OutcomeRetry, err
	}
	if cause := context.Cause(ctx); !final && (errors.Is(cause, errHeartbeatLost) || errors.Is(cause, errDrainTimeout)) {
		return OutcomeRetry, err // shutdown or heartbeat loss, not the job's fault
	}
	if keys.JSON == "" {
		keys = KeysFor(prefix, in, model)
	}
	class := ErrorClass(err)
	if class == "" {
		class = ClassExhausted
	}
	rec := ErrorRecord{
		Schema: ErrorSchema, Input: in, Model: model, Class: class, Message: err.Error(),
		Attempt: attempt, Final: final, CreatedAt: w.now().UTC(),
	}
	outcome, err = w.writeErrorRecord(ctx, keys.Error, rec, err)
	if outcome == OutcomeFailed {
		log.Info().Str("error_key", keys.Error).Msg("error record written")
	}
	return outcome, err
}

// writeErrorRecord writes rec at key, even after ctx is cancelled, and
// returns the outcome and error of the job it records. A record that
// cannot be written turns the failure into a retry: without the record it
// would be silent.
func (w *Worker) writeErrorRecord(ctx context.Context, key string, rec ErrorRecord, jobErr error) (string, error) {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if werr := w.putJSON(wctx, key, rec, ErrorRecordTag); werr != nil {
		// The job error is flattened (%v) so the message is not taken for
		// a permanent failure and deleted.
		return OutcomeRetry, fmt.Errorf("write error record: %w (job error: %v)", werr, jobErr) //nolint:errorlint // must not match as permanent
	}
	return OutcomeFailed, jobErr
}

// recordInvalidMessage writes the error record of a message that is not a
// job. A failed write leaves the message for redelivery.
func (w *Worker) recordInvalidMessage(ctx context.Context, msg types.Message, attempt int, err error) (string, error) {
	rec := ErrorRecord{
		Schema: ErrorSchema, Model: w.model, Class: ErrorClass(err), Message: err.Error(),
		Attempt: attempt, Final: true, CreatedAt: w.now().UTC(),
		MessageID: aws.ToString(msg.MessageId), MessageBody: aws.ToString(msg.Body),
	}
	return w.writeErrorRecord(ctx, InvalidMessageKey(w.cfg.OutputPrefix, aws.ToString(msg.MessageId)), rec, err)
}

// checkQueue fails fast on a queue that does not exist, and warns when its
// redrive policy disagrees with MaxReceives.
func (w *Worker) checkQueue(ctx context.Context) error {
	out, err := w.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(w.cfg.QueueURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		return fmt.Errorf("queue %s: %w", w.cfg.QueueURL, err)
	}
	raw, ok := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	if !ok {
		w.log.Warn().Msg("queue has no redrive policy: messages that keep failing will never reach a dead-letter queue")
		return nil
	}
	var rp struct {
		MaxReceiveCount json.Number `json:"maxReceiveCount"`
	}
	if json.Unmarshal([]byte(raw), &rp) == nil {
		if n, err := rp.MaxReceiveCount.Int64(); err == nil && int(n) != w.cfg.MaxReceives {
			w.log.Warn().Int64("queue_max_receive_count", n).Int("max_receives", w.cfg.MaxReceives).
				Msg("queue redrive maxReceiveCount differs from -max-receives: error records for exhausted retries will be written at the wrong receive")
		}
	}
	return nil
}
