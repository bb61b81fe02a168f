package triton_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t *testing.T, addr string, io triton.ModelIO) *triton.Client {
	t.Helper()
	c, err := triton.Dial(addr, io)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestClientAgainstServer(t *testing.T) {
	srv := tritontest.Start(t)
	c := dial(t, srv.Addr, triton.DefaultModelIO())
	ctx := context.Background()
	if live, err := c.Live(ctx); err != nil || !live {
		t.Fatalf("live = %v, %v", live, err)
	}
	if ready, err := c.Ready(ctx); err != nil || !ready {
		t.Fatalf("ready = %v, %v", ready, err)
	}
	md, err := c.Metadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if md.GetName() != "asr" || md.GetInputs()[0].GetDatatype() != "FP32" || md.GetOutputs()[0].GetName() != "text" {
		t.Errorf("metadata %v", md)
	}
	res, err := c.Infer(ctx, triton.Request{Samples: make([]float32, 16000), Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	if res.Text != tritontest.Text(16000) || len(res.Words) != 2 || res.Words[1].End != 1 {
		t.Errorf("result %+v", res)
	}
	res, err = c.Infer(ctx, triton.Request{Samples: make([]float32, 10), Timestamps: false})
	if err != nil || res.Words != nil {
		t.Errorf("without timestamps: %+v, %v", res, err)
	}
}

func TestClientWithoutBatchDimOrOptionalTensors(t *testing.T) {
	io := triton.DefaultModelIO()
	io.BatchDim, io.TimestampsInput, io.WordsOutput, io.NumWordsOutput = false, "", "", ""
	srv, err := tritontest.Listen("127.0.0.1:0", io) // a model with max_batch_size 0
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	res, err := dial(t, srv.Addr, io).Infer(context.Background(), triton.Request{Samples: make([]float32, 5), Timestamps: true})
	if err != nil || res.Text != tritontest.Text(5) {
		t.Fatalf("%+v, %v", res, err)
	}
}

func TestErrorClassification(t *testing.T) {
	srv := tritontest.Start(t)
	c := dial(t, srv.Addr, triton.DefaultModelIO())
	ctx := context.Background()
	cases := []struct {
		code codes.Code
		want error
	}{
		{codes.Unavailable, triton.ErrOverloaded},
		{codes.ResourceExhausted, triton.ErrOverloaded},
		{codes.Internal, triton.ErrServerFault},
		{codes.Unknown, triton.ErrServerFault},
		{codes.NotFound, triton.ErrModelNotFound},
		{codes.InvalidArgument, triton.ErrRejected},
	}
	for _, tc := range cases {
		srv.Fail(tc.code, 1)
		_, err := c.Infer(ctx, triton.Request{Samples: make([]float32, 5), Timestamps: false})
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.code, err, tc.want)
		}
	}
	wrong := triton.DefaultModelIO()
	wrong.Model = "nope"
	if _, err := dial(t, srv.Addr, wrong).Infer(ctx, triton.Request{}); !errors.Is(err, triton.ErrModelNotFound) {
		t.Errorf("unknown model: got %v, want ErrModelNotFound", err)
	}
	// UNAVAILABLE made up by the transport (nothing listening) is an
	// unreachable partition, not backpressure.
	srv.Close()
	if _, err := c.Infer(ctx, triton.Request{Samples: make([]float32, 5)}); !errors.Is(err, triton.ErrUnavailable) {
		t.Errorf("stopped server: got %v, want ErrUnavailable", err)
	}
	if ready, _ := dial(t, srv.Addr, wrong).Ready(ctx); ready {
		t.Error("unknown model reported ready")
	}
}

func poolConfig(addrs ...string) triton.PoolConfig {
	return triton.PoolConfig{
		Addrs: addrs, MaxInflight: 2, RequestTimeout: 5 * time.Second, Attempts: 4,
		BackoffBase: time.Millisecond, BackoffMax: 5 * time.Millisecond, EjectAfter: 2, HealthInterval: time.Hour,
	}
}

func newPool(t *testing.T, cfg triton.PoolConfig, reg *prometheus.Registry) *triton.Pool {
	t.Helper()
	p, err := triton.NewPool(cfg, triton.DefaultModelIO(), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestPoolRetriesOverloadOnAnotherPartition(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	reg := prometheus.NewRegistry()
	p := newPool(t, poolConfig(a.Addr, b.Addr), reg)
	a.Fail(codes.Unavailable, 1)
	b.Fail(codes.Unavailable, 1)
	res, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 7), Timestamps: false})
	if err != nil || res.Text != tritontest.Text(7) {
		t.Fatalf("%+v, %v", res, err)
	}
	if a.Calls() != 1 && b.Calls() != 1 {
		t.Errorf("calls a=%d b=%d: the retry should have gone to the other partition", a.Calls(), b.Calls())
	}
	if got := requests(t, reg, a.Addr, "overloaded") + requests(t, reg, b.Addr, "overloaded"); got != 2 {
		t.Errorf("overloaded attempts = %v, want 2", got)
	}
}

