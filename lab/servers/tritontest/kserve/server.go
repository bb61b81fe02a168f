// Package kserve is the in-process fake of Triton Inference Server behind
// package tritontest: a KServe v2 gRPC server for the speech model contract
// of package triton (FP32 audio in, BYTES text and word timestamps out)
// around any Recognizer, with a copy of Triton's dynamic batcher, its
// statistics and system shared memory extensions. It is held to the
// conformance suite (package lab/suites/conformance) that real Triton passes.
// The worker's unit and integration tests use it for speed and fault
// injection; the demo, the chaos suite, the conformance suite and the
// tests of the shipped model repositories run real Triton. Not for
// production code.
package kserve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// SampleRate is the only rate the model accepts (the contract's).
const SampleRate = modelspec.SampleRate

// Recognizer transcribes 16 kHz mono samples in [-1, 1]. It must be safe
// for concurrent use. Errors carrying a gRPC status are returned as they
// are; others become INTERNAL.
type Recognizer interface {
	Recognize(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error)
}

// RecognizerFunc adapts a function to Recognizer.
type RecognizerFunc func(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error)

// Recognize calls f.
func (f RecognizerFunc) Recognize(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error) {
	return f(ctx, samples, timestamps)
}

// Server implements GRPCInferenceService for one model.
type Server struct {
	pb.UnimplementedGRPCInferenceServiceServer

	io       triton.ModelIO
	rec      Recognizer
	platform string
	// MaxSamples bounds one request's audio; larger requests get INVALID_ARGUMENT.
	MaxSamples int
	// Aliases are further model names served by the same recognizer (as a
	// Triton repository holding several versions of one model).
	Aliases []string
	// Batch is the model's batching. Set before Serve.
	Batch BatchConfig

	mu        sync.Mutex
	grpc      *grpc.Server // while Serve runs
	batcher   *batcher     // while Serve runs
	lastStats BatchStats

	shmMu   sync.RWMutex
	regions map[string]*shmRegion // registered shared memory, by name
}

type modelKey struct{}

// Model returns the model name a request to the recognizer was sent for.
func Model(ctx context.Context) string {
	s, _ := ctx.Value(modelKey{}).(string)
	return s
}

type vocabularyKey struct{}

// Vocabulary returns the vocabulary a request to the recognizer carried
// (nil: none).
func Vocabulary(ctx context.Context) []string {
	v, _ := ctx.Value(vocabularyKey{}).([]string)
	return v
}

// New returns a server answering for io.Model with rec.
//
// The model batches (max batch size 32, requests executed as they come)
// when io.BatchDim is set, as Triton models with a dynamic batcher do;
// change Batch before Serve for other batching.
func New(io triton.ModelIO, rec Recognizer, platform string) *Server {
	s := &Server{io: io, rec: rec, platform: platform, MaxSamples: 10 * 60 * SampleRate}
	if io.BatchDim {
		s.Batch = BatchConfig{MaxBatchSize: 32, Instances: 4}
	}
	return s
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(g, s) }

// Serve runs a gRPC server on lis until ctx is done, then stops it
// gracefully (in-flight requests finish).
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	// Requests are hundreds of KB of audio: a window that takes a whole
	// chunk without waiting for updates, and reads in few syscalls.
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20),
		grpc.InitialWindowSize(4 << 20), grpc.InitialConnWindowSize(64 << 20), grpc.ReadBufferSize(256 << 10)}, opts...)
	g := grpc.NewServer(opts...)
	s.Register(g)
	bctx, stopBatcher := context.WithCancel(context.Background())
	b := newBatcher(s.Batch, s.recognizeRows)
	var batching sync.WaitGroup
	batching.Go(func() { b.run(bctx) })
	s.mu.Lock()
	s.batcher, s.grpc = b, g
	s.mu.Unlock()
	defer func() {
		stopBatcher()
		batching.Wait()
		s.closeRegions()
		s.mu.Lock()
		s.batcher, s.grpc, s.lastStats = nil, nil, b.snapshot()
		s.mu.Unlock()
	}()
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		g.GracefulStop()
		<-errc
		return nil
	}
}

