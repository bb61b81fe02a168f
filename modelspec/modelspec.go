// Package modelspec is the contract between the worker and its Triton
// model as data: the model's name, the sample rate it takes, its tensors,
// its batching policy, instances and parameters, and the one renderer of
// its config.pbtxt. A Config becomes Triton's own ModelConfig message
// (package configpb: the generated types of Triton's model_config.proto,
// with its field names and numbers), which protobuf's text format encodes:
// every rendering is a configuration Triton reads as written, and a model
// that needs sequence batching, implicit state or an ensemble builds that
// message and renders it with Text. The shipped configurations
// (deploy/triton) are rendered from the values here and checked current;
// the worker, the client, the fake, the real-Triton runner and the
// benchmarks read them here instead of keeping copies. A leaf on the
// standard library and protobuf's runtime.
package modelspec

import (
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/prototext"

	"github.com/fleetscribe/fleetscribe/modelspec/configpb"
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

// The instance kinds a Config takes.
const (
	KindAuto = configpb.ModelInstanceGroup_KIND_AUTO
	KindGPU  = configpb.ModelInstanceGroup_KIND_GPU
	KindCPU  = configpb.ModelInstanceGroup_KIND_CPU
)

// ParseKind is the instance kind named s (KIND_AUTO, KIND_GPU, KIND_CPU;
// empty: KIND_AUTO).
func ParseKind(s string) (configpb.ModelInstanceGroup_Kind, error) {
	if s == "" {
		return KindAuto, nil
	}
	k, ok := configpb.ModelInstanceGroup_Kind_value[s]
	if !ok || k == int32(configpb.ModelInstanceGroup_KIND_MODEL) {
		return 0, fmt.Errorf("instance kind %q: want KIND_AUTO, KIND_GPU or KIND_CPU", s)
	}
	return configpb.ModelInstanceGroup_Kind(k), nil
}

// Tensor is one input or output of the model.
type Tensor struct {
	Name     string
	DataType configpb.DataType
	Dims     []int
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
	// Instances is the instance_group count, of Kind (KindCPU, KindGPU;
	// KindAuto: Triton's choice, one on each GPU it sees or one on CPU).
	Instances       int
	Kind            configpb.ModelInstanceGroup_Kind
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
	length := Tensor{Name: LengthInput, DataType: configpb.DataType_TYPE_INT32, Dims: []int{1}, Optional: !c.Buckets}
	if !c.Buckets {
		length.Comment = "True length of bucket-padded audio; not sent in ragged mode."
	}
	in := []Tensor{
		{Name: AudioInput, DataType: configpb.DataType_TYPE_FP32, Dims: []int{-1}, Ragged: !c.Buckets && !c.Unragged},
		{Name: TimestampsInput, DataType: configpb.DataType_TYPE_BOOL, Dims: []int{1}, Optional: true},
		length,
	}
	if c.Buckets {
		return in // fixed-shape engines take no vocabulary
	}
	return append(in, Tensor{Name: VocabularyInput, DataType: configpb.DataType_TYPE_STRING, Dims: []int{1}, Optional: true,
		Comment: "The job's vocabulary: a JSON list of phrases the recogniser favours; only with jobs that have one."})
}

// Outputs are the model's outputs: text STRING [1], word_timestamps STRING
// [words] (one JSON object a word), num_words INT32 [1].
func Outputs() []Tensor {
	return []Tensor{
		{Name: TextOutput, DataType: configpb.DataType_TYPE_STRING, Dims: []int{1}},
		{Name: WordsOutput, DataType: configpb.DataType_TYPE_STRING, Dims: []int{-1}},
		{Name: NumWordsOutput, DataType: configpb.DataType_TYPE_INT32, Dims: []int{1}},
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

// tensors are c's inputs and outputs: its own where it has them (the
// diarization model's), else the speech contract's.
func (c Config) tensors() (in, out []Tensor) {
	if c.InputTensors != nil {
		return c.InputTensors, c.OutputTensors
	}
	return c.Inputs(), Outputs()
}

// Proto is c as Triton's model configuration message.
func (c Config) Proto() *configpb.ModelConfig {
	name := c.Model
	if name == "" {
		name = Name
	}
	in, out := c.tensors()
	m := &configpb.ModelConfig{Name: name, Backend: c.Backend, MaxBatchSize: int32(c.MaxBatch)}
	for _, t := range in {
		m.Input = append(m.Input, &configpb.ModelInput{Name: t.Name, DataType: t.DataType, Dims: dims(t.Dims),
			AllowRaggedBatch: t.Ragged, Optional: t.Optional})
	}
	for _, t := range out {
		m.Output = append(m.Output, &configpb.ModelOutput{Name: t.Name, DataType: t.DataType, Dims: dims(t.Dims)})
	}
	bt := c.Batching
	db := &configpb.ModelDynamicBatching{
		MaxQueueDelayMicroseconds: uint64(bt.MaxQueueDelay.Microseconds()),
		PriorityLevels:            uint64(bt.PriorityLevels), DefaultPriorityLevel: uint64(bt.DefaultPriority),
		DefaultQueuePolicy: &configpb.ModelQueuePolicy{
			TimeoutAction:              configpb.ModelQueuePolicy_REJECT,
			DefaultTimeoutMicroseconds: uint64(bt.QueueTimeout.Microseconds()),
			AllowTimeoutOverride:       true, MaxQueueSize: uint32(bt.MaxQueueSize),
		},
	}
	for _, p := range bt.Preferred {
		db.PreferredBatchSize = append(db.PreferredBatchSize, int32(p))
	}
	m.SchedulingChoice = &configpb.ModelConfig_DynamicBatching{DynamicBatching: db}
	m.InstanceGroup = []*configpb.ModelInstanceGroup{{Count: int32(max(c.Instances, 1)), Kind: c.Kind}}
	if len(c.Parameters) > 0 {
		m.Parameters = make(map[string]*configpb.ModelParameter, len(c.Parameters))
		for k, v := range c.Parameters {
			m.Parameters[k] = &configpb.ModelParameter{StringValue: v}
		}
	}
	return m
}

// Render is c's config.pbtxt: Proto in Triton's text format, with c's
// comments.
func (c Config) Render() string {
	notes := []Note{
		{Path: "dynamic_batching", Text: c.Batching.Comment},
		{Path: "dynamic_batching/priority_levels", Text: c.Batching.PriorityComment},
		{Path: "dynamic_batching/default_queue_policy", Text: c.Batching.QueueComment},
		{Path: "instance_group", Text: c.InstanceComment},
	}
	in, out := c.tensors()
	for _, t := range in {
		notes = append(notes, Note{Path: "input/name=" + t.Name, Text: t.Comment})
	}
	for _, t := range out {
		notes = append(notes, Note{Path: "output/name=" + t.Name, Text: t.Comment})
	}
	return Text(c.Proto(), c.Header, notes...)
}

// Note is a comment rendered above the first line of a configuration at
// Path: the field names from the top, separated by "/", the last of them
// with "=value" where the comment belongs to one of several blocks
// (input/name=vocabulary: above the name of the input named vocabulary).
type Note struct{ Path, Text string }

// Text is m in Triton's text format (config.pbtxt), header as # lines at
// the top and each note above its field. It is protobuf's own encoding of
// the message, so every field of Triton's ModelConfig that configpb holds
// (sequence batching and its state, ensembles, ...) renders, and Triton
// reads back the message it was given. Protobuf's encoder adds a second
// space after a field's name at random (per build, so that nobody compares
// its bytes); Text takes it out, so the shipped files stay byte-stable.
func Text(m *configpb.ModelConfig, header string, notes ...Note) string {
	raw, err := prototext.MarshalOptions{Multiline: true, Indent: "  "}.Marshal(m)
	if err != nil {
		panic(fmt.Sprintf("modelspec: model %q does not encode: %v", m.GetName(), err)) // only invalid UTF-8 in a string field
	}
	byPath := map[string]string{}
	for _, n := range notes {
		if n.Text != "" {
			byPath[n.Path] = n.Text
		}
	}
	var b strings.Builder
	comment(&b, "", header)
	if header != "" {
		b.WriteString("\n")
	}
	top := b.Len()
	var stack []string
	last, lastBlock := "", false
	for line := range strings.SplitSeq(strings.TrimRight(string(raw), "\n"), "\n") {
		trimmed := strings.TrimLeft(line, " ")
		indent := line[:len(line)-len(trimmed)]
		if trimmed == "}" {
			stack = stack[:len(stack)-1]
			fmt.Fprintf(&b, "%s}\n", indent)
			continue
		}
		field, value, _ := strings.Cut(trimmed, ":")
		value = strings.TrimLeft(value, " ")
		path := strings.Join(append(stack, field), "/")
		key := path
		text, ok := byPath[key]
		if !ok {
			key = path + "=" + strings.Trim(value, `"`)
			text, ok = byPath[key]
		}
		if len(stack) == 0 && b.Len() > top && (ok || field != last && (value == "{" || lastBlock)) {
			b.WriteString("\n") // blocks of one field apart from the rest, and every commented field
		}
		if ok {
			comment(&b, indent, text)
			delete(byPath, key) // the first line at its path only
		}
		fmt.Fprintf(&b, "%s%s: %s\n", indent, field, value)
		if len(stack) == 0 {
			last, lastBlock = field, value == "{"
		}
		if value == "{" {
			stack = append(stack, field)
		}
	}
	return b.String()
}

// Parse reads a config.pbtxt as Triton does: an unknown field or a value
// of the wrong kind is an error.
func Parse(text []byte) (*configpb.ModelConfig, error) {
	var m configpb.ModelConfig
	if err := prototext.Unmarshal(text, &m); err != nil {
		return nil, fmt.Errorf("model configuration: %w", err)
	}
	return &m, nil
}

func dims(d []int) []int64 {
	out := make([]int64, len(d))
	for i, n := range d {
		out[i] = int64(n)
	}
	return out
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
