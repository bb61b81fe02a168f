package triton

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"

	"github.com/fleetscribe/fleetscribe/internal/flagext"
	"github.com/fleetscribe/fleetscribe/modelspec"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// ModelIO names the speech model and its tensors. Defaults match the
// model contract in docs/contracts.md; every name is configurable because deployed
// model repositories rarely agree.
type ModelIO struct {
	Model   string // model name in the Triton repository
	Version string // empty: the server's default policy

	AudioInput      string // FP32 [-1], 16 kHz mono samples
	TimestampsInput string // BOOL [1]; empty: the model takes no such input
	LengthInput     string // INT32 [1], the true length of padded audio; empty: not sent
	TextOutput      string // BYTES [1]
	WordsOutput     string // BYTES [-1], one JSON object per word; empty: not requested
	NumWordsOutput  string // INT32 [1]; empty: not requested
	// VocabularyInput is BYTES [1], a JSON list of phrases, sent with a
	// request that has a vocabulary; empty: the model takes none.
	VocabularyInput string

	// DiarizeModel is the diarization model of the same repository (its
	// tensors are modelspec's DiarizeInputs and DiarizeOutputs); empty: the
	// partitions serve none, and jobs asking for speakers get their
	// transcripts without.
	DiarizeModel string

	// BatchDim prepends a batch dimension of 1 to every input shape, as
	// Triton requires for models with max_batch_size > 0 (any model that
	// uses the dynamic batcher).
	BatchDim bool

	// Buckets, in samples, switch on bucket batching: each chunk is padded
	// with zeros to the smallest bucket that holds it, and its true length
	// goes in LengthInput, so Triton's batcher (which batches only
	// identical shapes) can batch chunks of different lengths for
	// fixed-shape engines. Empty: audio goes at its own length (ragged
	// batching, allow_ragged_batch on the model's audio input).
	Buckets []int
}

// Bucket returns the padded length for n samples: the smallest bucket that
// holds n, or n itself without buckets. ok is false when n is longer than
// the largest bucket.
func (m ModelIO) Bucket(n int) (padded int, ok bool) {
	if len(m.Buckets) == 0 {
		return n, true
	}
	best := -1
	for _, b := range m.Buckets {
		if b >= n && (best < 0 || b < best) {
			best = b
		}
	}
	return best, best >= 0
}

// MaxChunk returns the longest chunk the model takes whole, in samples (0:
// no limit).
func (m ModelIO) MaxChunk() int { return slices.Max(append([]int{0}, m.Buckets...)) }

// TakesVocabulary reports whether the model takes a vocabulary: it names
// an input for one, and is not a fixed-shape (bucket) model.
func (m ModelIO) TakesVocabulary() bool { return m.VocabularyInput != "" && len(m.Buckets) == 0 }

// DefaultModelIO returns the tensor names of the model contract (modelspec).
func DefaultModelIO() ModelIO {
	return ModelIO{
		Model:           modelspec.Name,
		AudioInput:      modelspec.AudioInput,
		TimestampsInput: modelspec.TimestampsInput,
		TextOutput:      modelspec.TextOutput,
		WordsOutput:     modelspec.WordsOutput,
		NumWordsOutput:  modelspec.NumWordsOutput,
		LengthInput:     modelspec.LengthInput,
		VocabularyInput: modelspec.VocabularyInput,
		DiarizeModel:    modelspec.DiarizeName,
		BatchDim:        true,
	}
}

// RegisterFlags registers the model I/O flags, with the defaults of DefaultModelIO.
func (m *ModelIO) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultModelIO()
	fs.StringVar(&m.Model, "model", d.Model, "Triton model name")
	fs.StringVar(&m.Version, "model-version", d.Version, "Triton model version (empty: server default)")
	fs.StringVar(&m.AudioInput, "model-input-audio", d.AudioInput, "name of the FP32 audio input tensor")
	fs.StringVar(&m.TimestampsInput, "model-input-timestamps", d.TimestampsInput, "name of the BOOL timestamps input tensor (empty: model has none)")
	fs.StringVar(&m.TextOutput, "model-output-text", d.TextOutput, "name of the BYTES text output tensor")
	fs.StringVar(&m.WordsOutput, "model-output-words", d.WordsOutput, "name of the BYTES word timestamps output tensor (empty: not requested)")
	fs.StringVar(&m.NumWordsOutput, "model-output-num-words", d.NumWordsOutput, "name of the INT32 word count output tensor (empty: not requested)")
	fs.StringVar(&m.VocabularyInput, "model-input-vocabulary", d.VocabularyInput, "name of the BYTES vocabulary input tensor (empty: the model takes none)\n"+
		"A JSON list of phrases, sent with the chunks of jobs that have a vocabulary; without one such jobs get bad_vocabulary records.")
	fs.StringVar(&m.DiarizeModel, "diarize-model", d.DiarizeModel, "Triton model of the diarization contract, for jobs that ask for speakers (empty: none)\n"+
		"Without one, such jobs get their transcripts without speakers and a speaker_error saying why.")
	fs.BoolVar(&m.BatchDim, "model-batch-dim", d.BatchDim, "send inputs with a leading batch dimension of 1 (models with max_batch_size > 0)")
	fs.StringVar(&m.LengthInput, "model-input-length", d.LengthInput, "name of the INT32 true-length input of bucket-padded audio (empty: none)")
	fs.Var((*bucketSeconds)(&m.Buckets), "model-buckets", "comma-separated bucket lengths in seconds, for fixed-shape models (empty: ragged batching)\nEach chunk is padded with zeros to the smallest bucket that holds it and sent with its true length; without buckets chunks go at their own length.")
}

