package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// Outcome is what one scenario found on one target.
type Outcome struct {
	// Detail is a short summary of what was measured (for the table).
	Detail string
	// Codes are the gRPC codes the server answered, in the scenario's
	// order: the fake must answer the same as real Triton.
	Codes []codes.Code
}

// Scenario is one behaviour to check.
type Scenario struct {
	Name string
	// Model is the model the scenario's server serves.
	Model Model
	// Servers is how many servers of the model the scenario needs (0: 1).
	Servers int
	Run     func(ctx context.Context, ss []Server) (Outcome, error)
}

// one adapts a scenario of one server.
func one(f func(ctx context.Context, s Server) (Outcome, error)) func(context.Context, []Server) (Outcome, error) {
	return func(ctx context.Context, ss []Server) (Outcome, error) { return f(ctx, ss[0]) }
}

func echo(n int) string { return fmt.Sprintf("samples %d", n) }

func dial(s Server, io triton.ModelIO) (*triton.Client, error) { return triton.Dial(s.Addr(), io) }

func rawConn(s Server) (pb.GRPCInferenceServiceClient, func(), error) {
	conn, err := grpc.NewClient(s.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, err
	}
	return pb.NewGRPCInferenceServiceClient(conn), func() { _ = conn.Close() }, nil
}

func samples(n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(i%100) / 1000
	}
	return x
}

// concurrently runs f(i) for i < n at once and returns the errors.
func concurrently(n int, f func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errs
}

func firstErr(errs []error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// stats returns the server's statistics once they count at least
// requests requests: Triton records a request's statistics as it releases
// it, which can come after its response reached the client. It waits 10 s
// at most, then returns what it has.
func stats(ctx context.Context, c *triton.Client, requests uint64) (triton.ServerStats, error) {
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := c.Statistics(ctx)
		if err != nil || st.Requests >= requests || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Scenarios returns every scenario, in the table's order.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "ragged batches form", Model: Model{MaxBatchSize: 8, MaxQueueDelay: 50 * time.Millisecond, BatchDelay: 100 * time.Millisecond}, Run: one(raggedBatches)},
		{Name: "bucket batches form", Model: Model{MaxBatchSize: 8, Buckets: true, MaxQueueDelay: 50 * time.Millisecond, BatchDelay: 100 * time.Millisecond}, Run: one(bucketBatches)},
		{Name: "shapes never share a batch", Model: Model{MaxBatchSize: 8, Buckets: true, MaxQueueDelay: 10 * time.Millisecond, RowDelay: blockerTime}, Run: one(shapesApart)},
		{Name: "optional inputs split batches", Model: Model{MaxBatchSize: 8, MaxQueueDelay: 10 * time.Millisecond, RowDelay: blockerTime}, Run: one(optionalInputsApart)},
		{Name: "priority order", Model: blocked(1), Run: one(priorityOrder)},
		{Name: "priority 0 is the default level", Model: Model{MaxBatchSize: 1, RowDelay: blockerTime, PriorityLevels: 3, DefaultPriority: 2}, Run: one(priorityDefault)},
		{Name: "queue full is backpressure", Model: Model{MaxBatchSize: 1, BatchDelay: 150 * time.Millisecond, MaxQueueSize: 2}, Run: one(queueFull)},
		{Name: "queue size per priority level", Model: Model{MaxBatchSize: 1, RowDelay: blockerTime, MaxQueueSize: 1}, Run: one(queuePerLevel)},
		{Name: "queue timeout", Model: Model{MaxBatchSize: 1, RowDelay: blockerTime, QueueTimeout: 10 * time.Second}, Run: one(queueTimeout)},
		{Name: "request timeout only shortens", Model: blocked(1), Run: one(timeoutNeedsDefault)},
		{Name: "unknown model", Model: Model{MaxBatchSize: 8}, Run: one(unknownModel)},
		{Name: "invalid inputs", Model: Model{MaxBatchSize: 8}, Run: one(invalidInputs)},
		{Name: "shared memory", Model: Model{MaxBatchSize: 8, RowDelay: blockerTime}, Run: one(sharedMemory)},
		{Name: "client gives up", Model: blocked(1), Run: one(clientGivesUp)},
		{Name: "statistics: queue and compute", Model: Model{MaxBatchSize: 1, BatchDelay: 100 * time.Millisecond}, Run: one(statistics)},
		{Name: "SIGKILL mid-batch, restart", Model: Model{MaxBatchSize: 8, MaxQueueDelay: 20 * time.Millisecond, BatchDelay: 300 * time.Millisecond}, Servers: 2, Run: killMidBatch},
	}
}