// Kill stops a serving server at once, as a crash would: connections
// close and requests in flight fail. Serve returns.
func (s *Server) Kill() {
	s.mu.Lock()
	g := s.grpc
	s.mu.Unlock()
	if g != nil {
		g.Stop()
	}
}

// ServerLive implements GRPCInferenceService.
func (s *Server) ServerLive(context.Context, *pb.ServerLiveRequest) (*pb.ServerLiveResponse, error) {
	return &pb.ServerLiveResponse{Live: true}, nil
}

// ServerReady implements GRPCInferenceService.
func (s *Server) ServerReady(context.Context, *pb.ServerReadyRequest) (*pb.ServerReadyResponse, error) {
	return &pb.ServerReadyResponse{Ready: true}, nil
}

func (s *Server) checkModel(name, version string) error {
	if name != s.io.Model && !slices.Contains(s.Aliases, name) {
		return status.Errorf(codes.NotFound, "Request for unknown model: '%s' is not found", name)
	}
	if version != "" && version != "1" {
		return status.Errorf(codes.NotFound, "Request for unknown model: '%s' version %s is not found", name, version)
	}
	return nil
}

// ModelReady implements GRPCInferenceService. An unknown model or version
// ModelReady implements GRPCInferenceService. An unknown model or version
// is not ready, without an error, as Triton answers.
func (s *Server) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return &pb.ModelReadyResponse{Ready: s.checkModel(r.GetName(), r.GetVersion()) == nil}, nil
}

// ModelMetadata implements GRPCInferenceService.
func (s *Server) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	if err := s.checkModel(r.GetName(), r.GetVersion()); err != nil {
		return nil, err
	}
	type tm = pb.ModelMetadataResponse_TensorMetadata
	dims := func(d ...int64) []int64 {
		if s.Batch.MaxBatchSize > 0 {
			return append([]int64{-1}, d...)
		}
		return d
	}
	md := &pb.ModelMetadataResponse{
		Name: s.io.Model, Versions: []string{"1"}, Platform: s.platform,
		Inputs:  []*tm{{Name: s.io.AudioInput, Datatype: triton.TypeFP32, Shape: dims(-1)}},
		Outputs: []*tm{{Name: s.io.TextOutput, Datatype: triton.TypeBytes, Shape: dims(1)}},
	}
	if s.io.TimestampsInput != "" {
		md.Inputs = append(md.Inputs, &tm{Name: s.io.TimestampsInput, Datatype: triton.TypeBool, Shape: dims(1)})
	}
	if s.io.LengthInput != "" {
		md.Inputs = append(md.Inputs, &tm{Name: s.io.LengthInput, Datatype: triton.TypeInt32, Shape: dims(1)})
	}
	if s.io.WordsOutput != "" {
		md.Outputs = append(md.Outputs, &tm{Name: s.io.WordsOutput, Datatype: triton.TypeBytes, Shape: dims(-1)})
	}
	if s.io.NumWordsOutput != "" {
		md.Outputs = append(md.Outputs, &tm{Name: s.io.NumWordsOutput, Datatype: triton.TypeInt32, Shape: dims(1)})
	}
	return md, nil
}

// request is a decoded ModelInfer request.
type request struct {
	rows       []Row
	shape      int64  // audio elements per row, for batch matching
	inputs     string // the names of its inputs: only requests with the same set share a batch
	timestamps bool
	vocabulary []string
	priority   uint64
	timeout    time.Duration
}

// rowsOf checks a shape against the model's batching and returns its batch
// size and per-row element count.
func (s *Server) rowsOf(name string, shape []int64) (batch int, per int64, err error) {
	want := 1
	if s.Batch.MaxBatchSize > 0 {
		want = 2
	}
	if len(shape) != want {
		if s.Batch.MaxBatchSize > 0 {
			return 0, 0, fmt.Errorf("input %q: shape %v: the model has max_batch_size %d, so inputs need a batch dimension", name, shape, s.Batch.MaxBatchSize)
		}
		return 0, 0, fmt.Errorf("input %q: shape %v: the model does not batch, so inputs take no batch dimension", name, shape)
	}
	for _, d := range shape {
		if d < 0 {
			return 0, 0, fmt.Errorf("input %q: shape %v: negative dimension", name, shape)
		}
	}
	batch = 1
	if s.Batch.MaxBatchSize > 0 {
		batch = int(shape[0])
		if batch < 1 || batch > s.Batch.MaxBatchSize {
			return 0, 0, fmt.Errorf("input %q: batch size %d is outside 1..%d (max_batch_size)", name, batch, s.Batch.MaxBatchSize)
		}
	}
	return batch, shape[len(shape)-1], nil
}

