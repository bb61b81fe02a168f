// Package modelspec is the contract between the worker and its Triton
// model as data: the model's name, the sample rate it takes, its tensors,
// its batching policy, instances and parameters, and the one renderer of
// its config.pbtxt. The shipped configurations (deploy/triton) are
// rendered from the values here and checked current; the worker, the
// client, the fake, the real-Triton runner and the benchmarks read them
// here instead of keeping copies. A leaf on the standard library.
package modelspec

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	// Name is the model's name in every repository.
	Name = "asr"
	// SampleRate is the only rate the model takes (mono float32 in [-1, 1]).
	SampleRate = 16000

	// The tensors' names: the client sends and reads these (triton.DefaultModelIO).
	AudioInput      = "audio"
	TimestampsInput = "timestamps"
	LengthInput     = "audio_length"
	// VocabularyInput is a job's vocabulary (BYTES [1], a JSON list of
	// phrases), sent only with jobs that have one.
	VocabularyInput = "vocabulary"
	TextOutput      = "text"
	WordsOutput     = "word_timestamps"
	NumWordsOutput  = "num_words"
)

// Tensor is one input or output of the model.
type Tensor struct {
	Name, DataType string
	Dims           []int
	// Ragged: the batcher groups any lengths of this input.
	Ragged bool
	// Optional: a request may leave it out.
	Optional bool
	Comment  string
}

// Batching is Triton's dynamic batcher and queue policy for the model.
type Batching struct {
	// Preferred are the batcher's preferred sizes (none: as large as can be formed).
	Preferred []int
	// MaxQueueDelay is how long the batcher waits to fill a batch.
	MaxQueueDelay time.Duration
	// PriorityLevels and DefaultPriority: live chunks (1) overtake bulk (2).
	PriorityLevels, DefaultPriority int
	// QueueTimeout is the queue policy's default timeout (0: none), after
	// which a queued request is rejected (UNAVAILABLE: backpressure).
	QueueTimeout time.Duration
	// MaxQueueSize bounds each priority level's queue (0: unbounded).
	MaxQueueSize int
	// Comment, PreferredComment, PriorityComment and QueueComment are
	// rendered above the block and its fields.
	Comment, PriorityComment, QueueComment string
}

// Config is one model configuration (config.pbtxt).
type Config struct {
	// Header is the comment at the top of the file.
	Header string
	// Model is the model's name (empty: Name, as every shipped repository
	// names it).
	Model string
	// Backend is Triton's backend: python (model.py), or tensorrt for a
	// fixed-shape engine.
	Backend string
	// MaxBatch is max_batch_size.
	MaxBatch int
	// Buckets: audio is not ragged (only identical shapes share a batch)
	// and audio_length is required: the shape of a fixed-shape engine.
	Buckets bool
	// Unragged: audio is not ragged but audio_length stays optional, so
	// only chunks of one length share a batch (what ragged batching gains,
	// measured by the GPU benchmark's /unbatched).
	Unragged bool
	Batching Batching
	// Instances is the instance_group count, of Kind (KIND_CPU, KIND_GPU;
	// empty: Triton's choice, one on each GPU it sees or one on CPU).
	Instances       int
	Kind            string
	InstanceComment string
	// Parameters are the model parameters (model.py's engine and its
	// options), rendered in key order.
	Parameters map[string]string
	// InputTensors and OutputTensors are a model's own tensors (the
	// diarization model's); nil: the speech contract's (Inputs, Outputs).
	InputTensors, OutputTensors []Tensor
}

// Inputs are the model's inputs in c's batching mode: audio FP32 [n]
// (ragged unless c.Buckets), timestamps BOOL [1] (optional), audio_length
// INT32 [1] (the true length of bucket-padded audio, required with buckets),
// vocabulary BYTES [1] (optional: a JSON list of phrases; not with buckets).
func (c Config) Inputs() []Tensor {
	length := Tensor{Name: LengthInput, DataType: "TYPE_INT32", Dims: []int{1}, Optional: !c.Buckets}
	if !c.Buckets {
		length.Comment = "True length of bucket-padded audio; not sent in ragged mode."
	}
	in := []Tensor{
		{Name: AudioInput, DataType: "TYPE_FP32", Dims: []int{-1}, Ragged: !c.Buckets && !c.Unragged},
		{Name: TimestampsInput, DataType: "TYPE_BOOL", Dims: []int{1}, Optional: true},
		length,
	}
	if c.Buckets {
		return in // fixed-shape engines take no vocabulary
	}
	return append(in, Tensor{Name: VocabularyInput, DataType: "TYPE_STRING", Dims: []int{1}, Optional: true,
		Comment: "The job's vocabulary: a JSON list of phrases the recogniser favours; only with jobs that have one."})
}

// Outputs are the model's outputs: text STRING [1], word_timestamps STRING
// [words] (one JSON object a word), num_words INT32 [1].
func Outputs() []Tensor {
	return []Tensor{
		{Name: TextOutput, DataType: "TYPE_STRING", Dims: []int{1}},
		{Name: WordsOutput, DataType: "TYPE_STRING", Dims: []int{-1}},
		{Name: NumWordsOutput, DataType: "TYPE_INT32", Dims: []int{1}},
	}
}