// raggedBatches: chunks of different lengths sent at once share batches.
func raggedBatches(ctx context.Context, s Server) (Outcome, error) {
	return batchesForm(ctx, s, triton.DefaultModelIO(), func(i int) int { return 1600 + 160*i })
}

// bucketBatches: chunks padded to one bucket, with their true lengths,
// share batches, and each answer is of its true length.
func bucketBatches(ctx context.Context, s Server) (Outcome, error) {
	io := triton.DefaultModelIO()
	io.Buckets = []int{modelspec.SampleRate}
	return batchesForm(ctx, s, io, func(i int) int { return 4000 + 100*i })
}

// batchesForm sends 16 chunks of length(i) samples at once and checks that
// each answer is of its own chunk's true length and that they shared
// batches (two rows an execution or more).
func batchesForm(ctx context.Context, s Server, io triton.ModelIO, length func(i int) int) (Outcome, error) {
	c, err := dial(s, io)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	const n = 16
	errs := concurrently(n, func(i int) error {
		r, err := c.Infer(ctx, triton.Request{Samples: samples(length(i))})
		if err == nil && r.Text != echo(length(i)) {
			err = fmt.Errorf("request %d answered %q: the model must see the true length", i, r.Text)
		}
		return err
	})
	if err := firstErr(errs); err != nil {
		return Outcome{}, err
	}
	st, err := stats(ctx, c, n)
	if err != nil {
		return Outcome{}, err
	}
	mean := float64(st.Rows) / float64(max(st.Executions, 1))
	if st.Rows != n || mean < 2 {
		return Outcome{}, fmt.Errorf("%d rows in %d executions: batches did not form", st.Rows, st.Executions)
	}
	return Outcome{Detail: fmt.Sprintf("mean batch %.1f", mean)}, nil
}

// shapesApart: without ragged batching, a batch is cut at the first
// queued request of another shape: chunks of two shapes queued in turn
// (short, long, short, long) behind a running batch run one execution each,
// not two batches of two.
func shapesApart(ctx context.Context, s Server) (Outcome, error) {
	short, long := triton.DefaultModelIO(), triton.DefaultModelIO()
	short.Buckets, long.Buckets = []int{modelspec.SampleRate / 2}, []int{modelspec.SampleRate}
	cs, err := dial(s, short)
	if err != nil {
		return Outcome{}, err
	}
	defer cs.Close()
	cl, err := dial(s, long)
	if err != nil {
		return Outcome{}, err
	}
	defer cl.Close()
	errs, err := behindBlocker(ctx, s, true, 4, func(i int) error {
		c, n := cs, 1000+i
		if i%2 == 1 {
			c, n = cl, 9000+i
		}
		r, err := c.Infer(ctx, triton.Request{Samples: samples(n)})
		if err == nil && r.Text != echo(n) {
			err = fmt.Errorf("answered %q for %d samples", r.Text, n)
		}
		return err
	})
	return oneExecutionEach(ctx, cs, errs, err, "shape")
}

// optionalInputsApart: a batch is also cut at the first request whose set
// of inputs differs (with or without the optional timestamps), even with
// ragged batching.
func optionalInputsApart(ctx context.Context, s Server) (Outcome, error) {
	rpc, closeConn, err := rawConn(s)
	if err != nil {
		return Outcome{}, err
	}
	defer closeConn()
	c, err := dial(s, triton.DefaultModelIO())
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	type tensor = pb.ModelInferRequest_InferInputTensor
	errs, err := behindBlocker(ctx, s, false, 4, func(i int) error {
		n := 1000 + i
		req := &pb.ModelInferRequest{ModelName: "asr", Inputs: []*tensor{{Name: "audio", Datatype: "FP32", Shape: []int64{1, int64(n)}}},
			RawInputContents: [][]byte{make([]byte, 4*n)}}
		if i%2 == 1 {
			req.Inputs = append(req.Inputs, &tensor{Name: "timestamps", Datatype: "BOOL", Shape: []int64{1, 1}})
			req.RawInputContents = append(req.RawInputContents, []byte{1})
		}
		_, err := rpc.ModelInfer(ctx, req)
		return err
	})
	return oneExecutionEach(ctx, c, errs, err, "input set")
}

