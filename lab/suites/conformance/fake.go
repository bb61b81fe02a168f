package conformance

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
)

// Fake is the fake Triton (tritontest's KServe server) as a conformance target: each server is a
// kserve.Server with the scenario's batching and queue policy, answering
// as model.py's echo engine does.
type Fake struct{}

// Name is "fake".
func (Fake) Name() string { return "fake" }

// Start serves m on a free loopback port.
func (Fake) Start(m Model) (Server, error) {
	s := &confServer{m: m}
	if err := s.listen("127.0.0.1:0"); err != nil {
		return nil, err
	}
	return s, nil
}

// echoModel answers "samples N" after the model's batch time, refusing an
// empty chunk as model.py does.
type echoModel struct{ batch, row time.Duration }

func (e echoModel) Recognize(ctx context.Context, samples []float32, timestamps bool) (triton.Result, error) {
	r, err := e.RecognizeBatch(ctx, []kserve.Row{{Samples: samples, Timestamps: timestamps}})
	if err != nil {
		return triton.Result{}, err
	}
	return r[0], nil
}

func (e echoModel) RecognizeBatch(ctx context.Context, rows []kserve.Row) ([]triton.Result, error) {
	for _, r := range rows {
		if len(r.Samples) == 0 {
			return nil, status.Error(codes.InvalidArgument, "audio is empty")
		}
	}
	d := e.batch
	for _, r := range rows {
		d += time.Duration(float64(e.row) * float64(len(r.Samples)) / (30 * modelspec.SampleRate))
	}
	if d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, status.Error(codes.Unavailable, "server is shutting down")
		}
	}
	out := make([]triton.Result, len(rows))
	for i, r := range rows {
		out[i] = triton.Result{Text: tritontest.Text(len(r.Samples))}
	}
	return out, nil
}

type confServer struct {
	m    Model
	addr string

	mu   sync.Mutex
	srv  *kserve.Server
	done chan error
}

func (s *confServer) listen(addr string) error {
	var lis net.Listener
	var err error
	for try := 0; try < 50; try++ { // a killed server's port can linger a moment
		if lis, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	io := triton.DefaultModelIO()
	srv := kserve.New(io, echoModel{batch: s.m.BatchDelay, row: s.m.RowDelay}, "tritontest")
	srv.Batch = kserve.BatchConfigOf(s.m.Spec())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(context.Background(), lis) }()
	s.mu.Lock()
	s.addr, s.srv, s.done = lis.Addr().String(), srv, done
	s.mu.Unlock()
	return nil
}

func (s *confServer) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

func (s *confServer) Kill() {
	s.mu.Lock()
	srv, done := s.srv, s.done
	s.srv = nil
	s.mu.Unlock()
	if srv != nil {
		srv.Kill()
		<-done
	}
}

func (s *confServer) Restart() error {
	s.Kill()
	return s.listen(s.Addr())
}