// WithMaxBatch is c with max_batch_size n, its preferred sizes cut to
// those below n, and n itself among them.
func (c Config) WithMaxBatch(n int) Config {
	var keep []int
	for _, p := range c.Batching.Preferred {
		if p < n {
			keep = append(keep, p)
		}
	}
	c.MaxBatch = n
	c.Batching.Preferred = append(keep, n)
	return c
}

// AddParameters adds key=value pieces (a comma-separated list, split) to
// params. A value may hold commas (length_buckets=30,45,batch_buckets=8,16):
// a piece without "=" belongs to the value before it.
func AddParameters(params map[string]string, pieces []string) error {
	last := ""
	for _, kv := range pieces {
		k, v, ok := strings.Cut(kv, "=")
		switch {
		case ok:
			params[k], last = v, k
		case last != "":
			params[last] += "," + kv
		default:
			return fmt.Errorf("model parameter %q: want key=value", kv)
		}
	}
	return nil
}

// WithParameters is c with params over its own.
func (c Config) WithParameters(params map[string]string) Config {
	merged := make(map[string]string, len(c.Parameters)+len(params))
	for k, v := range c.Parameters {
		merged[k] = v
	}
	for k, v := range params {
		merged[k] = v
	}
	c.Parameters = merged
	return c
}

// Render is c's config.pbtxt.
func (c Config) Render() string {
	var b strings.Builder
	comment(&b, "", c.Header)
	name := c.Model
	if name == "" {
		name = Name
	}
	fmt.Fprintf(&b, "name: %q\nbackend: %q\nmax_batch_size: %d\n\n", name, c.Backend, c.MaxBatch)
	in, out := c.Inputs(), Outputs()
	if c.InputTensors != nil {
		in, out = c.InputTensors, c.OutputTensors
	}
	tensors(&b, "input", in)
	tensors(&b, "output", out)
	bt := c.Batching
	b.WriteString("\n")
	comment(&b, "", bt.Comment)
	b.WriteString("dynamic_batching {\n")
	if len(bt.Preferred) > 0 {
		fmt.Fprintf(&b, "  preferred_batch_size: [ %s ]\n", ints(bt.Preferred))
	}
	fmt.Fprintf(&b, "  max_queue_delay_microseconds: %d\n", bt.MaxQueueDelay.Microseconds())
	comment(&b, "  ", bt.PriorityComment)
	fmt.Fprintf(&b, "  priority_levels: %d\n  default_priority_level: %d\n", bt.PriorityLevels, bt.DefaultPriority)
	b.WriteString("  default_queue_policy {\n")
	comment(&b, "    ", bt.QueueComment)
	b.WriteString("    timeout_action: REJECT\n")
	if bt.QueueTimeout > 0 {
		fmt.Fprintf(&b, "    default_timeout_microseconds: %d\n", bt.QueueTimeout.Microseconds())
	}
	b.WriteString("    allow_timeout_override: true\n")
	if bt.MaxQueueSize > 0 {
		fmt.Fprintf(&b, "    max_queue_size: %d\n", bt.MaxQueueSize)
	}
	b.WriteString("  }\n}\n\n")
	comment(&b, "", c.InstanceComment)
	kind := ""
	if c.Kind != "" {
		kind = " kind: " + c.Kind
	}
	fmt.Fprintf(&b, "instance_group [ { count: %d%s } ]\n", max(c.Instances, 1), kind)
	if len(c.Parameters) > 0 {
		b.WriteString("\n")
	}
	for _, k := range slices.Sorted(maps.Keys(c.Parameters)) {
		fmt.Fprintf(&b, "parameters: { key: %q value: { string_value: %q } }\n", k, c.Parameters[k])
	}
	return b.String()
}

func tensors(b *strings.Builder, kind string, ts []Tensor) {
	fmt.Fprintf(b, "%s [\n", kind)
	for i, t := range ts {
		b.WriteString("  {\n")
		comment(b, "    ", t.Comment)
		fmt.Fprintf(b, "    name: %q\n    data_type: %s\n    dims: [ %s ]\n", t.Name, t.DataType, ints(t.Dims))
		if t.Ragged {
			b.WriteString("    allow_ragged_batch: true\n")
		}
		if t.Optional {
			b.WriteString("    optional: true\n")
		}
		if i < len(ts)-1 {
			b.WriteString("  },\n")
		} else {
			b.WriteString("  }\n")
		}
	}
	b.WriteString("]\n")
}

// comment writes text as # lines at indent, wrapped as written (its own
// line breaks).
func comment(b *strings.Builder, indent, text string) {
	if text == "" {
		return
	}
	for line := range strings.SplitSeq(text, "\n") {
		if line == "" {
			fmt.Fprintf(b, "%s#\n", indent)
			continue
		}
		fmt.Fprintf(b, "%s# %s\n", indent, line)
	}
}

func ints(v []int) string {
	s := make([]string, len(v))
	for i, n := range v {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ", ")
}