// oneExecutionEach checks, after four requests of alternating kinds were
// queued behind a blocker (errs, blockErr), that each ran in an execution
// of its own: the warm-up, the blocker and four.
func oneExecutionEach(ctx context.Context, c *triton.Client, errs []error, blockErr error, kind string) (Outcome, error) {
	if err := errors.Join(blockErr, firstErr(errs)); err != nil {
		return Outcome{}, err
	}
	st, err := stats(ctx, c, 6)
	if err != nil {
		return Outcome{}, err
	}
	if st.Executions != 6 {
		return Outcome{}, fmt.Errorf("%d rows in %d executions, want 6: the batch must be cut at each change of %s", st.Rows, st.Executions, kind)
	}
	return Outcome{Detail: "alternating " + kind + "s: one execution each"}, nil
}

// Timing of the scenarios that queue requests behind a running one: the
// blocker is a 30 s chunk, which the model (RowDelay: blockerTime) runs
// for blockerTime, while the short chunks after it take a few
// milliseconds. The others are sent settle after the blocker, in turn,
// spacing apart, and are all queued before it ends.
const (
	blockerTime    = 2 * time.Second
	blockerSamples = 30 * modelspec.SampleRate
	settle         = 300 * time.Millisecond
	spacing        = 150 * time.Millisecond
)

// blocked is a model whose 30 s chunks take blockerTime, batched by size
// (1: one request at a time).
func blocked(maxBatch int) Model { return Model{MaxBatchSize: maxBatch, RowDelay: blockerTime} }

// startBlocker sends a blocking request to s (bucket-padded when buckets)
// and returns once it is executing; wait returns its error.
func startBlocker(ctx context.Context, s Server, buckets bool) (wait func() error, err error) {
	io := triton.DefaultModelIO()
	if buckets {
		io.Buckets = []int{blockerSamples}
	}
	c, err := dial(s, io)
	if err != nil {
		return nil, err
	}
	if _, err := c.Infer(ctx, triton.Request{Samples: samples(160)}); err != nil { // connected, warm
		_ = c.Close()
		return nil, err
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Infer(ctx, triton.Request{Samples: samples(blockerSamples)})
		_ = c.Close()
		done <- err
	}()
	time.Sleep(settle) // the blocker is executing
	return func() error { return <-done }, nil
}

// blockedClient dials s and starts a blocker on it; wait returns the
// blocker's error once it ends.
func blockedClient(ctx context.Context, s Server) (c *triton.Client, wait func() error, err error) {
	if c, err = dial(s, triton.DefaultModelIO()); err != nil {
		return nil, nil, err
	}
	if wait, err = startBlocker(ctx, s, false); err != nil {
		_ = c.Close()
		return nil, nil, err
	}
	return c, wait, nil
}

// behindBlocker starts a blocker, then runs f(i) for i < n in turn, each
// started spacing after the last (so they queue in that order), and
// returns their errors once all are done.
func behindBlocker(ctx context.Context, s Server, buckets bool, n int, f func(i int) error) ([]error, error) {
	wait, err := startBlocker(ctx, s, buckets)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
		time.Sleep(spacing)
	}
	wg.Wait()
	return errs, wait()
}

// order queues requests of the given priorities in turn behind a running
// one and returns the order they completed in (indexes).
func order(ctx context.Context, s Server, priorities []uint64) ([]int, error) {
	c, err := dial(s, triton.DefaultModelIO())
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var mu sync.Mutex
	var done []int
	errs, err := behindBlocker(ctx, s, false, len(priorities), func(i int) error {
		// 3 s of audio: 200 ms each, so that they complete well apart.
		if _, err := c.Infer(ctx, triton.Request{Samples: samples(48000 + i), Priority: priorities[i]}); err != nil {
			return err
		}
		mu.Lock()
		done = append(done, i)
		mu.Unlock()
		return nil
	})
	if err == nil {
		err = firstErr(errs)
	}
	return done, err
}

