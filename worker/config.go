package worker

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/internal/flagext"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

// Config configures a Worker, in sections; each registers its own flags
// (their names, and the environment variables made from them, are what
// operators, compose files and Terraform use: they do not change).
type Config struct {
	Queues  QueueConfig
	Jobs    JobConfig
	Inputs  InputConfig
	Outputs OutputConfig
	Claims  ClaimConfig
	Audio   AudioConfig
	Speaker SpeakerConfig
	Vocab   VocabularyConfig
}

// RegisterFlags registers every section's flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	for _, s := range c.Sections() {
		s.Register(fs)
	}
}

// Sections are the configuration's sections in the order -help and the
// configuration reference show them.
func (c *Config) Sections() []flagenv.Section {
	return []flagenv.Section{
		{Title: "Queues", Register: c.Queues.RegisterFlags},
		{Title: "Jobs", Register: c.Jobs.RegisterFlags},
		{Title: "Inputs", Register: c.Inputs.RegisterFlags},
		{Title: "Outputs", Register: c.Outputs.RegisterFlags},
		{Title: "Claims", Register: c.Claims.RegisterFlags},
		{Title: "Audio and chunks", Register: c.Audio.RegisterFlags},
		{Title: "Speakers", Register: c.Speaker.RegisterFlags},
		{Title: "Vocabularies", Register: c.Vocab.RegisterFlags},
	}
}

// Validate reports missing or inconsistent settings. It changes nothing:
// defaults that follow from other settings are computed where used.
func (c *Config) Validate() error {
	for _, err := range []error{c.Queues.validate(), c.Jobs.validate(), c.Inputs.validate(), c.Outputs.validate(), c.Claims.validate(), c.Audio.validate(), c.Speaker.validate(len(c.Queues.LowerURLs) + 1), c.Vocab.validate(len(c.Queues.LowerURLs) + 1)} {
		if err != nil {
			return err
		}
	}
	return nil
}

// QueueConfig is what the worker drains and how it holds messages.
type QueueConfig struct {
	URL               string
	LowerURLs         []string // further queues, in descending priority (the bulk queue)
	LowerMinShare     float64  // share of the slots a lower queue keeps while it has work
	Priorities        []uint64 // Triton priority of each queue's chunks, URL first; empty: the pool's
	WaitTime          time.Duration
	VisibilityTimeout time.Duration // visibility set by each heartbeat
	HeartbeatInterval time.Duration // 0: a third of VisibilityTimeout (see Heartbeat)
	StatsInterval     time.Duration // queue and DLQ depths sampled into metrics (0: never)
	MaxReceives       int           // the queue's redrive maxReceiveCount
	RetryBackoff      time.Duration // visibility after the first retryable failure; doubles
}

// RegisterFlags registers the queue flags.
func (c *QueueConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.URL, "queue-url", "", "SQS queue to drain (required); with -lower-queue-urls, the highest-priority one (live uploads)")
	fs.Var((*flagext.StringSliceCSV)(&c.LowerURLs), "lower-queue-urls", "comma-separated further queues the same slots drain, in descending priority (e.g. the bulk queue)\n"+
		"A lower queue gets slots only when no higher queue is waiting for one, except its -lower-min-share.")
	fs.Float64Var(&c.LowerMinShare, "lower-min-share", 0.1, "share of -concurrency each lower queue keeps while it has work, so bulk never starves")
	fs.Var((*flagext.Uint64SliceCSV)(&c.Priorities), "queue-triton-priorities", "comma-separated Triton request priorities of each queue's chunks, -queue-url first\n"+
		"Empty: -triton-priority for -queue-url and 1+position for each lower queue, i.e. 2 for the bulk queue, as priority_levels 2 in the shipped model config expects.")
	fs.DurationVar(&c.WaitTime, "wait-time", 20*time.Second, "SQS long-poll wait (max 20s)")
	fs.DurationVar(&c.VisibilityTimeout, "visibility-timeout", 2*time.Minute, "visibility each heartbeat gives a message in hand")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", 0, "how often visibility is extended (0: a third of -visibility-timeout)")
	fs.DurationVar(&c.StatsInterval, "queue-stats-interval", 30*time.Second, "how often queue and DLQ depths are sampled into metrics (0: never)\n"+
		"The gauges are fleetscribe_queue_messages and fleetscribe_dlq_messages.")
	fs.IntVar(&c.MaxReceives, "max-receives", 5, "the queue's redrive maxReceiveCount\n"+
		"At this receive a retryable failure writes an error record before the queue moves the message to its DLQ.")
	fs.DurationVar(&c.RetryBackoff, "retry-backoff", 30*time.Second, "visibility after a first retryable failure; doubles per receive, max 15m")
}

