package worker

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/flagext"
)

// Config configures a Worker.
type Config struct {
	QueueURL          string
	LowerQueueURLs    []string // further queues, in descending priority (the bulk queue)
	LowerMinShare     float64  // share of the slots a lower queue keeps while it has work
	QueuePriorities   []uint64 // Triton priority of each queue's chunks, QueueURL first; empty: the pool's
	OutputBucket      string
	OutputPrefix      string
	Concurrency       int           // jobs processed at once (slots)
	WaitTime          time.Duration // SQS long-poll wait, at most 20 s
	VisibilityTimeout time.Duration // visibility set by each heartbeat
	HeartbeatInterval time.Duration // 0: a third of VisibilityTimeout
	// QueueStatsInterval is how often queue and DLQ depths are sampled
	// into metrics (0: never).
	QueueStatsInterval time.Duration
	JobTimeout         time.Duration
	DrainTimeout       time.Duration // after shutdown starts, how long jobs in hand may finish
	MaxReceives        int           // the queue's redrive maxReceiveCount
	RetryBackoff       time.Duration // visibility after the first retryable failure; doubles
	MaxObjectBytes     int64
	MaxAudioSeconds    float64       // longer recordings get a too_large record
	MemoryBudget       int64         // bytes that jobs in hand may hold together (estimated); 0: automatic
	InputBuckets       []string      // allowed "bucket" or "bucket/prefix"; "*" alone: any bucket; required
	OutputPrefixes     []string      // prefixes a job's output_prefix must lie under; empty: OutputPrefix only
	Models             []string      // models a job may ask for besides the worker's own
	ClaimSettle        time.Duration // wait between writing an in-progress claim and reading it back; 0: no claims
	// ClaimMinAudio is the shortest recording that gets a claim: a claim
	// costs a PUT and a GET, about what computing a few minutes of audio
	// costs, so it is worth paying only where a duplicate would waste more.
	ClaimMinAudio time.Duration
	// FFmpeg is the ffmpeg binary that decodes MP3, FLAC and the formats
	// without a Go decoder (Ogg, Opus, MP4/M4A, WebM, AMR...); empty: MP3
	// and FLAC are decoded in Go, the others refused as unsupported.
	FFmpeg string
	// Normalize brings each chunk's speech to -20 dBFS before it is sent.
	Normalize        bool
	ChunkSeconds     float64 // longest chunk sent to the model
	ChunkParallelism int     // chunks of one job in flight at once
	Timestamps       bool    // ask the model for word timestamps
	ExitWhenIdle     time.Duration
}