// priorityOrder: requests of priority 1 queued after priority 2 ones run
// first.
func priorityOrder(ctx context.Context, s Server) (Outcome, error) {
	got, err := order(ctx, s, []uint64{2, 2, 1, 1})
	if err != nil {
		return Outcome{}, err
	}
	if want := []int{2, 3, 0, 1}; !slices.Equal(got, want) {
		return Outcome{}, fmt.Errorf("completed in order %v, want %v", got, want)
	}
	return Outcome{Detail: "live overtook queued bulk"}, nil
}

// priorityDefault: priority 0 means the model's default level (2 of 3),
// so it runs before level 3 and after level 1.
func priorityDefault(ctx context.Context, s Server) (Outcome, error) {
	got, err := order(ctx, s, []uint64{3, 0, 1})
	if err != nil {
		return Outcome{}, err
	}
	if want := []int{2, 1, 0}; !slices.Equal(got, want) {
		return Outcome{}, fmt.Errorf("completed in order %v, want %v (1, then 0 as the default 2, then 3)", got, want)
	}
	return Outcome{Detail: "0 ran as level 2"}, nil
}

// queueFull: past max_queue_size the server answers UNAVAILABLE, the
// client calls it backpressure, and a pool that meets it ejects nothing
// and completes every chunk.
func queueFull(ctx context.Context, s Server) (Outcome, error) {
	io := triton.DefaultModelIO()
	c, err := dial(s, io)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	var overloaded atomic.Int32
	errs := concurrently(8, func(i int) error {
		_, err := c.Infer(ctx, triton.Request{Samples: samples(300 + i)})
		if errors.Is(err, triton.ErrOverloaded) {
			overloaded.Add(1)
			if !strings.Contains(err.Error(), "Exceeds maximum queue size") {
				return fmt.Errorf("queue full answered %v", err)
			}
			return nil
		}
		return err
	})
	if err := firstErr(errs); err != nil {
		return Outcome{}, err
	}
	if overloaded.Load() == 0 {
		return Outcome{}, errors.New("8 requests at once into a queue of 2 were all accepted")
	}
	pool, err := triton.NewPool(triton.PoolConfig{Addrs: []string{s.Addr()}, MaxInflight: 8, RequestTimeout: time.Minute,
		Attempts: 1, BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, EjectAfter: 1, HealthInterval: time.Hour}, io, prometheus.NewRegistry())
	if err != nil {
		return Outcome{}, err
	}
	defer pool.Close()
	errs = concurrently(8, func(i int) error {
		r, err := pool.Transcribe(ctx, triton.Request{Samples: samples(400 + i)})
		if err == nil && r.Text != echo(400+i) {
			err = fmt.Errorf("answered %q", r.Text)
		}
		return err
	})
	if err := firstErr(errs); err != nil {
		return Outcome{}, fmt.Errorf("pool: %w", err)
	}
	if h := pool.Healthy(); h != 1 {
		return Outcome{}, fmt.Errorf("backpressure ejected the partition (%d healthy)", h)
	}
	return Outcome{Detail: fmt.Sprintf("%d of 8 refused; pool: 8 of 8 done, none ejected", overloaded.Load()), Codes: []codes.Code{codes.Unavailable}}, nil
}

// queuePerLevel: max_queue_size bounds each priority level apart, so a
// full bulk level does not refuse live requests.
func queuePerLevel(ctx context.Context, s Server) (Outcome, error) {
	c, wait, err := blockedClient(ctx, s)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	// Two bulk requests at once into a level that holds one: one is
	// refused. Then a live one, at a level of its own, is taken.
	var bulk []error
	var wg sync.WaitGroup
	wg.Go(func() {
		bulk = concurrently(2, func(i int) error {
			_, err := c.Infer(ctx, triton.Request{Samples: samples(101 + i), Priority: 2})
			return err
		})
	})
	time.Sleep(spacing) // the bulk level is full
	_, live := c.Infer(ctx, triton.Request{Samples: samples(103), Priority: 1})
	wg.Wait()
	if err := wait(); err != nil {
		return Outcome{}, fmt.Errorf("blocker: %w", err)
	}
	refused := 0
	for _, err := range bulk {
		switch {
		case errors.Is(err, triton.ErrOverloaded):
			refused++
		case err != nil:
			return Outcome{}, fmt.Errorf("bulk request: %w", err)
		}
	}
	if refused != 1 {
		return Outcome{}, fmt.Errorf("%d of two bulk requests into a level of one refused, want 1", refused)
	}
	if live != nil {
		return Outcome{}, fmt.Errorf("live request: %v: a live request must not meet the bulk level's bound", live)
	}
	return Outcome{Detail: "bulk level full, live accepted", Codes: []codes.Code{codes.Unavailable}}, nil
}