// Heartbeat is how often visibility is extended.
func (c *QueueConfig) Heartbeat() time.Duration {
	if c.HeartbeatInterval == 0 {
		return c.VisibilityTimeout / 3
	}
	return c.HeartbeatInterval
}

func (c *QueueConfig) validate() error {
	switch {
	case c.URL == "":
		return errors.New("queue URL is required")
	case c.LowerMinShare < 0 || c.LowerMinShare >= 1:
		return errors.New("lower min share must be in [0, 1)")
	case len(c.Priorities) > 0 && len(c.Priorities) != 1+len(c.LowerURLs):
		return fmt.Errorf("%d queue priorities for %d queues", len(c.Priorities), 1+len(c.LowerURLs))
	case c.WaitTime < 0 || c.WaitTime > 20*time.Second:
		return errors.New("wait time must be between 0 and 20s")
	case c.VisibilityTimeout < 10*time.Second || c.VisibilityTimeout > 12*time.Hour:
		return errors.New("visibility timeout must be between 10s and 12h")
	case c.HeartbeatInterval < 0 || c.Heartbeat() >= c.VisibilityTimeout:
		return errors.New("heartbeat interval must be shorter than the visibility timeout")
	case c.MaxReceives < 1:
		return errors.New("max receives must be at least 1")
	}
	return nil
}

// JobConfig is how many jobs run at once, and for how long.
type JobConfig struct {
	Concurrency  int           // jobs processed at once (slots)
	Timeout      time.Duration // longest one job may take
	DrainTimeout time.Duration // after shutdown starts, how long jobs in hand may finish
	MemoryBudget int64         // bytes that jobs in hand may hold together (estimated); 0: automatic
	Models       []string      // models a job may ask for besides the worker's own
	ExitWhenIdle time.Duration
	OutageWait   time.Duration // how long a job waits for a bucket that is down
}

// RegisterFlags registers the job flags.
func (c *JobConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.IntVar(&c.Concurrency, "concurrency", 8, "jobs processed at once; messages are received only for free slots")
	fs.DurationVar(&c.Timeout, "job-timeout", 30*time.Minute, "longest time one job may take")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", 5*time.Minute, "on SIGTERM, how long jobs in hand may finish before they are released to the queue")
	fs.Int64Var(&c.MemoryBudget, "memory-budget", 0, "bytes the jobs in hand may hold together, by estimate (0: 60% of the memory limit less shared memory)\n"+
		"Shared memory: what the Triton regions reserve (-triton-shared-memory-budget). Jobs wait for room, and a job that alone exceeds it gets a too_large record.")
	fs.Var((*flagext.StringSliceCSV)(&c.Models), "models", "comma-separated models a job may ask for besides -model (all served by the same partitions)")
	fs.DurationVar(&c.ExitWhenIdle, "exit-when-idle", 0, "exit 0 once no message has arrived and no job has run for this long (0: run forever)")
	fs.DurationVar(&c.OutageWait, "outage-wait", time.Hour, "how long a job waits, its message kept in hand, for a bucket that is down to come back\n"+
		"Missing, access denied, 5xx or unreachable, and the bucket's probe (the write check; for an input a listing and a key it served) failing too: the job then runs again in the same receive (a computed transcript is written, not computed again); "+
		"while the output bucket is down nothing is received. Past this the job fails as retryable. SQS keeps a message in hand 12 h at most; 0: no job waits.")
}

func (c *JobConfig) validate() error {
	switch {
	case c.Concurrency < 1:
		return errors.New("concurrency must be at least 1")
	case c.Timeout <= 0 || c.DrainTimeout < 0:
		return errors.New("job timeout must be positive and drain timeout not negative")
	case c.MemoryBudget < 0:
		return errors.New("memory budget must not be negative")
	case c.OutageWait < 0 || c.OutageWait > 12*time.Hour:
		return errors.New("outage wait must be between 0 and 12h (the longest SQS keeps a message in hand)")
	}
	return nil
}

