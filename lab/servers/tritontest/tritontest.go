// Package tritontest runs an in-process KServe v2 gRPC server on a real
// loopback socket for tests, with the speech model contract of package
// triton, a latency model and fault injection. Its default recognizer
// answers "samples N" for N samples of audio, so tests can check that each
// transcript came from its own input. Not for production code.
package tritontest

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
)

// Server is a running fake.
type Server struct {
	Addr string

	mu      sync.Mutex
	faults  []error // returned by the next requests, in order
	latency time.Duration
	gate    chan struct{} // while non-nil, requests wait for it to close
	started chan struct{} // receives one value per request that reaches the recognizer
	calls   atomic.Int64
	models  map[string]int // requests per model name
	// vocabularies: each row's that came with one, in order.
	vocabularies [][]string
	srv          *kserve.Server
	recog        kserve.Recognizer
	stop         context.CancelFunc
	serveErr     chan error
	close        sync.Once
}

// Fingerprint is the samples' count and a hash of their bits: a
// recognizer that answers it shows a test exactly which samples a request
// carried (see Server.SetRecognizer).
func Fingerprint(x []float32) string {
	h := fnv.New64a()
	var b [4]byte
	for _, v := range x {
		bits := math.Float32bits(v)
		b[0], b[1], b[2], b[3] = byte(bits), byte(bits>>8), byte(bits>>16), byte(bits>>24)
		h.Write(b[:])
	}
	return fmt.Sprintf("n%d:%016x", len(x), h.Sum64())
}

// Text is what the default recognizer answers for n samples.
func Text(n int) string { return fmt.Sprintf("samples %d", n) }

// Start serves the default model contract on 127.0.0.1 until the test ends.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Listen("127.0.0.1:0", triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Options configure a fake beyond its model contract.
type Options struct {
	Aliases []string            // further model names it answers for
	Batch   *kserve.BatchConfig // nil: kserve.New's default
}

// StartWith serves the default model contract with options until the test ends.
func StartWith(t testing.TB, opts Options) *Server {
	t.Helper()
	s, err := ListenWith("127.0.0.1:0", triton.DefaultModelIO(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Listen serves io on addr until Close, answering also for the models
// named in aliases.
func Listen(addr string, io triton.ModelIO, aliases ...string) (*Server, error) {
	return ListenWith(addr, io, Options{Aliases: aliases})
}

// ListenWith serves io on addr with options until Close.
func ListenWith(addr string, io triton.ModelIO, opts Options) (*Server, error) {
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{Addr: lis.Addr().String(), stop: cancel, serveErr: make(chan error, 1), started: make(chan struct{}, 1024), models: map[string]int{}}
	s.recog = kserve.RecognizerFunc(func(_ context.Context, samples []float32, timestamps bool) (triton.Result, error) {
		r := triton.Result{Text: Text(len(samples))}
		if timestamps {
			d := float64(len(samples)) / kserve.SampleRate
			r.Words = []triton.Word{{Word: "samples", Start: 0, End: d / 2}, {Word: fmt.Sprint(len(samples)), Start: d / 2, End: d}}
		}
		return r, nil
	})
	srv := kserve.New(io, kserve.RecognizerFunc(s.recognize), "tritontest")
	srv.Aliases = opts.Aliases
	if opts.Batch != nil {
		srv.Batch = *opts.Batch
	}
	s.srv = srv
	go func() { s.serveErr <- srv.Serve(ctx, lis) }()
	return s, nil
}

// Close stops the server, letting requests in flight finish. It may be
// called more than once.
func (s *Server) Close() {
	s.close.Do(func() {
		s.Release()
		s.stop()
		<-s.serveErr
	})
}

func (s *Server) recognize(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error) {
	s.calls.Add(1)
	select {
	case s.started <- struct{}{}:
	default:
	}
	s.mu.Lock()
	s.models[kserve.Model(ctx)]++
	if v := kserve.Vocabulary(ctx); v != nil {
		s.vocabularies = append(s.vocabularies, v)
	}
	var fault error
	if len(s.faults) > 0 {
		fault, s.faults = s.faults[0], s.faults[1:]
	}
	latency, gate, recog := s.latency, s.gate, s.recog
	s.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return triton.Result{}, status.FromContextError(ctx.Err()).Err()
		}
	}
	if latency > 0 {
		select {
		case <-time.After(latency):
		case <-ctx.Done():
			return triton.Result{}, status.FromContextError(ctx.Err()).Err()
		}
	}
	if fault != nil {
		return triton.Result{}, fault
	}
	return recog.Recognize(ctx, samples, timestamps)
}

// SetRecognizer replaces the default recognizer.
func (s *Server) SetRecognizer(r kserve.Recognizer) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recog = r
}

// Fail makes the next n requests fail with a gRPC status of code.
func (s *Server) Fail(code codes.Code, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for range n {
		s.faults = append(s.faults, status.Errorf(code, "injected fault: %s", code))
	}
}

// Heal drops the faults Fail queued that requests have not yet met.
func (s *Server) Heal() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = nil
}

// SetLatency delays every request by d.
func (s *Server) SetLatency(d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.latency = d
}

// Hold makes requests wait until Release.
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate == nil {
		s.gate = make(chan struct{})
	}
}

// Release lets held and future requests through.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gate != nil {
		close(s.gate)
		s.gate = nil
	}
}

// Started receives a value each time a request reaches the recognizer.
func (s *Server) Started() <-chan struct{} { return s.started }

// Vocabularies returns the vocabulary of each row recognised with one, in
// the order they came.
func (s *Server) Vocabularies() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.vocabularies)
}

// ModelCalls returns the number of inference requests for a model name.
func (s *Server) ModelCalls(model string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.models[model]
}

// BatchStats returns the batches the fake's batcher executed.
func (s *Server) BatchStats() kserve.BatchStats { return s.srv.BatchStats() }

// Calls returns the number of rows recognised (a batch of n counts n).
func (s *Server) Calls() int64 { return s.calls.Load() }
