package kserve_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// batchRequest builds a request of rows rows of n samples each.
func batchRequest(rows, n int) *pb.ModelInferRequest {
	io := triton.DefaultModelIO()
	r := io.NewRequest(triton.Request{Samples: make([]float32, rows*n), Timestamps: true})
	r.Inputs[0].Shape = []int64{int64(rows), int64(n)}
	r.Inputs[1].Shape = []int64{int64(rows), 1}
	r.RawInputContents[1] = make([]byte, rows)
	for i := range r.RawInputContents[1] {
		r.RawInputContents[1][i] = 1
	}
	return r
}

// Cases Triton accepts and rejects, checked on the server's own methods.
func TestTritonFidelity(t *testing.T) {
	ctx := context.Background()
	srv := echo() // max batch size 32
	if _, err := srv.ModelInfer(ctx, batchRequest(32, 4)); err != nil {
		t.Errorf("batch of 32 (the max): %v", err)
	}
	if _, err := srv.ModelInfer(ctx, batchRequest(33, 4)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("batch of 33: %v, want InvalidArgument", err)
	}
	noBatch := triton.DefaultModelIO()
	noBatch.BatchDim = false
	if _, err := srv.ModelInfer(ctx, noBatch.NewRequest(triton.Request{Samples: make([]float32, 4)})); status.Code(err) != codes.InvalidArgument {
		t.Errorf("no batch dimension on a batching model: %v, want InvalidArgument", err)
	}
	both := batchRequest(1, 4)
	both.Inputs[0].Contents = &pb.InferTensorContents{Fp32Contents: make([]float32, 4)}
	if _, err := srv.ModelInfer(ctx, both); status.Code(err) != codes.InvalidArgument {
		t.Errorf("raw and typed contents together: %v, want InvalidArgument", err)
	}
	for _, r := range []*pb.ModelReadyRequest{{Name: "nope"}, {Name: "asr", Version: "7"}} {
		// Triton answers that the model is not ready, without an error
		// (the conformance suite's "unknown model").
		if mr, err := srv.ModelReady(ctx, r); err != nil || mr.GetReady() {
			t.Errorf("ModelReady(%v): %v, %v, want not ready", r, mr, err)
		}
	}
	resp, err := srv.ModelInfer(ctx, batchRequest(3, 4))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range resp.GetOutputs() {
		if o.GetShape()[0] != 3 {
			t.Errorf("output %s shape %v lost the batch dimension", o.GetName(), o.GetShape())
		}
		if o.GetName() == "text" {
			texts, _ := triton.DecodeBytes(resp.GetRawOutputContents()[i])
			if len(texts) != 3 {
				t.Errorf("%d texts for a batch of 3", len(texts))
			}
		}
	}
	// A model without batching takes no batch dimension.
	plain := kserve.New(noBatch, srv2rec(), "test")
	if _, err := plain.ModelInfer(ctx, noBatch.NewRequest(triton.Request{Samples: make([]float32, 4)})); err != nil {
		t.Errorf("max_batch_size 0: %v", err)
	}
	if _, err := plain.ModelInfer(ctx, batchRequest(1, 4)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("batch dimension on a non-batching model: %v", err)
	}
}

func srv2rec() kserve.Recognizer {
	return kserve.RecognizerFunc(func(context.Context, []float32, bool) (triton.Result, error) {
		return triton.Result{Text: "x"}, nil
	})
}

// serve runs srv on a loopback socket and returns a client for it.
func serve(t *testing.T, srv *kserve.Server, io triton.ModelIO) *triton.Client {
	t.Helper()
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	c, err := triton.Dial(lis.Addr().String(), io)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	return c
}

// gated recognises only when let through, counting calls per length.
type gated struct {
	mu    sync.Mutex
	calls map[int]int
	order []int // lengths in the order they reached the recognizer
	gate  chan struct{}
}

func (g *gated) Recognize(ctx context.Context, s []float32, _ bool) (triton.Result, error) {
	g.mu.Lock()
	g.calls[len(s)]++
	g.order = append(g.order, len(s))
	g.mu.Unlock()
	select {
	case <-g.gate:
	case <-ctx.Done():
	}
	return triton.Result{Text: "x"}, nil
}

func (g *gated) count(n int) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls[n]
}

