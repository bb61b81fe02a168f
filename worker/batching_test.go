package worker_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
)

// Chunks of different lengths reach a partition as batches larger than one
// under concurrent load, in both batching modes: ragged (the model batches
// any lengths) and buckets (the worker pads to a few lengths and sends the
// true one, for a batcher that batches identical shapes only). Sending
// chunks at their own length to a batcher without ragged batching forms no
// batches, which is why the modes exist.
func TestChunksFormBatchesInBothModes(t *testing.T) {
	second := 16000
	cases := []struct {
		name    string
		ragged  bool
		buckets []int
		batched bool
	}{
		{"ragged", true, nil, true},
		{"buckets", false, []int{second, 2 * second, 3 * second}, true},
		{"neither", false, nil, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, 0, 3)
			srv := tritontest.StartWith(t, tritontest.Options{Batch: &kserve.BatchConfig{
				MaxBatchSize: 8, PreferredSizes: []int{8}, MaxQueueDelay: 30 * time.Millisecond, Instances: 1, Ragged: c.ragged,
			}})
			srv.SetLatency(20 * time.Millisecond)
			io := triton.DefaultModelIO()
			io.Buckets = c.buckets
			pool, err := triton.NewPool(triton.PoolConfig{
				Addrs: []string{srv.Addr}, MaxInflight: 16, RequestTimeout: 10 * time.Second, Attempts: 3,
				BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, EjectAfter: 3, HealthInterval: time.Second,
			}, io, prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			e.pool = pool
			want := map[string]int{}
			for i := range 24 {
				k := fmt.Sprintf("r%02d.wav", i)
				n := second + 977*i // 24 different lengths, 1 s to 2.4 s
				e.put(k, tone(16000, n))
				e.sendJob(k)
				want[k] = n
			}
			cfg := e.config()
			cfg.Jobs.Concurrency = 16
			cfg.Audio.ChunkSeconds = 3
			e.run(cfg, nil)
			for k, n := range want {
				tr, ok := e.transcript(k)
				if !ok || tr.Text != tritontest.Text(n) {
					t.Errorf("%s: transcript %q (found %v), want %q: the model must see exactly the true length", k, tr.Text, ok, tritontest.Text(n))
				}
			}
			st := srv.BatchStats()
			t.Logf("%s: %d batches, mean size %.2f, sizes %v", c.name, st.Batches, st.MeanBatchSize(), st.Sizes)
			if c.batched && st.MeanBatchSize() < 2 {
				t.Errorf("mean batch size %.2f, want batches to form", st.MeanBatchSize())
			}
			if !c.batched && st.MeanBatchSize() != 1 {
				t.Errorf("mean batch size %.2f without ragged batching or buckets, want 1", st.MeanBatchSize())
			}
		})
	}
}

// At twice the capacity a small-queue partition can take, backpressure
// (UNAVAILABLE "Exceeds maximum queue size") never ejects a partition and
// every request completes.
func TestOverloadNeverEjectsAndEveryRequestCompletes(t *testing.T) {
	var servers []*tritontest.Server
	var addrs []string
	for range 2 {
		s := tritontest.StartWith(t, tritontest.Options{Batch: &kserve.BatchConfig{
			MaxBatchSize: 4, Instances: 1, MaxQueueSize: 2, Ragged: true,
		}})
		s.SetLatency(20 * time.Millisecond)
		servers = append(servers, s)
		addrs = append(addrs, s.Addr)
	}
	reg := prometheus.NewRegistry()
	pool, err := triton.NewPool(triton.PoolConfig{
		Addrs: addrs, MaxInflight: 32, RequestTimeout: 10 * time.Second, Attempts: 3,
		BackoffBase: 5 * time.Millisecond, BackoffMax: 50 * time.Millisecond, EjectAfter: 1, HealthInterval: time.Hour,
	}, triton.DefaultModelIO(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	// Each partition holds 4 executing + 2 queued = 6; 24 at once is 2x.
	const n = 24
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for range 5 {
				if _, err := pool.Transcribe(ctx, triton.Request{Samples: make([]float32, 100+i)}); err != nil {
					errs[i] = err
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("request %d: %v", i, err)
		}
	}
	overloaded := 0.0
	for _, s := range servers {
		if v := metricValue(t, reg, "fleetscribe_triton_partition_healthy", map[string]string{"partition": s.Addr}, -1); v != 1 {
			t.Errorf("partition %s ejected under backpressure", s.Addr)
		}
		overloaded += metricValue(t, reg, "fleetscribe_triton_requests_total", map[string]string{"partition": s.Addr, "outcome": "overloaded"}, 0)
	}
	if overloaded == 0 {
		t.Error("no backpressure seen: the test did not overload the partitions")
	}
	t.Logf("%v overloaded answers, all absorbed", overloaded)
}