// bucketSeconds is the -model-buckets flag: bucket lengths given in
// seconds, comma-separated, kept in samples and sorted.
type bucketSeconds []int

// String implements flag.Value.
func (b bucketSeconds) String() string {
	parts := make([]string, len(b))
	for i, n := range b {
		parts[i] = strconv.FormatFloat(float64(n)/modelspec.SampleRate, 'g', -1, 64)
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value: the whole list is replaced.
func (b *bucketSeconds) Set(v string) error {
	var l flagext.StringSliceCSV
	_ = l.Set(v)
	out := make([]int, 0, len(l))
	for _, s := range l {
		sec, err := strconv.ParseFloat(s, 64)
		if err != nil || sec <= 0 {
			return fmt.Errorf("bucket %q: want seconds > 0", s)
		}
		out = append(out, int(sec*modelspec.SampleRate))
	}
	slices.Sort(out)
	*b = out
	return nil
}

// Validate reports a configuration that cannot form a request.
func (m ModelIO) Validate() error {
	if m.Model == "" {
		return errors.New("model name is empty")
	}
	if m.AudioInput == "" || m.TextOutput == "" {
		return errors.New("model audio input and text output names are required")
	}
	if len(m.Buckets) > 0 && m.LengthInput == "" {
		return errors.New("bucket batching needs a length input (-model-input-length) so the model knows each chunk's true length")
	}
	return nil
}

// Word is one recognised word with its position in the audio, in seconds.
type Word struct {
	Word       string  `json:"word"`
	Start      float64 `json:"start"`
	End        float64 `json:"end"`
	Confidence float64 `json:"confidence,omitempty"`
}

// Result is the model's answer for one piece of audio.
type Result struct {
	Text  string
	Words []Word // nil unless timestamps were asked for and the model gives them
}

// Request is one piece of audio to transcribe.
type Request struct {
	Samples    []float32 // 16 kHz mono
	Timestamps bool      // ask for word timings
	Model      string    // empty: ModelIO.Model
	// Vocabulary is the job's phrases (contract.NormalizePhrases), sent in
	// ModelIO.VocabularyInput; nil: none.
	Vocabulary []string
	// Priority is Triton's request priority (1 is highest; 0: the model's
	// default), so live chunks overtake queued bulk ones.
	Priority uint64
	// QueueTimeout is how long the request may wait in the server's queue
	// (Triton's "timeout" parameter; 0: the model's default). Past it the
	// server answers UNAVAILABLE, which the pool treats as backpressure.
	QueueTimeout time.Duration
}

// Client talks to one Triton server (one partition).
type Client struct {
	addr string
	io   ModelIO
	conn *grpc.ClientConn
	rpc  pb.GRPCInferenceServiceClient
	shm  *sharedMemory // nil: audio goes in the request
	// hearsLast is whether the server's diarization model lists the
	// input last (diarizeLast*), learnt from its metadata at first need.
	hearsLast atomic.Int32
}

// Dial connects to a Triton server at addr ("host:port"). The connection is
// made lazily; call Ready to check the server.
func Dial(addr string, io ModelIO, opts ...grpc.DialOption) (*Client, error) {
	if err := io.Validate(); err != nil {
		return nil, err
	}
	opts = append([]grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		// A partition restarted after an MPS fault should serve again within
		// a second or two, not after gRPC's default reconnect backoff (up to
		// 2 minutes).
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}),
		// Long recordings: a 30 s chunk is 1.9 MB of FP32; allow headroom.
		// Requests marshalled into buffers not cleared first (see codec).
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20), grpc.ForceCodecV2(codec{})),
		// A chunk is hundreds of KB: write it in few syscalls, and do not
		// wait for flow-control window updates in the middle of it.
		grpc.WithWriteBufferSize(256 << 10), grpc.WithReadBufferSize(64 << 10),
		grpc.WithInitialWindowSize(4 << 20), grpc.WithInitialConnWindowSize(64 << 20),
	}, opts...)
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		return nil, fmt.Errorf("dial triton %s: %w", addr, err)
	}
	return &Client{addr: addr, io: io, conn: conn, rpc: pb.NewGRPCInferenceServiceClient(conn)}, nil
}