// InputConfig is what the worker may read, and how much of it.
type InputConfig struct {
	Buckets         []string // allowed "bucket" or "bucket/prefix"; "*" alone: any bucket; required
	MaxObjectBytes  int64
	MaxAudioSeconds float64 // longer recordings get a too_large record
	// FFmpeg is the ffmpeg binary that decodes MP3, FLAC and the formats
	// without a Go decoder (Ogg, Opus, MP4/M4A, WebM, AMR...); empty: MP3
	// and FLAC are decoded in Go, the others refused as unsupported.
	FFmpeg string
}

// RegisterFlags registers the input flags.
func (c *InputConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*flagext.StringSliceCSV)(&c.Buckets), "input-buckets", "comma-separated buckets jobs may read, each optionally with a key prefix (bucket/prefix/); required\n"+
		"Jobs for others get a bad_message record. * accepts any bucket the worker's credentials can read, on purpose: "+
		"without an allow-list a worker would transcribe whatever bucket a message names into its own output tree.")
	fs.Int64Var(&c.MaxObjectBytes, "max-object-bytes", 8<<30, "larger input objects get a too_large error record\n"+
		"Recordings stream: memory does not grow with the object; formats ffmpeg reads are first copied to a temporary file.")
	fs.Float64Var(&c.MaxAudioSeconds, "max-audio-seconds", 4*3600, "longer recordings get a too_large error record\n"+
		"The length is read from the header before the download where the header says it, else counted as the recording decodes.")
	fs.StringVar(&c.FFmpeg, "ffmpeg", "ffmpeg", "ffmpeg binary (name on PATH or path) that decodes everything but WAV\n"+
		"MP3 and FLAC (faster than their Go decoders, which serve without it), and Ogg/Opus, M4A/AAC, WebM, AMR, CAF, WMA, AIFF, RF64. "+
		"Empty or not found: those without a Go decoder get an unsupported_audio record naming the format.")
}

func (c *InputConfig) validate() error {
	if c.MaxObjectBytes < 1 || c.MaxAudioSeconds <= 0 {
		return errors.New("max object bytes and max audio seconds must be positive")
	}
	return checkInputBuckets(c.Buckets)
}

// OutputConfig is where transcripts and error records go.
type OutputConfig struct {
	Bucket   string
	Prefix   string
	Prefixes []string // prefixes a job's output_prefix must lie under; empty: Prefix only
	// MarkBelow marks the words of TXT, SRT and VTT outputs whose
	// confidence is below it (0: none; subtitle.Marks).
	MarkBelow float64
}

// RegisterFlags registers the output flags.
func (c *OutputConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Bucket, "output-bucket", "", "bucket for transcripts and error records (required)")
	fs.StringVar(&c.Prefix, "output-prefix", "transcripts/", "key prefix for outputs, unless a job sets its own")
	fs.Var((*flagext.StringSliceCSV)(&c.Prefixes), "output-prefixes", "comma-separated prefixes a job's own output_prefix must lie under (empty: only -output-prefix)")
	fs.Float64Var(&c.MarkBelow, "mark-confidence-below", 0, "mark the words of txt, srt and vtt outputs whose confidence (0-1) is below this (0: none)\n"+
		"Marked words read [word?] in txt and srt and <c.low>word</c> in vtt, for a reviewer to check; the JSON always has every word's confidence.")
}

func (c *OutputConfig) validate() error {
	if c.Bucket == "" {
		return errors.New("output bucket is required")
	}
	if c.MarkBelow < 0 || c.MarkBelow > 1 {
		return fmt.Errorf("-mark-confidence-below %g: want 0 (no marks) to 1", c.MarkBelow)
	}
	if err := contract.CheckOutputPrefix(c.Prefix); err != nil {
		return err
	}
	for _, p := range c.Prefixes {
		if err := contract.CheckOutputPrefix(p); err != nil {
			return fmt.Errorf("output prefixes: %w", err)
		}
	}
	return nil
}

