// Package asrserver serves a speech model over the KServe v2 gRPC protocol
// with the tensor contract of package triton: FP32 audio in, BYTES text and
// word timestamps out. It turns any Recognizer into something a worker
// cannot tell apart from a Triton server, which is how the project runs end
// to end without a GPU (pocketsphinx behind it) and how tests inject faults
// (package triton/tritontest).
package asrserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// SampleRate is the only rate the model accepts.
const SampleRate = 16000

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
}

type modelKey struct{}

// Model returns the model name a request to the recognizer was sent for.
func Model(ctx context.Context) string {
	s, _ := ctx.Value(modelKey{}).(string)
	return s
}

// New returns a server answering for io.Model with rec.
func New(io triton.ModelIO, rec Recognizer, platform string) *Server {
	return &Server{io: io, rec: rec, platform: platform, MaxSamples: 10 * 60 * SampleRate}
}

// Register adds the service to g.
func (s *Server) Register(g *grpc.Server) { pb.RegisterGRPCInferenceServiceServer(g, s) }

// Serve runs a gRPC server on lis until ctx is done, then stops it
// gracefully (in-flight requests finish).
func (s *Server) Serve(ctx context.Context, lis net.Listener, opts ...grpc.ServerOption) error {
	opts = append([]grpc.ServerOption{grpc.MaxRecvMsgSize(64 << 20)}, opts...)
	g := grpc.NewServer(opts...)
	s.Register(g)
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
		return status.Errorf(codes.NotFound, "unknown model %q", name)
	}
	if version != "" && version != "1" {
		return status.Errorf(codes.NotFound, "unknown version %q of model %q", version, name)
	}
	return nil
}

// ModelReady implements GRPCInferenceService.
func (s *Server) ModelReady(_ context.Context, r *pb.ModelReadyRequest) (*pb.ModelReadyResponse, error) {
	return &pb.ModelReadyResponse{Ready: s.checkModel(r.GetName(), r.GetVersion()) == nil}, nil
}

// ModelMetadata implements GRPCInferenceService.
func (s *Server) ModelMetadata(_ context.Context, r *pb.ModelMetadataRequest) (*pb.ModelMetadataResponse, error) {
	if err := s.checkModel(r.GetName(), r.GetVersion()); err != nil {
		return nil, err
	}
	type tm = pb.ModelMetadataResponse_TensorMetadata
	md := &pb.ModelMetadataResponse{
		Name: s.io.Model, Versions: []string{"1"}, Platform: s.platform,
		Inputs:  []*tm{{Name: s.io.AudioInput, Datatype: triton.TypeFP32, Shape: []int64{-1}}},
		Outputs: []*tm{{Name: s.io.TextOutput, Datatype: triton.TypeBytes, Shape: []int64{1}}},
	}
	if s.io.TimestampsInput != "" {
		md.Inputs = append(md.Inputs, &tm{Name: s.io.TimestampsInput, Datatype: triton.TypeBool, Shape: []int64{1}})
	}
	if s.io.WordsOutput != "" {
		md.Outputs = append(md.Outputs, &tm{Name: s.io.WordsOutput, Datatype: triton.TypeBytes, Shape: []int64{-1}})
	}
	if s.io.NumWordsOutput != "" {
		md.Outputs = append(md.Outputs, &tm{Name: s.io.NumWordsOutput, Datatype: triton.TypeInt32, Shape: []int64{1}})
	}
	return md, nil
}

// elements returns the element count of a shape whose leading dimensions
// (batch) are all 1, or an error.
func elements(shape []int64) (int64, error) {
	if len(shape) == 0 {
		return 0, errors.New("empty shape")
	}
	for _, d := range shape[:len(shape)-1] {
		if d != 1 {
			return 0, fmt.Errorf("shape %v: batch dimensions above 1 are not supported", shape)
		}
	}
	n := shape[len(shape)-1]
	if n < 0 {
		return 0, fmt.Errorf("shape %v: negative dimension", shape)
	}
	return n, nil
}