// Addr returns the server address the client was dialled with.
func (c *Client) Addr() string { return c.addr }

// Close closes the connection, first unregistering and removing the
// client's shared memory region, if it has one.
func (c *Client) Close() error {
	if c.shm != nil {
		c.shm.close(c)
	}
	return c.conn.Close()
}

// Live reports whether the server process is live.
func (c *Client) Live(ctx context.Context) (bool, error) {
	var p peer.Peer
	r, err := c.rpc.ServerLive(ctx, &pb.ServerLiveRequest{}, grpc.Peer(&p))
	if err != nil {
		return false, classify("server live", err, &p)
	}
	return r.GetLive(), nil
}

// Ready reports whether the server and the configured model are ready.
func (c *Client) Ready(ctx context.Context) (bool, error) {
	var p peer.Peer
	sr, err := c.rpc.ServerReady(ctx, &pb.ServerReadyRequest{}, grpc.Peer(&p))
	if err != nil {
		return false, classify("server ready", err, &p)
	}
	if !sr.GetReady() {
		return false, nil
	}
	var mp peer.Peer // its own: a failed call leaves the first call's peer in p
	mr, err := c.rpc.ModelReady(ctx, &pb.ModelReadyRequest{Name: c.io.Model, Version: c.io.Version}, grpc.Peer(&mp))
	if err != nil {
		return false, classify("model ready", err, &mp)
	}
	return mr.GetReady(), nil
}

// Metadata returns the model's declared inputs and outputs.
func (c *Client) Metadata(ctx context.Context) (*pb.ModelMetadataResponse, error) {
	var p peer.Peer
	r, err := c.rpc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: c.io.Model, Version: c.io.Version}, grpc.Peer(&p))
	if err != nil {
		return nil, classify("model metadata", err, &p)
	}
	return r, nil
}

// Infer transcribes one request. With Timestamps set, word timings are
// asked for (when the model has a timestamps input). With buckets, a chunk
// longer than the largest bucket is rejected before it is sent.
func (c *Client) Infer(ctx context.Context, r Request) (Result, error) {
	if _, ok := c.io.Bucket(len(r.Samples)); !ok {
		return Result{}, fmt.Errorf("%w: chunk of %d samples is longer than the largest bucket (%d)", ErrRejected, len(r.Samples), c.io.MaxChunk())
	}
	call := func(req *pb.ModelInferRequest) (Result, error) { return c.infer(ctx, req) }
	if res, sent, err := viaSharedMemory(ctx, c, r.Samples, func() *pb.ModelInferRequest { return c.io.newRequest(r, false) }, call); sent {
		return res, err
	}
	return call(c.io.NewRequest(r))
}

func (c *Client) infer(ctx context.Context, req *pb.ModelInferRequest) (Result, error) {
	var p peer.Peer
	resp, err := c.rpc.ModelInfer(ctx, req, grpc.Peer(&p))
	if err != nil {
		if unknownRegion(err) {
			return Result{}, err // for viaSharedMemory: Infer sends it again
		}
		return Result{}, classify("model infer", err, &p)
	}
	return c.io.ParseResponse(resp)
}

func (m ModelIO) shape(dims ...int64) []int64 {
	if m.BatchDim {
		return append([]int64{1}, dims...)
	}
	return dims
}

// NewRequest builds the ModelInfer request for r. Inputs go as raw contents.
func (m ModelIO) NewRequest(r Request) *pb.ModelInferRequest { return m.newRequest(r, true) }