// RegisterFlags registers the worker flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.QueueURL, "queue-url", "", "SQS queue URL to drain (required); with -lower-queue-urls, the highest-priority queue (live uploads)")
	fs.Var((*flagext.StringSliceCSV)(&c.LowerQueueURLs), "lower-queue-urls", "comma-separated further queues drained by the same slots, in descending priority (e.g. the bulk queue): a lower queue gets slots only when no higher queue is waiting for one, except its -lower-min-share")
	fs.Float64Var(&c.LowerMinShare, "lower-min-share", 0.1, "share of -concurrency each lower queue keeps while it has work, so bulk never starves")
	fs.Func("queue-triton-priorities", "comma-separated Triton request priorities of each queue's chunks, -queue-url first (empty: -triton-priority for -queue-url and 1+position for each lower queue, i.e. 2 for the bulk queue, as priority_levels 2 in the shipped model config expects)", func(v string) error {
		var l flagext.StringSliceCSV
		_ = l.Set(v)
		c.QueuePriorities = nil
		for _, s := range l {
			n, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return fmt.Errorf("priority %q: %w", s, err)
			}
			c.QueuePriorities = append(c.QueuePriorities, n)
		}
		return nil
	})
	fs.StringVar(&c.OutputBucket, "output-bucket", "", "bucket for transcripts and error records (required)")
	fs.StringVar(&c.OutputPrefix, "output-prefix", "transcripts/", "key prefix for outputs, unless a job sets its own")
	fs.IntVar(&c.Concurrency, "concurrency", 8, "jobs processed at once; messages are received only for free slots")
	fs.DurationVar(&c.WaitTime, "wait-time", 20*time.Second, "SQS long-poll wait (max 20s)")
	fs.DurationVar(&c.VisibilityTimeout, "visibility-timeout", 2*time.Minute, "visibility each heartbeat gives a message in hand")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", 0, "how often visibility is extended (0: a third of -visibility-timeout)")
	fs.DurationVar(&c.QueueStatsInterval, "queue-stats-interval", 30*time.Second, "how often the depth of each queue and its DLQ is sampled into the fleetscribe_queue_messages and fleetscribe_dlq_messages gauges (0: never)")
	fs.DurationVar(&c.JobTimeout, "job-timeout", 30*time.Minute, "longest time one job may take")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 5*time.Minute, "on SIGTERM, how long jobs in hand may finish before they are released to the queue")
	fs.IntVar(&c.MaxReceives, "max-receives", 5, "the queue's redrive maxReceiveCount: at this receive a retryable failure writes an error record")
	fs.DurationVar(&c.RetryBackoff, "retry-backoff", 30*time.Second, "visibility after a first retryable failure; doubles per receive, max 15m")
	fs.Int64Var(&c.MaxObjectBytes, "max-object-bytes", 8<<30, "larger input objects get a too_large error record (recordings stream: memory does not grow with the object; formats ffmpeg reads are first copied to a temporary file)")
	fs.Float64Var(&c.MaxAudioSeconds, "max-audio-seconds", 4*3600, "longer recordings get a too_large error record (read from the header before download where it says, else counted as they decode)")
	fs.Int64Var(&c.MemoryBudget, "memory-budget", 0, "bytes the jobs in hand may hold together, by estimate; jobs wait for room, and a job that alone exceeds it gets a too_large record (0: 60% of the memory limit)")
	fs.Var((*flagext.StringSliceCSV)(&c.InputBuckets), "input-buckets", "comma-separated input buckets jobs may read, each optionally with a key prefix (bucket/prefix/); jobs for others get a bad_message record; required: * accepts any bucket the worker's credentials can read")
	fs.Var((*flagext.StringSliceCSV)(&c.OutputPrefixes), "output-prefixes", "comma-separated prefixes under which a job's own output_prefix must lie (empty: only under -output-prefix)")
	fs.Var((*flagext.StringSliceCSV)(&c.Models), "models", "comma-separated models a job may ask for besides -model (all served by the same Triton partitions)")
	fs.DurationVar(&c.ClaimSettle, "claim-settle", 200*time.Millisecond, "after writing an in-progress claim for a job, wait this long and read it back, so two workers rarely compute one input at once (0: no claims)")
	fs.Float64Var(&c.ChunkSeconds, "chunk-seconds", 30, "longest audio chunk sent to the model; cuts fall at quiet points")
	fs.IntVar(&c.ChunkParallelism, "chunk-parallelism", 64, "chunks of one job in flight at once: enough for each of a GPU's eight partitions to have a batch of 8 from one long recording (and with four, a batch of 8 computing and the next one waiting; at 32, batches start half full)")
	fs.BoolVar(&c.Timestamps, "timestamps", true, "ask the model for word timestamps")
	fs.DurationVar(&c.ClaimMinAudio, "claim-min-audio", 5*time.Minute, "claim only recordings at least this long: a claim costs an S3 PUT and GET per job, more than computing a short recording twice in the rare overlap it guards against (0: claim every job)")
	fs.StringVar(&c.FFmpeg, "ffmpeg", "ffmpeg", "ffmpeg binary (name on PATH or path) that decodes everything but WAV: MP3 and FLAC (faster than their Go decoders, which serve without it), and Ogg/Opus, M4A/AAC, WebM, AMR, CAF, WMA, AIFF, RF64; empty or not found: those without a Go decoder get an unsupported_audio record naming the format")
	fs.BoolVar(&c.Normalize, "normalize", true, "scale each chunk so its speech (the louder half of its 30 ms frames) is at -20 dBFS, at most +60 dB and never clipping: quiet phone recordings reach the model at a normal level")
	fs.DurationVar(&c.ExitWhenIdle, "exit-when-idle", 0, "exit 0 once no message has arrived and no job has run for this long (0: run forever)")
}