// decodeInputs returns the decoded request, or an INVALID_ARGUMENT status
// naming what is wrong, as Triton would. The shared memory regions it
// reads are added to held, in use until the caller releases them.
func (s *Server) decodeInputs(r *pb.ModelInferRequest, held *[]*shmRegion) (request, error) {
	var (
		out       request
		audio     []float32
		lengths   []int32
		haveAudio bool
		batch     = -1
	)
	invalid := func(format string, args ...any) (request, error) {
		return request{}, status.Errorf(codes.InvalidArgument, format, args...)
	}
	raw := r.GetRawInputContents()
	next := 0 // raw contents are those of the inputs not in shared memory, in order
	for _, in := range r.GetInputs() {
		// data: the input's bytes, from shared memory or raw contents (have
		// set), or else its typed contents are read below.
		var data []byte
		have := false
		region, offset, size, inShm, err := shmParams(in)
		switch {
		case err != nil:
			return invalid("%v", err)
		case inShm && in.GetContents() != nil:
			return invalid("unexpected 'content' provided when using shared memory for input tensor '%s' for model '%s'", in.GetName(), r.GetModelName())
		case inShm:
			if data, err = s.readShm(region, offset, size, held); err != nil {
				return request{}, err
			}
			have = true
		case len(raw) > 0 && in.GetContents() != nil:
			return invalid("contents field must not be specified when using raw_input_contents for '%s'", in.GetName())
		case in.GetContents() != nil:
		case next < len(raw):
			data, have = raw[next], true
			next++
		default:
			return invalid("unable to find data for input tensor '%s' for model '%s' in request.", in.GetName(), r.GetModelName())
		}
		b, per, err := s.rowsOf(in.GetName(), in.GetShape())
		if err != nil {
			return invalid("%v", err)
		}
		if batch >= 0 && b != batch {
			return invalid("input %q: batch size %d differs from the other inputs' %d", in.GetName(), b, batch)
		}
		batch = b
		out.inputs += in.GetName() + "\x00"
		switch in.GetName() {
		case s.io.AudioInput:
			if in.GetDatatype() != triton.TypeFP32 {
				return invalid("input %q: datatype %s, want FP32", in.GetName(), in.GetDatatype())
			}
			if s.MaxSamples > 0 && per > int64(s.MaxSamples) {
				return invalid("input %q: %d samples exceeds the limit of %d", in.GetName(), per, s.MaxSamples)
			}
			if have {
				audio, err = triton.DecodeFP32(data)
				if err != nil {
					return invalid("input %q: %v", in.GetName(), err)
				}
			} else {
				audio = in.GetContents().GetFp32Contents()
			}
			if int64(len(audio)) != int64(b)*per {
				return invalid("input %q: shape %v but %d samples", in.GetName(), in.GetShape(), len(audio))
			}
			out.shape = per
			haveAudio = true
		case s.io.TimestampsInput:
			if in.GetDatatype() != triton.TypeBool || per != 1 {
				return invalid("input %q: want BOOL [1]", in.GetName())
			}
			if have {
				out.timestamps = len(data) >= 1 && data[0] != 0
			} else {
				v := in.GetContents().GetBoolContents()
				out.timestamps = len(v) >= 1 && v[0]
			}
		case s.io.VocabularyInput:
			if s.io.VocabularyInput == "" || in.GetDatatype() != triton.TypeBytes || per != 1 || b != 1 {
				return invalid("input %q: want BYTES [1] in a request of one row", in.GetName())
			}
			var elems [][]byte
			if have {
				if elems, err = triton.DecodeBytes(data); err != nil {
					return invalid("input %q: %v", in.GetName(), err)
				}
			} else {
				elems = in.GetContents().GetBytesContents()
			}
			if len(elems) != 1 || json.Unmarshal(elems[0], &out.vocabulary) != nil || len(out.vocabulary) == 0 {
				return invalid("input 'vocabulary' is not a JSON list of phrases")
			}
		case s.io.LengthInput:
			if in.GetDatatype() != triton.TypeInt32 || per != 1 {
				return invalid("input %q: want INT32 [1]", in.GetName())
			}
			if have {
				lengths, err = triton.DecodeInt32(data)
				if err != nil {
					return invalid("input %q: %v", in.GetName(), err)
				}
			} else {
				lengths = in.GetContents().GetIntContents()
			}
			if len(lengths) != b {
				return invalid("input %q: %d values for a batch of %d", in.GetName(), len(lengths), b)
			}
		default:
			return invalid("unexpected inference input '%s' for model '%s'", in.GetName(), s.io.Model)
		}
	}
	if next != len(raw) {
		return invalid("%d raw input contents for %d inputs not in shared memory", len(raw), next)
	}
	if !haveAudio {
		return invalid("expected %d inputs but got %d inputs for model '%s': missing %q", 1, len(r.GetInputs()), s.io.Model, s.io.AudioInput)
	}
	for row := range batch {
		samples := audio[int64(row)*out.shape : int64(row+1)*out.shape]
		if lengths != nil {
			n := lengths[row]
			if n < 0 || int64(n) > out.shape {
				return invalid("input %q: length %d outside the %d samples sent", s.io.LengthInput, n, out.shape)
			}
			samples = samples[:n] // the padding is never heard
		}
		out.rows = append(out.rows, Row{Samples: samples, Timestamps: out.timestamps, Model: r.GetModelName(), Vocabulary: out.vocabulary})
	}
	if p, ok := r.GetParameters()["priority"]; ok {
		out.priority = p.GetUint64Param()
		if out.priority == 0 && p.GetInt64Param() > 0 {
			out.priority = uint64(p.GetInt64Param())
		}
	}
	if p, ok := r.GetParameters()["timeout"]; ok {
		us := p.GetInt64Param()
		if us == 0 {
			us = int64(p.GetUint64Param())
		}
		out.timeout = time.Duration(us) * time.Microsecond
	}
	return out, nil
}