// queueTimeout: a request whose timeout passes while it waits gets
// UNAVAILABLE, which the client calls backpressure; a timeout longer than
// the wait changes nothing.
func queueTimeout(ctx context.Context, s Server) (Outcome, error) {
	c, wait, err := blockedClient(ctx, s)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	var wg sync.WaitGroup
	var patientErr error
	wg.Go(func() {
		_, patientErr = c.Infer(ctx, triton.Request{Samples: samples(101), QueueTimeout: 5 * time.Second})
	})
	_, err = c.Infer(ctx, triton.Request{Samples: samples(102), QueueTimeout: 50 * time.Millisecond})
	wg.Wait()
	if blockErr := wait(); blockErr != nil || patientErr != nil {
		return Outcome{}, fmt.Errorf("requests within their timeout failed: %v, %v", blockErr, patientErr)
	}
	if !errors.Is(err, triton.ErrOverloaded) || !strings.Contains(err.Error(), "Request timeout expired") {
		return Outcome{}, fmt.Errorf("request past its queue timeout: %v, want UNAVAILABLE Request timeout expired", err)
	}
	return Outcome{Detail: "expired in queue: UNAVAILABLE", Codes: []codes.Code{codes.Unavailable}}, nil
}

// timeoutNeedsDefault: a request's timeout can only shorten the model's
// default queue timeout; where the model has none, it is ignored (so
// -triton-queue-timeout needs default_timeout_microseconds in the model).
func timeoutNeedsDefault(ctx context.Context, s Server) (Outcome, error) {
	c, wait, err := blockedClient(ctx, s)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	_, err = c.Infer(ctx, triton.Request{Samples: samples(102), QueueTimeout: 50 * time.Millisecond})
	if blockErr := wait(); blockErr != nil {
		return Outcome{}, fmt.Errorf("blocker: %w", blockErr)
	}
	if err != nil {
		return Outcome{}, fmt.Errorf("a request timeout without a model default: %v, want it ignored", err)
	}
	return Outcome{Detail: "ignored without a default"}, nil
}

// unknownModel: a model the server does not have is not ready (an answer,
// not an error) and NOT_FOUND for metadata and inference, which the client
// reports as the partition's, never the input's.
func unknownModel(ctx context.Context, s Server) (Outcome, error) {
	io := triton.DefaultModelIO()
	io.Model = "no_such_model"
	c, err := dial(s, io)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	var out Outcome
	ready, err := c.Ready(ctx)
	if ready {
		return out, errors.New("an unknown model is ready")
	}
	out.Codes = append(out.Codes, status.Code(errors.Unwrap(err)))
	rpc, closeConn, err := rawConn(s)
	if err != nil {
		return out, err
	}
	defer closeConn()
	mr, err := rpc.ModelReady(ctx, &pb.ModelReadyRequest{Name: "no_such_model"})
	if err == nil && mr.GetReady() {
		return out, errors.New("ModelReady: ready")
	}
	out.Codes = append(out.Codes, status.Code(err))
	_, err = rpc.ModelMetadata(ctx, &pb.ModelMetadataRequest{Name: "no_such_model"})
	out.Codes = append(out.Codes, status.Code(err))
	_, err = c.Infer(ctx, triton.Request{Samples: samples(100)})
	if !errors.Is(err, triton.ErrModelNotFound) {
		return out, fmt.Errorf("infer on an unknown model: %v, want ErrModelNotFound", err)
	}
	out.Codes = append(out.Codes, codes.NotFound)
	out.Detail = "NOT_FOUND: the partition's, not the input's"
	return out, nil
}

