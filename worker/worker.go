package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
	DeleteObject(ctx context.Context, params *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// Transcriber turns 16 kHz mono samples into text. *triton.Pool is one.
// Errors wrapping triton.ErrRejected are permanent; all others are retried.
type Transcriber interface {
	Transcribe(ctx context.Context, req triton.Request) (triton.Result, error)
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
	gate  *memoryGate
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
	if cfg.MemoryBudget == 0 {
		cfg.MemoryBudget = DefaultMemoryBudget()
	}
	m := newMetrics(reg)
	return &Worker{cfg: cfg, model: model, sqs: sqsc, s3: s3c, tr: tr, log: log, m: m, gate: newMemoryGate(cfg.MemoryBudget, m), now: time.Now}, nil
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
		// A long poll in flight is never cut short: SQS may already have
		// handed its messages out. It ends within the poll wait.
		rctx, cancelReceive := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WaitTime+30*time.Second)
		msgs, err := w.receive(rctx, n)
		cancelReceive()
		for range n - len(msgs) {
			<-slots
		}
		if ctx.Err() != nil && len(msgs) > 0 {
			// Shutdown began during the poll: hand the messages straight
			// back rather than leave them invisible until their timeout.
			fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			for _, msg := range msgs {
				w.setVisibility(fctx, w.log.With().Str("message_id", aws.ToString(msg.MessageId)).Logger(), msg, 0)
				<-slots
			}
			fcancel()
			w.log.Info().Int("messages", len(msgs)).Msg("released messages received during shutdown")
			break receive
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