func requests(t *testing.T, reg *prometheus.Registry, addr, outcome string) float64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "fleetscribe_triton_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, lp := range m.GetLabel() {
				l[lp.GetName()] = lp.GetValue()
			}
			if l["partition"] == addr && l["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestPoolRejectedIsNotRetried(t *testing.T) {
	a := tritontest.Start(t)
	p := newPool(t, poolConfig(a.Addr), prometheus.NewRegistry())
	a.Fail(codes.InvalidArgument, 1)
	_, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 7), Timestamps: false})
	if !errors.Is(err, triton.ErrRejected) || a.Calls() != 1 {
		t.Fatalf("err %v after %d calls; want ErrRejected after 1", err, a.Calls())
	}
}

func TestPoolGivesUpAfterAttempts(t *testing.T) {
	a := tritontest.Start(t)
	cfg := poolConfig(a.Addr)
	cfg.EjectAfter = 100
	p := newPool(t, cfg, prometheus.NewRegistry())
	a.Fail(codes.Internal, 100)
	_, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 7), Timestamps: false})
	if !errors.Is(err, triton.ErrServerFault) || a.Calls() != 4 || !strings.Contains(err.Error(), "after 4 attempts") {
		t.Fatalf("err %v after %d calls", err, a.Calls())
	}
}