// invalidInputs: inputs the model cannot take are INVALID_ARGUMENT,
// permanent for the client: a wrong datatype, a wrong shape, a missing
// required input, an unknown input, and an empty chunk the model refuses.
func invalidInputs(ctx context.Context, s Server) (Outcome, error) {
	rpc, closeConn, err := rawConn(s)
	if err != nil {
		return Outcome{}, err
	}
	defer closeConn()
	f32 := func(n int) []byte { return make([]byte, 4*n) }
	type tensor = pb.ModelInferRequest_InferInputTensor
	cases := []struct {
		name   string
		inputs []*tensor
		raw    [][]byte
	}{
		{"FP64 audio", []*tensor{{Name: "audio", Datatype: "FP64", Shape: []int64{1, 100}}}, [][]byte{make([]byte, 800)}},
		{"shape without batch", []*tensor{{Name: "audio", Datatype: "FP32", Shape: []int64{100}}}, [][]byte{f32(100)}},
		{"bytes disagree with shape", []*tensor{{Name: "audio", Datatype: "FP32", Shape: []int64{1, 100}}}, [][]byte{f32(50)}},
		{"no audio", []*tensor{{Name: "timestamps", Datatype: "BOOL", Shape: []int64{1, 1}}}, [][]byte{{1}}},
		{"unknown input", []*tensor{{Name: "audio", Datatype: "FP32", Shape: []int64{1, 10}}, {Name: "speed", Datatype: "FP32", Shape: []int64{1, 1}}}, [][]byte{f32(10), f32(1)}},
		{"batch over max", []*tensor{{Name: "audio", Datatype: "FP32", Shape: []int64{9, 10}}}, [][]byte{f32(90)}},
	}
	var out Outcome
	for _, tc := range cases {
		_, err := rpc.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "asr", Inputs: tc.inputs, RawInputContents: tc.raw})
		if status.Code(err) != codes.InvalidArgument {
			return out, fmt.Errorf("%s: %v, want INVALID_ARGUMENT", tc.name, err)
		}
		out.Codes = append(out.Codes, status.Code(err))
	}
	io := triton.DefaultModelIO()
	c, err := dial(s, io)
	if err != nil {
		return out, err
	}
	defer c.Close()
	_, err = c.Infer(ctx, triton.Request{Samples: []float32{}})
	if !errors.Is(err, triton.ErrRejected) {
		return out, fmt.Errorf("empty chunk: %v, want ErrRejected", err)
	}
	out.Codes = append(out.Codes, codes.InvalidArgument)
	out.Detail = fmt.Sprintf("%d kinds refused", len(out.Codes))
	return out, nil
}