// newRequest builds the ModelInfer request for r; with inline false the
// audio's raw contents are left out (its first input, the audio, then
// has to say where its samples are).
func (m ModelIO) newRequest(r Request, inline bool) *pb.ModelInferRequest {
	samples, timestamps := r.Samples, r.Timestamps
	model := m.Model
	if r.Model != "" {
		model = r.Model
	}
	n := len(samples)
	padded, _ := m.Bucket(n)
	req := &pb.ModelInferRequest{
		ModelName:    model,
		ModelVersion: m.Version,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{{
			Name: m.AudioInput, Datatype: TypeFP32, Shape: m.shape(int64(max(n, padded))),
		}},
		Outputs: []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: m.TextOutput}},
	}
	if inline {
		var raw []byte
		if padded <= n && n > 0 && nativeLittleEndian {
			// The samples' own memory is the tensor: no copy of each chunk
			// before gRPC marshals it.
			raw = unsafe.Slice((*byte)(unsafe.Pointer(&samples[0])), 4*n)
		} else {
			raw = make([]byte, 4*max(n, padded)) // padding stays zero
			encodeFP32Into(raw, samples)
		}
		req.RawInputContents = [][]byte{raw}
	}
	if len(m.Buckets) > 0 && m.LengthInput != "" {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
			Name: m.LengthInput, Datatype: TypeInt32, Shape: m.shape(1),
		})
		req.RawInputContents = append(req.RawInputContents, EncodeInt32(int32(n)))
	}
	if m.TimestampsInput != "" {
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
			Name: m.TimestampsInput, Datatype: TypeBool, Shape: m.shape(1),
		})
		req.RawInputContents = append(req.RawInputContents, EncodeBool(timestamps))
	}
	if len(r.Vocabulary) > 0 && m.TakesVocabulary() {
		list, _ := json.Marshal(r.Vocabulary) // strings: never fails
		req.Inputs = append(req.Inputs, &pb.ModelInferRequest_InferInputTensor{
			Name: m.VocabularyInput, Datatype: TypeBytes, Shape: m.shape(1),
		})
		req.RawInputContents = append(req.RawInputContents, EncodeBytes(list))
	}
	if timestamps && m.WordsOutput != "" {
		req.Outputs = append(req.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: m.WordsOutput})
	}
	if m.NumWordsOutput != "" {
		req.Outputs = append(req.Outputs, &pb.ModelInferRequest_InferRequestedOutputTensor{Name: m.NumWordsOutput})
	}
	req.Parameters = queueParameters(r.Priority, r.QueueTimeout)
	return req
}

// queueParameters are a request's Triton priority and queue timeout (none
// of either: the model's defaults).
func queueParameters(priority uint64, timeout time.Duration) map[string]*pb.InferParameter {
	if priority == 0 && timeout == 0 {
		return nil
	}
	params := map[string]*pb.InferParameter{}
	if priority > 0 {
		params["priority"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Uint64Param{Uint64Param: priority}}
	}
	if timeout > 0 {
		params["timeout"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: timeout.Microseconds()}}
	}
	return params
}

// outputBytes returns the raw contents of the named output, falling back to
// typed BYTES contents for servers that do not send raw outputs.
func outputBytes(resp *pb.ModelInferResponse, name string) ([][]byte, bool, error) {
	for i, out := range resp.GetOutputs() {
		if out.GetName() != name {
			continue
		}
		if out.GetDatatype() != TypeBytes {
			return nil, true, fmt.Errorf("%w: output %q has datatype %s, want BYTES", ErrBadResponse, name, out.GetDatatype())
		}
		if i < len(resp.GetRawOutputContents()) {
			elems, err := DecodeBytes(resp.GetRawOutputContents()[i])
			if err != nil {
				return nil, true, fmt.Errorf("%w: output %q: %w", ErrBadResponse, name, err)
			}
			return elems, true, nil
		}
		return out.GetContents().GetBytesContents(), true, nil
	}
	return nil, false, nil
}

// ParseResponse reads text and, when present, word timings from a response.
func (m ModelIO) ParseResponse(resp *pb.ModelInferResponse) (Result, error) {
	text, ok, err := outputBytes(resp, m.TextOutput)
	if err != nil {
		return Result{}, err
	}
	if !ok || len(text) != 1 {
		return Result{}, fmt.Errorf("%w: want one %q element, got %d", ErrBadResponse, m.TextOutput, len(text))
	}
	res := Result{Text: string(text[0])}
	if m.WordsOutput == "" {
		return res, nil
	}
	words, ok, err := outputBytes(resp, m.WordsOutput)
	if err != nil || !ok {
		return res, err
	}
	res.Words = make([]Word, 0, len(words))
	for i, w := range words {
		if len(w) == 0 {
			continue // padding of a batched, rectangular output
		}
		var word Word
		if err := json.Unmarshal(w, &word); err != nil {
			return Result{}, fmt.Errorf("%w: word %d of %q: %w", ErrBadResponse, i, m.WordsOutput, err)
		}
		res.Words = append(res.Words, word)
	}
	return res, nil
}