// Backpressure is waited out until the caller's deadline, however many
// answers it takes, and never ejects the partition.
func TestPoolWaitsOutBackpressure(t *testing.T) {
	a := tritontest.Start(t)
	reg := prometheus.NewRegistry()
	cfg := poolConfig(a.Addr)
	cfg.EjectAfter = 1
	p := newPool(t, cfg, reg)
	a.Fail(codes.Unavailable, 20)
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	res, err := p.Transcribe(wctx, triton.Request{Samples: make([]float32, 7)})
	if err != nil || res.Text != tritontest.Text(7) || a.Calls() != 21 {
		t.Fatalf("%+v, %v after %d calls; want success on the 21st", res, err, a.Calls())
	}
	if gauge(t, reg, "fleetscribe_triton_partition_healthy", a.Addr) != 1 {
		t.Error("backpressure ejected the partition")
	}
	a.Fail(codes.Unavailable, 1000)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if _, err := p.Transcribe(ctx, triton.Request{Samples: make([]float32, 7)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("sustained backpressure: %v, want the deadline", err)
	}
	if limit := gauge(t, reg, "fleetscribe_triton_inflight_limit", a.Addr); limit != 1 {
		t.Errorf("in-flight limit %v under backpressure, want 1 (halved from 2, floor 1)", limit)
	}
	if gauge(t, reg, "fleetscribe_triton_partition_healthy", a.Addr) != 1 {
		t.Error("sustained backpressure ejected the partition")
	}
}

// One poison input (the same INTERNAL error wherever it goes, while the
// partitions serve other inputs) is the input's fault: ErrPoisonInput after
// one attempt on each of two partitions, not every retry, and no partition
// is ejected. Faults on many different inputs lower a partition's
// in-flight limit but never eject it: ejection is for partitions that
// cannot be reached.
func TestPoolPoisonInput(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	// The poison is told by its content, as a model's bad input is: the
	// pool's canary before it has served anything is faint noise of the
	// same length, which a model failing by content serves.
	poison := make([]float32, 13)
	for i := range poison {
		poison[i] = 0.5
	}
	var poisonCalls atomic.Int64
	for _, s := range []*tritontest.Server{a, b} {
		s.SetRecognizer(kserve.RecognizerFunc(func(_ context.Context, samples []float32, _ bool) (triton.Result, error) {
			if slices.Equal(samples, poison) || len(samples) > 100 {
				if len(samples) == len(poison) {
					poisonCalls.Add(1)
				}
				return triton.Result{}, status.Error(codes.Internal, "transcription failed: 'NoneType' object is not iterable")
			}
			return triton.Result{Text: tritontest.Text(len(samples))}, nil
		}))
	}
	reg := prometheus.NewRegistry()
	cfg := poolConfig(a.Addr, b.Addr)
	cfg.EjectAfter = 1
	cfg.Attempts = 6
	cfg.PoisonWait = time.Minute
	p := newPool(t, cfg, reg)
	// A cold pool, nothing served yet: the faint-noise canary judges.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	_, err := p.Transcribe(ctx, triton.Request{Samples: poison})
	cancel()
	if !errors.Is(err, triton.ErrPoisonInput) {
		t.Fatalf("poison input on a cold pool: %v, want ErrPoisonInput", err)
	}
	if n := poisonCalls.Swap(0); n != 2 {
		t.Errorf("poison input on a cold pool tried %d times, want 2 (once on each partition)", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := p.Transcribe(context.Background(), triton.Request{Samples: poison})
		done <- err
	}()
	// Other inputs keep being served: the evidence that the partitions work.
wait:
	for {
		select {
		case err = <-done:
			break wait
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := p.Transcribe(ctx, triton.Request{Samples: make([]float32, 7)})
		cancel()
		if err != nil {
			t.Fatalf("a good input beside the poison one: %v", err)
		}
	}
	if !errors.Is(err, triton.ErrPoisonInput) || !strings.Contains(err.Error(), "'NoneType' object is not iterable") {
		t.Fatalf("poison input: %v, want ErrPoisonInput naming the model's error", err)
	}
	if n := poisonCalls.Load(); n != 2 {
		t.Errorf("poison input beside good ones tried %d times, want 2 (once on each partition)", n)
	}
	for _, s := range []*tritontest.Server{a, b} {
		if gauge(t, reg, "fleetscribe_triton_partition_healthy", s.Addr) != 1 {
			t.Errorf("%s ejected by a poison input", s.Addr)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP fleetscribe_triton_poison_inputs_total Requests the model failed with the same error on two partitions that went on serving others: the input's fault.
# TYPE fleetscribe_triton_poison_inputs_total counter
fleetscribe_triton_poison_inputs_total 2
`), "fleetscribe_triton_poison_inputs_total"); err != nil {
		t.Error(err)
	}
	// More inputs failing while the canary is served: each is poison, and
	// the partitions keep their places and their limits.
	for n := 101; n < 104; n++ {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := p.Transcribe(ctx, triton.Request{Samples: make([]float32, n)}); !errors.Is(err, triton.ErrPoisonInput) {
			t.Errorf("input of %d samples: %v, want ErrPoisonInput", n, err)
		}
		cancel()
	}
	for _, s := range []*tritontest.Server{a, b} {
		if gauge(t, reg, "fleetscribe_triton_partition_healthy", s.Addr) != 1 {
			t.Errorf("%s ejected by server faults", s.Addr)
		}
		if limit := gauge(t, reg, "fleetscribe_triton_inflight_limit", s.Addr); limit != 2 {
			t.Errorf("%s in-flight limit %v after poison inputs, want its 2", s.Addr, limit)
		}
	}
}

// Partitions that fail every input the same way (a crashed model, every
// client of a GPU down after an MPS fault) do not make a good input look
// poisoned: with no partition serving anything after the faults, it is a
// retryable fault once the attempts run out.
func TestPoolFaultEverywhereIsNotPoison(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	cfg := poolConfig(a.Addr, b.Addr)
	cfg.PoisonWait = 50 * time.Millisecond
	reg := prometheus.NewRegistry()
	p := newPool(t, cfg, reg)
	for _, served := range []bool{false, true} {
		// Before the pool has served anything; then after, when the input
		// it served (its canary) fails on the partitions too.
		if served {
			a.Heal()
			b.Heal()
			if _, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 5)}); err != nil {
				t.Fatal(err)
			}
		}
		a.Fail(codes.Internal, 100)
		b.Fail(codes.Internal, 100)
		_, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 7)})
		if errors.Is(err, triton.ErrPoisonInput) || !errors.Is(err, triton.ErrServerFault) || !strings.Contains(err.Error(), "after 4 attempts") {
			t.Errorf("served before: %v: err %v, want a server fault after 4 attempts", served, err)
		}
		// Failing everything, a partition takes one request at a time.
		for _, s := range []*tritontest.Server{a, b} {
			if limit := gauge(t, reg, "fleetscribe_triton_inflight_limit", s.Addr); limit != 1 {
				t.Errorf("served before: %v: %s in-flight limit %v, want 1", served, s.Addr, limit)
			}
		}
	}
}

// An input the pool served lately (its canary) that now fails on every
// partition is not poison and is not waited on: the partitions fail, not
// it (the outage benchmark's copies of one recording waited PoisonWait on
// every fault).
func TestPoolServedInputFailingIsNotWaitedOn(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	cfg := poolConfig(a.Addr, b.Addr)
	cfg.PoisonWait = time.Minute
	p := newPool(t, cfg, prometheus.NewRegistry())
	req := triton.Request{Samples: make([]float32, 5)}
	if _, err := p.Transcribe(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	a.Fail(codes.Internal, 100)
	b.Fail(codes.Internal, 100)
	start := time.Now()
	_, err := p.Transcribe(context.Background(), req)
	if errors.Is(err, triton.ErrPoisonInput) || !errors.Is(err, triton.ErrServerFault) {
		t.Errorf("err %v, want a server fault", err)
	}
	if took := time.Since(start); took > cfg.PoisonWait/2 {
		t.Errorf("took %v: the served input's faults waited for other requests", took)
	}
}

// NOT_FOUND (the model is not loaded on one partition) sends the request
// to another and takes that partition out; the job does not fail.
func TestPoolModelNotFoundTriesAnotherPartition(t *testing.T) {
	missing, err := tritontest.Listen("127.0.0.1:0", triton.ModelIO{Model: "other", AudioInput: "audio", TextOutput: "text", BatchDim: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(missing.Close)
	good := tritontest.Start(t)
	reg := prometheus.NewRegistry()
	p := newPool(t, poolConfig(missing.Addr, good.Addr), reg)
	for range 4 {
		res, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 7)})
		if err != nil || res.Text != tritontest.Text(7) {
			t.Fatalf("%+v, %v", res, err)
		}
	}
	if gauge(t, reg, "fleetscribe_triton_partition_healthy", missing.Addr) != 0 {
		t.Error("partition without the model still in rotation")
	}
}

func TestPoolCapsInflightAndSpreadsLoad(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	a.Hold()
	b.Hold()
	cfg := poolConfig(a.Addr, b.Addr) // 2 in flight per partition
	p := newPool(t, cfg, prometheus.NewRegistry())
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for range 6 {
		wg.Go(func() {
			_, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3), Timestamps: false})
			errs <- err
		})
	}
	for range 4 { // exactly the cap reaches the servers
		select {
		case <-a.Started():
		case <-b.Started():
		case <-time.After(10 * time.Second):
			t.Fatal("requests did not reach the servers")
		}
	}
	if a.Calls() != 2 || b.Calls() != 2 {
		t.Errorf("least-outstanding dispatch: a=%d b=%d, want 2 and 2", a.Calls(), b.Calls())
	}
	a.Release()
	b.Release()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if a.Calls()+b.Calls() != 6 {
		t.Errorf("calls %d, want 6", a.Calls()+b.Calls())
	}
}

func TestPoolEjectsAndReadmitsPartition(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	addrA, addrB := a.Addr, b.Addr
	reg := prometheus.NewRegistry()
	cfg := poolConfig(addrA, addrB)
	cfg.EjectAfter = 1
	p := newPool(t, cfg, reg)
	if _, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3)}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	b.Close()
	// Neither can be reached, so both are ejected; the request waits for
	// a health check to bring one back.
	done := make(chan error, 1)
	go func() {
		_, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3), Timestamps: false})
		done <- err
	}()
	testwait.For(t, "both partitions ejected", func() bool {
		return gauge(t, reg, "fleetscribe_triton_partition_healthy", addrA) == 0 &&
			gauge(t, reg, "fleetscribe_triton_partition_healthy", addrB) == 0
	})
	for _, addr := range []string{addrA, addrB} {
		s, err := tritontest.Listen(addr, triton.DefaultModelIO())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		if addr == addrB {
			b = s
		}
	}
	testwait.For(t, "both partitions readmitted", func() bool { return p.CheckHealth(context.Background()) == 2 })
	if err := <-done; err != nil {
		t.Fatalf("request after readmission: %v", err)
	}
	b.Close() // a dead partition fails its check and is ejected
	if n := p.CheckHealth(context.Background()); n != 1 {
		t.Fatalf("health check found %d healthy, want 1", n)
	}
	for range 3 {
		if _, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3), Timestamps: false}); err != nil {
			t.Fatal(err)
		}
	}
}

func gauge(t *testing.T, reg *prometheus.Registry, name, partition string) float64 {
	t.Helper()
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == partition {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

func TestPoolWaitHonoursContext(t *testing.T) {
	a := tritontest.Start(t)
	a.Hold()
	cfg := poolConfig(a.Addr)
	cfg.MaxInflight = 1
	p := newPool(t, cfg, prometheus.NewRegistry())
	go func() {
		_, _ = p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3), Timestamps: false})
	}()
	<-a.Started()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := p.Transcribe(ctx, triton.Request{Samples: make([]float32, 3), Timestamps: false}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("want deadline exceeded while waiting for a slot, got %v", err)
	}
	a.Release()
}

// A partition restarted (as after an MPS fault) serves again within a few
// seconds, though the full health check runs only every 30 s: ejected
// partitions are probed often and gRPC reconnects quickly.
func TestPoolServesSoonAfterPartitionRestarts(t *testing.T) {
	a := tritontest.Start(t)
	addr := a.Addr
	cfg := poolConfig(addr)
	cfg.HealthInterval = 30 * time.Second
	cfg.EjectAfter = 1
	cfg.Attempts = 1
	reg := prometheus.NewRegistry()
	p := newPool(t, cfg, reg)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = p.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	if _, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3)}); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if _, err := p.Transcribe(context.Background(), triton.Request{Samples: make([]float32, 3)}); err == nil {
		t.Fatal("request to a stopped partition succeeded")
	}
	if gauge(t, reg, "fleetscribe_triton_partition_healthy", addr) != 0 {
		t.Fatal("stopped partition not ejected")
	}
	// Down long enough for gRPC's reconnect backoff to grow: something on
	// the port that hangs up on every connection, until the client has
	// tried and failed three times.
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var tries atomic.Int32
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			tries.Add(1)
			c.Close()
		}
	}()
	testwait.For(t, "three failed reconnects", func() bool { return tries.Load() >= 3 })
	l.Close()
	b, err := tritontest.Listen(addr, triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	restarted := time.Now()
	rctx, rcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer rcancel()
	if _, err := p.Transcribe(rctx, triton.Request{Samples: make([]float32, 3)}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(restarted); took > 3*time.Second {
		t.Errorf("served again %v after the restart, want within 3s", took)
	}
}

func TestModelBucketsFlag(t *testing.T) {
	var m triton.ModelIO
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	m.RegisterFlags(fs)
	if err := fs.Parse([]string{"-model-buckets", "30, 5,10"}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.Buckets, []int{5 * 16000, 10 * 16000, 30 * 16000}) || fs.Lookup("model-buckets").Value.String() != "5,10,30" {
		t.Fatalf("buckets %v (%s)", m.Buckets, fs.Lookup("model-buckets").Value)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if err := fs.Parse([]string{"-model-buckets", bad}); err == nil {
			t.Errorf("-model-buckets %s accepted", bad)
		}
	}
}

// Poison inputs at a cold start fill every slot before the pool has
// served anything: each is judged against faint noise of its length (no
// wait for other work to be served), good work finishes beside them, and
// the in-flight limits their faults halved are given back; later poison
// amid good work leaves the limits where good answers hold them.
func TestPoisonAtColdStartLeavesTheLimits(t *testing.T) {
	a, b := tritontest.Start(t), tritontest.Start(t)
	poisoned := func(s []float32) bool { return len(s) > 0 && s[0] == 1 }
	for _, s := range []*tritontest.Server{a, b} {
		s.SetRecognizer(kserve.RecognizerFunc(func(_ context.Context, samples []float32, _ bool) (triton.Result, error) {
			if poisoned(samples) {
				return triton.Result{}, status.Error(codes.Internal, "transcription failed: index out of range")
			}
			return triton.Result{Text: tritontest.Text(len(samples))}, nil
		}))
	}
	reg := prometheus.NewRegistry()
	cfg := poolConfig(a.Addr, b.Addr)
	cfg.MaxInflight = 16
	cfg.PoisonWait = 10 * time.Second // the worker's default
	p := newPool(t, cfg, reg)
	transcribe := func(poison bool, n int) error {
		s := make([]float32, n)
		if poison {
			s[0] = 1
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := p.Transcribe(ctx, triton.Request{Samples: s})
		return err
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 16)
	for i := range errs {
		wg.Go(func() { errs[i] = transcribe(true, 1600+i) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, triton.ErrPoisonInput) {
			t.Errorf("poison input %d at a cold start: %v, want ErrPoisonInput", i, err)
		}
	}
	if took := time.Since(start); took > cfg.PoisonWait/2 {
		t.Errorf("16 poison inputs at a cold start judged in %.1f s: they waited for other work", took.Seconds())
	}
	limits := func(when string) {
		t.Helper()
		for _, s := range []*tritontest.Server{a, b} {
			if limit := gauge(t, reg, "fleetscribe_triton_inflight_limit", s.Addr); limit != 16 {
				t.Errorf("%s: %s in-flight limit %v, want 16", s.Addr, when, limit)
			}
		}
	}
	limits("after poison at a cold start,")
	// Four poison inputs amid good work.
	for i := range 64 {
		if err := transcribe(i%16 == 3, 800+i); (err != nil) != (i%16 == 3) {
			t.Errorf("input %d: %v", i, err)
		}
	}
	limits("after four poison inputs amid 60 good ones,")
}