// ModelInfer implements GRPCInferenceService.
func (s *Server) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if err := s.checkModel(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	var held []*shmRegion // the shared memory regions it reads: in use until it ends
	defer func() { release(held) }()
	req, err := s.decodeInputs(r, &held)
	if err != nil {
		return nil, err
	}
	var results []triton.Result
	if b := s.running(); b != nil {
		results, err = b.submit(ctx, req.rows, req.shape, req.inputs, req.priority, req.timeout)
	} else {
		results, err = s.recognizeRows(ctx, req.rows)
	}
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "recognize: %v", err)
	}
	return s.encodeOutputs(r, results)
}

// recognizeRows runs a batch: at once on a BatchRecognizer, else row by
// row concurrently (the CPU server spreads them over its decoder pool),
// each with its request's model name in the context (see Model).
func (s *Server) recognizeRows(ctx context.Context, rows []Row) ([]triton.Result, error) {
	if br, ok := s.rec.(BatchRecognizer); ok {
		return br.RecognizeBatch(ctx, rows)
	}
	results := make([]triton.Result, len(rows))
	errs := make([]error, len(rows))
	var wg sync.WaitGroup
	for i, row := range rows {
		wg.Go(func() {
			rctx := context.WithValue(context.WithValue(ctx, modelKey{}, row.Model), vocabularyKey{}, row.Vocabulary)
			results[i], errs[i] = s.rec.Recognize(rctx, row.Samples, row.Timestamps)
		})
	}
	wg.Wait()
	return results, errors.Join(errs...)
}

// running returns the batcher while Serve runs, else nil.
func (s *Server) running() *batcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.batcher
}

// Queued returns the requests waiting in the batcher's queue.
func (s *Server) Queued() int {
	b := s.running()
	if b == nil {
		return 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.queue)
}