// ClaimConfig is the in-progress claim that keeps two messages for one
// input from computing it twice.
type ClaimConfig struct {
	Settle time.Duration // wait between writing a claim and reading it back; 0: no claims
	// MinAudio is the shortest recording that gets a claim: a claim costs
	// a PUT and a GET, about what computing a few minutes of audio costs,
	// so it is worth paying only where a duplicate would waste more.
	MinAudio time.Duration
}

// RegisterFlags registers the claim flags.
func (c *ClaimConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.Settle, "claim-settle", 200*time.Millisecond, "wait between writing an in-progress claim and reading it back (0: no claims)\n"+
		"So two workers rarely compute one input at once.")
	fs.DurationVar(&c.MinAudio, "claim-min-audio", 5*time.Minute, "claim only recordings at least this long (0: claim every job)\n"+
		"A claim costs an S3 PUT and GET per job, more than computing a short recording twice in the rare overlap it guards against.")
}

func (c *ClaimConfig) validate() error {
	if c.Settle < 0 || c.MinAudio < 0 {
		return errors.New("claim settle and claim min audio must not be negative")
	}
	return nil
}

// AudioConfig is how recordings are levelled, cut and sent.
type AudioConfig struct {
	Normalize        bool    // bring each chunk's speech to -20 dBFS before it is sent
	ChunkSeconds     float64 // longest chunk sent to the model
	ChunkParallelism int     // chunks of one job in flight at once
	Timestamps       bool    // ask the model for word timestamps
	OverlapJoin      string  // how overlapping chunks' words are joined: JoinAlign or JoinMiddle
}

// RegisterFlags registers the audio flags.
func (c *AudioConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.Normalize, "normalize", true, "scale each chunk so its speech is at -20 dBFS, at most +60 dB and never clipping\n"+
		"Speech is the louder half of its 30 ms frames: quiet phone recordings reach the model at a normal level.")
	fs.Float64Var(&c.ChunkSeconds, "chunk-seconds", 30, "longest audio chunk sent to the model; cuts fall at quiet points")
	fs.IntVar(&c.ChunkParallelism, "chunk-parallelism", 64, "chunks of one job in flight at once\n"+
		"64 is enough for each of a GPU's eight partitions to have a batch of 8 from one long recording "+
		"(and with four, a batch of 8 computing and the next one waiting; at 32, batches start half full).")
	fs.BoolVar(&c.Timestamps, "timestamps", true, "ask the model for word timestamps")
	fs.StringVar(&c.OverlapJoin, "overlap-join", JoinAlign, "how two overlapping chunks' words are joined: align or middle\n"+
		"align matches the words both heard in the overlap and hands over at one, so a word is kept once; middle keeps each chunk's side of the overlap's middle (for comparison).")
}