// sharedMemory: a chunk passed in a registered system shared memory
// region is read from there; after a restart the client registers the
// region again; a region too small for a tensor and an unknown region are
// refused; a region that a queued request reads cannot be unregistered
// until the request ends; then unregistering works.
func sharedMemory(ctx context.Context, s Server) (Outcome, error) {
	io := triton.DefaultModelIO()
	c, err := dial(s, io)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	if err := c.UseSharedMemory(4, modelspec.SampleRate); err != nil {
		return Outcome{}, err
	}
	r, err := c.Infer(ctx, triton.Request{Samples: samples(12345)})
	if err != nil || r.Text != echo(12345) {
		return Outcome{}, fmt.Errorf("through shared memory: %q, %v", r.Text, err)
	}
	st := c.SharedMemory()
	if !st.Registered {
		return Outcome{}, fmt.Errorf("region not registered: %v", st.Err)
	}
	var out Outcome
	rpc, closeConn, err := rawConn(s)
	if err != nil {
		return out, err
	}
	defer closeConn()
	status1, err := rpc.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{Name: st.Region})
	if err != nil || len(status1.GetRegions()) != 1 {
		return out, fmt.Errorf("status of the registered region: %v, %v", status1, err)
	}
	// A tensor past the region's end.
	in := &pb.ModelInferRequest_InferInputTensor{Name: "audio", Datatype: "FP32", Shape: []int64{1, 1 << 20},
		Parameters: map[string]*pb.InferParameter{
			"shared_memory_region":    {ParameterChoice: &pb.InferParameter_StringParam{StringParam: st.Region}},
			"shared_memory_byte_size": {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 4 << 20}},
			"shared_memory_offset":    {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 0}},
		}}
	_, err = rpc.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "asr", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}})
	out.Codes = append(out.Codes, status.Code(err))
	if status.Code(err) != codes.InvalidArgument {
		return out, fmt.Errorf("tensor past the region's end: %v, want INVALID_ARGUMENT", err)
	}
	// An unknown region.
	in.Parameters["shared_memory_region"] = &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: "no-such-region"}}
	in.Shape, in.Parameters["shared_memory_byte_size"] = []int64{1, 10}, &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: 40}}
	_, err = rpc.ModelInfer(ctx, &pb.ModelInferRequest{ModelName: "asr", Inputs: []*pb.ModelInferRequest_InferInputTensor{in}})
	out.Codes = append(out.Codes, status.Code(err))
	if status.Code(err) != codes.NotFound || !strings.Contains(status.Convert(err).Message(), "shared memory region") {
		return out, fmt.Errorf("unknown region: %v, want NOT_FOUND naming the region", err)
	}
	// Registering a name twice.
	_, err = rpc.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: st.Region, Key: "/" + st.Region, ByteSize: 64})
	out.Codes = append(out.Codes, status.Code(err))
	if status.Code(err) != codes.AlreadyExists {
		return out, fmt.Errorf("second registration of a name: %v, want ALREADY_EXISTS", err)
	}
	// The partition restarts and forgets the region: the client registers
	// it again and the chunk still arrives.
	s.Kill()
	if err := s.Restart(); err != nil {
		return out, err
	}
	var text string
	for try := 0; try < 20; try++ { // the connection comes back within a second or two
		r, err = c.Infer(ctx, triton.Request{Samples: samples(4321)})
		if err == nil {
			text = r.Text
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if text != echo(4321) {
		return out, fmt.Errorf("after a restart: %q, %v", text, err)
	}
	r, err = c.Infer(ctx, triton.Request{Samples: samples(4322)})
	if err != nil || r.Text != echo(4322) || !c.SharedMemory().Registered {
		return out, fmt.Errorf("not registered again after a restart: %q, %v, %+v", r.Text, err, c.SharedMemory())
	}
	// Unregister.
	// A region that a queued request reads cannot be unregistered until
	// that request ends.
	wait, err := startBlocker(ctx, s, false)
	if err != nil {
		return out, err
	}
	queued := make(chan error, 1)
	go func() {
		r, err := c.Infer(ctx, triton.Request{Samples: samples(4323)})
		if err == nil && r.Text != echo(4323) {
			err = fmt.Errorf("queued request through shared memory: %q", r.Text)
		}
		queued <- err
	}()
	time.Sleep(settle) // queued behind the blocker
	_, err = rpc.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: st.Region})
	out.Codes = append(out.Codes, status.Code(err))
	if status.Code(err) != codes.Internal || !strings.Contains(status.Convert(err).Message(), "currently in use") {
		return out, fmt.Errorf("unregister while a request reads the region: %v, want INTERNAL, currently in use", err)
	}
	if err := errors.Join(<-queued, wait()); err != nil {
		return out, err
	}
	// The server may hold the region a moment after the response (until
	// it releases the request): the client asks again while it is in use.
	uctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err = triton.UnregisterSharedMemory(uctx, rpc, st.Region)
	cancel()
	if err != nil {
		return out, fmt.Errorf("unregister: %v", err)
	}
	status2, err := rpc.SystemSharedMemoryStatus(ctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil {
		return out, err
	}
	for name := range status2.GetRegions() {
		if name == st.Region {
			return out, errors.New("region still listed after unregister")
		}
	}
	out.Detail = "read, re-registered after restart, bounds, names and use checked"
	return out, nil
}