// decodeInputs returns the audio and timestamps flag of a request, or an
// INVALID_ARGUMENT status naming what is wrong.
func (s *Server) decodeInputs(r *pb.ModelInferRequest) ([]float32, bool, error) {
	var (
		audio      []float32
		haveAudio  bool
		timestamps bool
	)
	raw := r.GetRawInputContents()
	if len(raw) != 0 && len(raw) != len(r.GetInputs()) {
		return nil, false, status.Errorf(codes.InvalidArgument, "%d raw input contents for %d inputs", len(raw), len(r.GetInputs()))
	}
	for i, in := range r.GetInputs() {
		n, err := elements(in.GetShape())
		if err != nil {
			return nil, false, status.Errorf(codes.InvalidArgument, "input %q: %v", in.GetName(), err)
		}
		switch in.GetName() {
		case s.io.AudioInput:
			if in.GetDatatype() != triton.TypeFP32 {
				return nil, false, status.Errorf(codes.InvalidArgument, "input %q: datatype %s, want FP32", in.GetName(), in.GetDatatype())
			}
			if s.MaxSamples > 0 && n > int64(s.MaxSamples) {
				return nil, false, status.Errorf(codes.InvalidArgument, "input %q: %d samples exceeds the limit of %d", in.GetName(), n, s.MaxSamples)
			}
			if len(raw) > 0 {
				audio, err = triton.DecodeFP32(raw[i])
				if err != nil {
					return nil, false, status.Errorf(codes.InvalidArgument, "input %q: %v", in.GetName(), err)
				}
			} else {
				audio = in.GetContents().GetFp32Contents()
			}
			if int64(len(audio)) != n {
				return nil, false, status.Errorf(codes.InvalidArgument, "input %q: shape %v but %d samples", in.GetName(), in.GetShape(), len(audio))
			}
			haveAudio = true
		case s.io.TimestampsInput:
			if in.GetDatatype() != triton.TypeBool || n != 1 {
				return nil, false, status.Errorf(codes.InvalidArgument, "input %q: want BOOL [1]", in.GetName())
			}
			if len(raw) > 0 {
				timestamps = len(raw[i]) == 1 && raw[i][0] != 0
			} else {
				b := in.GetContents().GetBoolContents()
				timestamps = len(b) == 1 && b[0]
			}
		default:
			return nil, false, status.Errorf(codes.InvalidArgument, "unexpected input %q", in.GetName())
		}
	}
	if !haveAudio {
		return nil, false, status.Errorf(codes.InvalidArgument, "missing input %q", s.io.AudioInput)
	}
	return audio, timestamps, nil
}

// ModelInfer implements GRPCInferenceService.
func (s *Server) ModelInfer(ctx context.Context, r *pb.ModelInferRequest) (*pb.ModelInferResponse, error) {
	if err := s.checkModel(r.GetModelName(), r.GetModelVersion()); err != nil {
		return nil, err
	}
	audio, timestamps, err := s.decodeInputs(r)
	if err != nil {
		return nil, err
	}
	res, err := s.rec.Recognize(context.WithValue(ctx, modelKey{}, r.GetModelName()), audio, timestamps)
	if err != nil {
		if _, ok := status.FromError(err); ok {
			return nil, err
		}
		if ctx.Err() != nil {
			return nil, status.FromContextError(ctx.Err()).Err()
		}
		return nil, status.Errorf(codes.Internal, "recognize: %v", err)
	}
	return s.encodeOutputs(r, res)
}

func (s *Server) encodeOutputs(r *pb.ModelInferRequest, res triton.Result) (*pb.ModelInferResponse, error) {
	type out = pb.ModelInferResponse_InferOutputTensor
	resp := &pb.ModelInferResponse{ModelName: r.GetModelName(), ModelVersion: "1", Id: r.GetId()}
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
			return nil, status.Errorf(codes.InvalidArgument, "unknown output %q", n)
		}
	}
	if wants(s.io.TextOutput) {
		add(s.io.TextOutput, triton.TypeBytes, []int64{1}, triton.EncodeBytes([]byte(res.Text)))
	}
	if wants(s.io.WordsOutput) {
		elems := make([][]byte, 0, len(res.Words))
		for _, w := range res.Words {
			b, err := json.Marshal(w)
			if err != nil {
				return nil, status.Errorf(codes.Internal, "encode word: %v", err)
			}
			elems = append(elems, b)
		}
		add(s.io.WordsOutput, triton.TypeBytes, []int64{int64(len(elems))}, triton.EncodeBytes(elems...))
	}
	if wants(s.io.NumWordsOutput) {
		n := len(res.Words)
		if res.Words == nil {
			n = len(strings.Fields(res.Text))
		}
		add(s.io.NumWordsOutput, triton.TypeInt32, []int64{1}, triton.EncodeInt32(int32(n)))
	}
	return resp, nil
}
