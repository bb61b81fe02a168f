package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/subtitle"
	"github.com/fleetscribe/fleetscribe/triton"
)

// SQSAPI is the part of the SQS client the worker uses.
type SQSAPI interface {
	ReceiveMessage(ctx context.Context, params *sqs.ReceiveMessageInput, optFns ...func(*sqs.Options)) (*sqs.ReceiveMessageOutput, error)
	DeleteMessageBatch(ctx context.Context, params *sqs.DeleteMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.DeleteMessageBatchOutput, error)
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
	// ListObjectsV2 probes an input bucket without reading an object.
	ListObjectsV2(ctx context.Context, params *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
}

// Transcriber turns 16 kHz mono samples into text. *triton.Pool is one.
// Errors wrapping triton.ErrRejected or triton.ErrPoisonInput are permanent;
// all others are retried.
type Transcriber interface {
	Transcribe(ctx context.Context, req triton.Request) (triton.Result, error)
}

// Diarizer finds who speaks when, a recording's chunks in order (see
// triton.DiarizeRequest). *triton.Pool is one. Its errors are classified
// as Transcriber's.
type Diarizer interface {
	Diarize(ctx context.Context, req triton.DiarizeRequest) (triton.DiarizeResult, error)
}

// Worker drains one queue, or several in priority order.
type Worker struct {
	cfg    Config
	model  string
	sqs    SQSAPI
	in     inputs  // the input buckets
	out    outputs // the output bucket
	tr     Transcriber
	dz     Diarizer // nil: jobs that ask for speakers get transcripts without, saying why
	dzName string   // the diarization model, in transcripts
	// takesVocabulary: the model takes a vocabulary with a request (else
	// jobs that ask for one get bad_vocabulary records).
	takesVocabulary bool
	vocab           *vocabularies
	log             zerolog.Logger
	m               *metrics
	gate            *memoryGate
	// slots is the session's slot gate, for jobs held by an outage to
	// lend theirs (nil outside Run).
	slots  atomic.Pointer[slotGate]
	queues []*queue
	deps   *dependencies // the buckets, as requests find them (outage.go)
	now    func() time.Time
	ffmpeg *audio.FFmpeg // nil: formats without a Go decoder are unsupported

	interrupt chan Interruption // fleet signals: stop receiving, finish by a deadline
	running   atomic.Bool       // between the queue checks and the end of the drain
	inHand    atomic.Int64      // messages being handled
}

// InHand returns the number of messages the worker is handling now (from
// receipt to their final action), for scale-in protection.
func (w *Worker) InHand() int { return int(w.inHand.Load()) }

// Deps are what a worker works with: the model's name (in output keys and
// records), the queue and object stores, the model's server, the log and
// where its metrics are registered.
type Deps struct {
	Model       string
	SQS         SQSAPI
	S3          S3API
	Transcriber Transcriber
	// Diarizer serves jobs that ask for speakers (DiarizeModel names its
	// model in transcripts); nil: such jobs get transcripts without speakers.
	Diarizer     Diarizer
	DiarizeModel string
	// TakesVocabulary: the model takes a job's vocabulary with each request
	// (triton.ModelIO.TakesVocabulary).
	TakesVocabulary bool
	Log             zerolog.Logger
	Metrics         prometheus.Registerer
}

// New returns a worker for the model that d.Transcriber serves.
func New(cfg Config, d Deps) (*Worker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Model == "" {
		return nil, errors.New("model name is required")
	}
	if d.Metrics == nil {
		return nil, errors.New("a metrics registerer is required")
	}
	model, sqsc, s3c, tr, log, reg := d.Model, d.SQS, d.S3, d.Transcriber, d.Log, d.Metrics
	if cfg.Jobs.MemoryBudget == 0 {
		cfg.Jobs.MemoryBudget = DefaultMemoryBudget()
	}
	m := newMetrics(reg)
	w := &Worker{cfg: cfg, model: model, sqs: sqsc, tr: tr, dz: d.Diarizer, dzName: d.DiarizeModel, log: log, m: m, gate: newMemoryGate(cfg.Jobs.MemoryBudget, m), now: time.Now,
		interrupt: make(chan Interruption, 1)}
	w.deps = newDependencies(log, func() time.Time { return w.now() }, cfg.Jobs.OutageWait, m.outage)
	w.deps.probeFor = w.probeFor
	w.in = inputs{s3: s3c, deps: w.deps}
	w.out = outputs{s3: s3c, bucket: cfg.Outputs.Bucket, deps: w.deps, marks: subtitle.Marks{Below: cfg.Outputs.MarkBelow}}
	w.takesVocabulary = d.TakesVocabulary
	w.vocab = &vocabularies{read: w.out.read, now: func() time.Time { return w.now() }}
	if cfg.Inputs.FFmpeg != "" {
		if bin, err := exec.LookPath(cfg.Inputs.FFmpeg); err == nil {
			w.ffmpeg = &audio.FFmpeg{Bin: bin, Timeout: cfg.Jobs.Timeout, MaxSeconds: cfg.Inputs.MaxAudioSeconds}
		} else {
			log.Warn().Str("ffmpeg", cfg.Inputs.FFmpeg).Msg("ffmpeg not found: Ogg, Opus, M4A/AAC, WebM, AMR and other formats without a Go decoder will get unsupported_audio records")
		}
	}
	for i, u := range append([]string{cfg.Queues.URL}, cfg.Queues.LowerURLs...) {
		q := &queue{url: u, rank: i}
		switch {
		case len(cfg.Queues.Priorities) > 0:
			q.priority = cfg.Queues.Priorities[i]
		case i > 0:
			q.priority = uint64(i + 1) // below the first queue's (the pool's -triton-priority)
		}
		w.queues = append(w.queues, q)
	}
	return w, nil
}

// checkQueue fails fast on a queue that does not exist, and warns when its
// redrive policy disagrees with MaxReceives.
func (w *Worker) checkQueue(ctx context.Context, url string) error {
	out, err := w.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameRedrivePolicy},
	})
	if err != nil {
		return fmt.Errorf("queue %s: %w", url, err)
	}
	raw, ok := out.Attributes[string(types.QueueAttributeNameRedrivePolicy)]
	if !ok {
		w.log.Warn().Str("queue_url", url).Msg("queue has no redrive policy: messages that keep failing will never reach a dead-letter queue")
		return nil
	}
	var rp struct {
		MaxReceiveCount json.Number `json:"maxReceiveCount"`
	}
	if json.Unmarshal([]byte(raw), &rp) == nil {
		if n, err := rp.MaxReceiveCount.Int64(); err == nil && int(n) != w.cfg.Queues.MaxReceives {
			w.log.Warn().Str("queue_url", url).Int64("queue_max_receive_count", n).Int("max_receives", w.cfg.Queues.MaxReceives).
				Msg("queue redrive maxReceiveCount differs from -max-receives: error records for exhausted retries will be written at the wrong receive")
		}
	}
	return nil
}

// probeFor says how a dependency is probed: the output bucket by the write
// check (a key of its own), an input bucket by a listing and a read of a
// key it served (see inputs.answers), inference by the pool's canary on
// every partition. None depends on the failing object or chunk, so each
// confirms a lone failure.
func (w *Worker) probeFor(name string) prober {
	switch name {
	case depOutput:
		return func(ctx context.Context, _, _ []string) error { return w.out.checkWrites(ctx, w.cfg.Outputs.Prefix) }
	case depInference:
		if ip, ok := w.tr.(inferenceProber); ok {
			return func(ctx context.Context, _, _ []string) error { return ip.Probe(ctx) }
		}
		return nil
	}
	bucket := strings.TrimPrefix(name, inputDep(""))
	return func(ctx context.Context, failing, served []string) error {
		return w.in.answers(ctx, bucket, failing, served)
	}
}