// ModelStatistics implements Triton's statistics extension for the served
// model: requests, executions, and the time requests spent queued and
// computing. Only the batcher's requests are counted.
func (s *Server) ModelStatistics(_ context.Context, r *pb.ModelStatisticsRequest) (*pb.ModelStatisticsResponse, error) {
	name := r.GetName()
	if name == "" {
		name = s.io.Model
	}
	if err := s.checkModel(name, r.GetVersion()); err != nil {
		return nil, err
	}
	st := s.BatchStats()
	dur := func(n, ns uint64) *pb.StatisticDuration { return &pb.StatisticDuration{Count: n, Ns: ns} }
	done := st.Requests + st.Failed
	return &pb.ModelStatisticsResponse{ModelStats: []*pb.ModelStatistics{{
		Name: name, Version: "1",
		InferenceCount: uint64(st.Rows), ExecutionCount: uint64(st.Batches),
		InferenceStats: &pb.InferStatistics{
			Success: dur(st.Requests, 0), Fail: dur(st.Failed, 0),
			Queue: dur(done, st.QueueNs), ComputeInfer: dur(done, st.ComputeNs),
		},
	}}}, nil
}

// BatchStats returns how many batches the server executed and their sizes.
func (s *Server) BatchStats() BatchStats {
	if b := s.running(); b != nil {
		return b.snapshot()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastStats
}

func (s *Server) encodeOutputs(r *pb.ModelInferRequest, results []triton.Result) (*pb.ModelInferResponse, error) {
	type out = pb.ModelInferResponse_InferOutputTensor
	resp := &pb.ModelInferResponse{ModelName: r.GetModelName(), ModelVersion: "1", Id: r.GetId()}
	shape := func(dims ...int64) []int64 {
		if s.Batch.MaxBatchSize > 0 {
			return append([]int64{int64(len(results))}, dims...)
		}
		return dims
	}
	add := func(name, dtype string, shape []int64, raw []byte) {
		resp.Outputs = append(resp.Outputs, &out{Name: name, Datatype: dtype, Shape: shape})
		resp.RawOutputContents = append(resp.RawOutputContents, raw)
	}
	requested := r.GetOutputs()
	wants := func(name string) bool {
		if name == "" {
			return false
		}
		if len(requested) == 0 {
			return true // KServe: no outputs listed means all outputs
		}
		for _, o := range requested {
			if o.GetName() == name {
				return true
			}
		}
		return false
	}
	for _, o := range requested {
		if n := o.GetName(); n != s.io.TextOutput && n != s.io.WordsOutput && n != s.io.NumWordsOutput {
			return nil, status.Errorf(codes.InvalidArgument, "unexpected inference output '%s' for model '%s'", n, s.io.Model)
		}
	}
	if wants(s.io.TextOutput) {
		texts := make([][]byte, len(results))
		for i, res := range results {
			texts[i] = []byte(res.Text)
		}
		add(s.io.TextOutput, triton.TypeBytes, shape(1), triton.EncodeBytes(texts...))
	}
	if wants(s.io.WordsOutput) {
		// A batched BYTES output is rectangular: rows with fewer words are
		// padded with empty elements, which clients skip.
		width := 0
		for _, res := range results {
			width = max(width, len(res.Words))
		}
		var elems [][]byte
		for _, res := range results {
			for j := range width {
				if j >= len(res.Words) {
					elems = append(elems, nil)
					continue
				}
				b, err := json.Marshal(res.Words[j])
				if err != nil {
					return nil, status.Errorf(codes.Internal, "encode word: %v", err)
				}
				elems = append(elems, b)
			}
		}
		add(s.io.WordsOutput, triton.TypeBytes, shape(int64(width)), triton.EncodeBytes(elems...))
	}
	if wants(s.io.NumWordsOutput) {
		counts := make([]int32, len(results))
		for i, res := range results {
			n := len(res.Words)
			if res.Words == nil {
				n = len(strings.Fields(res.Text))
			}
			counts[i] = int32(n)
		}
		add(s.io.NumWordsOutput, triton.TypeInt32, shape(1), triton.EncodeInt32(counts...))
	}
	return resp, nil
}