// Validate reports missing or inconsistent settings.
func (c *Config) Validate() error {
	switch {
	case c.QueueURL == "":
		return errors.New("queue URL is required")
	case c.LowerMinShare < 0 || c.LowerMinShare >= 1:
		return errors.New("lower min share must be in [0, 1)")
	case len(c.QueuePriorities) > 0 && len(c.QueuePriorities) != 1+len(c.LowerQueueURLs):
		return fmt.Errorf("%d queue priorities for %d queues", len(c.QueuePriorities), 1+len(c.LowerQueueURLs))
	case c.OutputBucket == "":
		return errors.New("output bucket is required")
	case c.Concurrency < 1:
		return errors.New("concurrency must be at least 1")
	case c.WaitTime < 0 || c.WaitTime > 20*time.Second:
		return errors.New("wait time must be between 0 and 20s")
	case c.VisibilityTimeout < 10*time.Second || c.VisibilityTimeout > 12*time.Hour:
		return errors.New("visibility timeout must be between 10s and 12h")
	case c.HeartbeatInterval < 0 || c.HeartbeatInterval >= c.VisibilityTimeout:
		return errors.New("heartbeat interval must be shorter than the visibility timeout")
	case c.JobTimeout <= 0 || c.DrainTimeout < 0:
		return errors.New("job timeout must be positive and drain timeout not negative")
	case c.MaxReceives < 1:
		return errors.New("max receives must be at least 1")
	case c.MaxObjectBytes < 1 || c.MaxAudioSeconds <= 0 || c.MemoryBudget < 0:
		return errors.New("max object bytes and max audio seconds must be positive, memory budget not negative")
	case c.ClaimSettle < 0 || c.ClaimMinAudio < 0:
		return errors.New("claim settle and claim min audio must not be negative")
	case c.ChunkSeconds < 1 || c.ChunkParallelism < 1:
		return errors.New("chunk seconds and chunk parallelism must be at least 1")
	}
	if err := contract.CheckOutputPrefix(c.OutputPrefix); err != nil {
		return err
	}
	for _, p := range c.OutputPrefixes {
		if err := contract.CheckOutputPrefix(p); err != nil {
			return fmt.Errorf("output prefixes: %w", err)
		}
	}
	if err := checkInputBuckets(c.InputBuckets); err != nil {
		return err
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.VisibilityTimeout / 3
	}
	return nil
}

// AnyInputBucket, as -input-buckets, accepts jobs for any bucket the
// worker's credentials can read. It must be given on purpose: without an
// allow-list a worker would transcribe whatever bucket a message names and
// write the result into its own output tree.
const AnyInputBucket = "*"

// checkInputBuckets requires an allow-list: bucket names by S3's rules,
// each optionally with a key prefix, or AnyInputBucket alone.
func checkInputBuckets(list []string) error {
	if len(list) == 0 {
		return errors.New("input buckets are required: name the buckets jobs may read (-input-buckets bucket or bucket/prefix/), or give * to accept any bucket the worker's credentials can read")
	}
	for _, b := range list {
		if b == AnyInputBucket {
			if len(list) > 1 {
				return errors.New("input buckets: * accepts any bucket; give it alone")
			}
			continue
		}
		name, _, _ := strings.Cut(b, "/")
		if err := contract.CheckBucketName(name); err != nil {
			return fmt.Errorf("input buckets: %q: %w", b, err)
		}
	}
	return nil
}

// InputAllowed reports whether the input lies in an allowed bucket and
// prefix.
func (c *Config) InputAllowed(bucket, key string) bool {
	if len(c.InputBuckets) == 1 && c.InputBuckets[0] == AnyInputBucket {
		return true
	}
	for _, a := range c.InputBuckets {
		name, prefix, _ := strings.Cut(a, "/")
		if name == bucket && strings.HasPrefix(key, prefix) {
			return true
		}
	}
	return false
}

// OutputPrefixAllowed reports whether a job's output prefix (already
// checked with CheckOutputPrefix) lies under an allowed prefix.
func (c *Config) OutputPrefixAllowed(p string) bool {
	allowed := c.OutputPrefixes
	if len(allowed) == 0 {
		allowed = []string{c.OutputPrefix}
	}
	for _, a := range allowed {
		if strings.HasPrefix(p, a) {
			return true
		}
	}
	return false
}

// minShareSlots is the number of slots a lower queue keeps while it has work.
func (c *Config) minShareSlots() int {
	if c.LowerMinShare <= 0 {
		return 0
	}
	return max(1, int(math.Ceil(c.LowerMinShare*float64(c.Concurrency))))
}