func (c *AudioConfig) validate() error {
	if c.ChunkSeconds < 1 || c.ChunkParallelism < 1 {
		return errors.New("chunk seconds and chunk parallelism must be at least 1")
	}
	if c.OverlapJoin != "" && c.OverlapJoin != JoinAlign && c.OverlapJoin != JoinMiddle {
		return fmt.Errorf("overlap join %q: want %s or %s", c.OverlapJoin, JoinAlign, JoinMiddle)
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
	if len(c.Inputs.Buckets) == 1 && c.Inputs.Buckets[0] == AnyInputBucket {
		return true
	}
	for _, a := range c.Inputs.Buckets {
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
	allowed := c.Outputs.Prefixes
	if len(allowed) == 0 {
		allowed = []string{c.Outputs.Prefix}
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
	if c.Queues.LowerMinShare <= 0 {
		return 0
	}
	return max(1, int(math.Ceil(c.Queues.LowerMinShare*float64(c.Jobs.Concurrency))))
}

// SpeakerConfig is who-spoke-what for jobs that do not say: each queue's
// default, and the diarization model's limit.
type SpeakerConfig struct {
	// Defaults per queue, -queue-url first (one value: every queue's).
	Speakers []*contract.SpeakerHints // nil: no diarization
	Channels []string                 // contract.ChannelsSplit or ChannelsMix
	// MaxSpeakers is the diarization model's limit: a job asking for more
	// is refused (0: the shipped model's, modelspec.DiarizeMaxSpeakers).
	MaxSpeakers int
}

// RegisterFlags registers the speaker flags.
func (c *SpeakerConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var(speakerDefaults{&c.Speakers}, "default-speakers", "speakers for jobs that do not say, per queue, -queue-url first, separated by ';' (one value: every queue)\n"+
		"off, on, or hints such as max=2 or min=2,max=4: an upload-triggered job (an S3 event carries no options) gets its queue's. Off costs nothing.")
	fs.Var((*semicolonList)(&c.Channels), "default-channels", "channels for jobs that do not say, per queue as -default-speakers: mix or split\n"+
		"split: each channel transcribed alone and labelled as its own speaker (call recordings, one party a channel).")
	fs.IntVar(&c.MaxSpeakers, "diarize-max-speakers", modelspec.DiarizeMaxSpeakers, "the most speakers the diarization model (-diarize-model) separates\n"+
		"A job whose speakers max is above it gets a bad_message record.")
}

func (c *SpeakerConfig) validate(queues int) error {
	switch {
	case len(c.Speakers) > 1 && len(c.Speakers) != queues:
		return fmt.Errorf("%d -default-speakers values for %d queues (give one, or one per queue)", len(c.Speakers), queues)
	case len(c.Channels) > 1 && len(c.Channels) != queues:
		return fmt.Errorf("%d -default-channels values for %d queues (give one, or one per queue)", len(c.Channels), queues)
	case c.MaxSpeakers < 0 || c.MaxSpeakers > contract.MaxSpeakerHint:
		return fmt.Errorf("diarize max speakers must be 1 to %d", contract.MaxSpeakerHint)
	}
	for rank := range queues {
		h, ch := c.For(rank)
		if h.On() && max(h.Max, h.Min) > c.Limit() {
			return fmt.Errorf("-default-speakers of queue %d asks for up to %d speakers; the model separates %d", rank, max(h.Max, h.Min), c.Limit())
		}
		if h.On() && ch == contract.ChannelsSplit {
			return fmt.Errorf("queue %d defaults to speakers and to split channels: choose one", rank)
		}
	}
	for _, m := range c.Channels {
		if err := contract.CheckChannels(m); err != nil {
			return err
		}
	}
	return nil
}

// Limit is the most speakers a job may ask for.
func (c *SpeakerConfig) Limit() int {
	if c.MaxSpeakers == 0 {
		return modelspec.DiarizeMaxSpeakers
	}
	return c.MaxSpeakers
}

// For returns queue rank's defaults.
func (c *SpeakerConfig) For(rank int) (*contract.SpeakerHints, string) {
	var h *contract.SpeakerHints
	ch := ""
	switch {
	case len(c.Speakers) == 1:
		h = c.Speakers[0]
	case rank < len(c.Speakers):
		h = c.Speakers[rank]
	}
	switch {
	case len(c.Channels) == 1:
		ch = c.Channels[0]
	case rank < len(c.Channels):
		ch = c.Channels[rank]
	}
	return h, ch
}

// semicolonList is a flag of values separated by ';'.
type semicolonList []string

func (l *semicolonList) String() string { return strings.Join(*l, ";") }

func (l *semicolonList) Set(v string) error {
	*l = nil
	if v == "" {
		return nil
	}
	for _, s := range strings.Split(v, ";") {
		*l = append(*l, strings.TrimSpace(s))
	}
	return nil
}

// speakerDefaults is -default-speakers: hints per queue, separated by ';'.
type speakerDefaults struct{ hints *[]*contract.SpeakerHints }

func (s speakerDefaults) String() string {
	if s.hints == nil {
		return ""
	}
	parts := make([]string, len(*s.hints))
	for i, h := range *s.hints {
		parts[i] = "off"
		if h != nil {
			parts[i] = h.String()
		}
	}
	return strings.Join(parts, ";")
}

func (s speakerDefaults) Set(v string) error {
	var list semicolonList
	_ = list.Set(v)
	*s.hints = nil
	for _, item := range list {
		h, err := contract.ParseSpeakerHints(item)
		if err != nil {
			return err
		}
		*s.hints = append(*s.hints, h)
	}
	return nil
}