// A request whose client gave up while it waited in the queue is dropped,
// not computed; a full queue answers "Exceeds maximum queue size"; a queue
// timeout answers "Request timeout expired".
func TestBatcherDropsAbandonedAndBoundsQueue(t *testing.T) {
	g := &gated{calls: map[int]int{}, gate: make(chan struct{})}
	io := triton.DefaultModelIO()
	srv := kserve.New(io, g, "test")
	srv.Batch = kserve.BatchConfig{MaxBatchSize: 4, Instances: 1, MaxQueueSize: 2}
	c := serve(t, srv, io)
	busy := make(chan error, 1)
	go func() {
		_, err := c.Infer(context.Background(), triton.Request{Samples: make([]float32, 10)})
		busy <- err
	}()
	testwait.For(t, "the only instance to be busy", func() bool { return g.count(10) == 1 }) // the only instance is busy
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	if _, err := c.Infer(ctx, triton.Request{Samples: make([]float32, 20)}); err == nil {
		t.Fatal("abandoned request answered")
	}
	cancel()
	testwait.For(t, "the cancelled request to leave the queue", func() bool { return queued(srv) == 0 }) // dropped from the queue once the server sees the cancellation
	// Queue of 2: a third waiting request is refused.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range 2 {
		wg.Go(func() { _, errs[i] = c.Infer(context.Background(), triton.Request{Samples: make([]float32, 30)}) })
	}
	testwait.For(t, "queued", func() bool { return queued(srv) == 2 })
	_, errs[2] = c.Infer(context.Background(), triton.Request{Samples: make([]float32, 30)})
	if errs[2] == nil || !strings.Contains(errs[2].Error(), "Exceeds maximum queue size") {
		t.Errorf("third request: %v, want UNAVAILABLE Exceeds maximum queue size", errs[2])
	}
	close(g.gate)
	wg.Wait()
	if err := <-busy; err != nil {
		t.Fatal(err)
	}
	if n := g.count(20); n != 0 {
		t.Errorf("abandoned request computed %d times", n)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Errorf("queued requests: %v", errs[:2])
	}
}

func queued(srv *kserve.Server) int { return srv.Queued() }

// The batcher batches only identical shapes unless ragged, sends the
// largest preferred size it can form at once, and otherwise waits up to the
// queue delay.
func TestBatcherSemantics(t *testing.T) {
	for _, ragged := range []bool{false, true} {
		gate := make(chan struct{})
		rec := kserve.RecognizerFunc(func(_ context.Context, s []float32, _ bool) (triton.Result, error) {
			if len(s) == 1 {
				<-gate // the first request keeps the only instance busy
			}
			return triton.Result{Text: "x"}, nil
		})
		io := triton.DefaultModelIO()
		srv := kserve.New(io, rec, "test")
		srv.Batch = kserve.BatchConfig{MaxBatchSize: 8, PreferredSizes: []int{4, 8}, MaxQueueDelay: 300 * time.Millisecond, Instances: 1, Ragged: ragged}
		c := serve(t, srv, io)
		var wg sync.WaitGroup
		infer := func(n int) {
			if _, err := c.Infer(context.Background(), triton.Request{Samples: make([]float32, n)}); err != nil {
				t.Error(err)
			}
		}
		wg.Go(func() { infer(1) })
		testwait.For(t, "the first batch", func() bool { return srv.BatchStats().Batches == 1 })
		for i := range 8 { // four of one length, then four of another, queued in turn
			wg.Go(func() { infer(100 + 100*(i/4)) })
			testwait.For(t, "queued", func() bool { return queued(srv) == i+1 })
		}
		close(gate)
		wg.Wait()
		st := srv.BatchStats()
		if ragged && st.Sizes[8] != 1 {
			t.Errorf("ragged: batches %+v, want one preferred batch of 8 mixed lengths", st)
		}
		if !ragged && st.Sizes[4] != 2 {
			t.Errorf("identical shapes only: batches %+v, want two of 4", st)
		}
		// A lone request waits out the queue delay, then goes alone.
		t0 := time.Now()
		infer(50)
		if d := time.Since(t0); d < 250*time.Millisecond {
			t.Errorf("lone request sent after %v, want the 300ms queue delay", d)
		}
	}
}

// Higher priority (1) overtakes queued requests at the default level (0 is
// the default, 2 of 2, as in Triton); a queue
// timeout answers "Request timeout expired".
func TestBatcherPriorityAndQueueTimeout(t *testing.T) {
	g := &gated{calls: map[int]int{}, gate: make(chan struct{})}
	io := triton.DefaultModelIO()
	srv := kserve.New(io, g, "test")
	srv.Batch = kserve.BatchConfig{MaxBatchSize: 1, Instances: 1, PriorityLevels: 2, DefaultQueueTimeout: time.Minute}
	c := serve(t, srv, io)
	var wg sync.WaitGroup
	infer := func(n int, prio uint64) {
		if _, err := c.Infer(context.Background(), triton.Request{Samples: make([]float32, n), Priority: prio}); err != nil {
			t.Error(err)
		}
	}
	wg.Go(func() { infer(1, 0) })
	testwait.For(t, "the instance to be busy", func() bool { return g.count(1) == 1 })
	wg.Go(func() { infer(2, 0) }) // bulk, queued first
	testwait.For(t, "queued", func() bool { return queued(srv) == 1 })
	wg.Go(func() { infer(3, 1) }) // live, queued second
	testwait.For(t, "queued", func() bool { return queued(srv) == 2 })
	_, err := c.Infer(context.Background(), triton.Request{Samples: make([]float32, 4), QueueTimeout: 20 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "Request timeout expired") {
		t.Errorf("queue timeout: %v", err)
	}
	close(g.gate)
	wg.Wait()
	if g.order[1] != 3 || g.order[2] != 2 {
		t.Errorf("execution order %v, want the priority-1 request before the earlier one without", g.order)
	}
}