// clientGivesUp: a client that cancels a queued request gets its error at
// once, and the server serves on.
func clientGivesUp(ctx context.Context, s Server) (Outcome, error) {
	c, wait, err := blockedClient(ctx, s)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	start := time.Now()
	_, err = c.Infer(cctx, triton.Request{Samples: samples(101)})
	cancel()
	gaveUp := time.Since(start)
	if blockErr := wait(); blockErr != nil {
		return Outcome{}, fmt.Errorf("blocker: %w", blockErr)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return Outcome{}, fmt.Errorf("cancelled request: %v, want DeadlineExceeded", err)
	}
	if gaveUp > blockerTime/2 {
		return Outcome{}, fmt.Errorf("the client waited %s after giving up", gaveUp)
	}
	r, err := c.Infer(ctx, triton.Request{Samples: samples(102)})
	if err != nil || r.Text != echo(102) {
		return Outcome{}, fmt.Errorf("after a client gave up: %q, %v", r.Text, err)
	}
	return Outcome{Detail: fmt.Sprintf("returned in %d ms; served on", gaveUp.Milliseconds()), Codes: []codes.Code{codes.DeadlineExceeded}}, nil
}

// statistics: the statistics extension splits time queued from time
// computing.
func statistics(ctx context.Context, s Server) (Outcome, error) {
	io := triton.DefaultModelIO()
	c, err := dial(s, io)
	if err != nil {
		return Outcome{}, err
	}
	defer c.Close()
	errs := concurrently(4, func(i int) error {
		_, err := c.Infer(ctx, triton.Request{Samples: samples(100 + i)})
		return err
	})
	if err := firstErr(errs); err != nil {
		return Outcome{}, err
	}
	st, err := stats(ctx, c, 4)
	if err != nil {
		return Outcome{}, err
	}
	// Four requests of 100 ms one at a time: 400 ms computing, and
	// 0+100+200+300 ms queued.
	compute, queue := time.Duration(st.ComputeNs), time.Duration(st.QueueNs)
	if st.Requests != 4 || st.Executions != 4 || compute < 350*time.Millisecond || queue < 400*time.Millisecond {
		return Outcome{}, fmt.Errorf("stats %+v: want 4 requests, 4 executions, >= 350 ms computing, >= 400 ms queued", st)
	}
	return Outcome{Detail: fmt.Sprintf("queue %d ms, compute %d ms", queue.Milliseconds(), compute.Milliseconds())}, nil
}

// killMidBatch: a partition killed while a batch executes fails its
// requests as unreachable; the pool sends them to the other partition,
// completes every chunk and takes the killed one back once it restarts.
func killMidBatch(ctx context.Context, ss []Server) (Outcome, error) {
	io := triton.DefaultModelIO()
	pool, err := triton.NewPool(triton.PoolConfig{Addrs: []string{ss[0].Addr(), ss[1].Addr()}, MaxInflight: 8, RequestTimeout: time.Minute,
		Attempts: 5, BackoffBase: 20 * time.Millisecond, BackoffMax: 200 * time.Millisecond, EjectAfter: 1, HealthInterval: 100 * time.Millisecond}, io, prometheus.NewRegistry())
	if err != nil {
		return Outcome{}, err
	}
	defer pool.Close()
	pctx, stop := context.WithCancel(ctx)
	var bg sync.WaitGroup
	bg.Go(func() { _ = pool.Run(pctx) })
	defer func() { stop(); bg.Wait() }()
	if err := pool.WaitReady(ctx); err != nil {
		return Outcome{}, err
	}
	const n = 16
	var errs []error
	var wg sync.WaitGroup
	wg.Go(func() {
		errs = concurrently(n, func(i int) error {
			r, err := pool.Transcribe(ctx, triton.Request{Samples: samples(500 + i)})
			if err == nil && r.Text != echo(500+i) {
				err = fmt.Errorf("answered %q for %d samples", r.Text, 500+i)
			}
			return err
		})
	})
	time.Sleep(150 * time.Millisecond) // batches executing on both
	ss[0].Kill()
	wg.Wait()
	if err := firstErr(errs); err != nil {
		return Outcome{}, fmt.Errorf("a chunk was lost to the kill: %w", err)
	}
	if h := pool.Healthy(); h != 1 {
		return Outcome{}, fmt.Errorf("%d partitions healthy after one was killed, want 1 (ejected)", h)
	}
	if err := ss[0].Restart(); err != nil {
		return Outcome{}, err
	}
	deadline := time.Now().Add(20 * time.Second)
	for pool.Healthy() != 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if h := pool.Healthy(); h != 2 {
		return Outcome{}, fmt.Errorf("restarted partition not taken back (%d healthy)", h)
	}
	return Outcome{Detail: fmt.Sprintf("%d of %d done; ejected, back after restart", n, n)}, nil
}
