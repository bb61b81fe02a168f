package triton_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
)

// The pool reads each partition's Triton statistics: time queued behind
// one execution at a time and time computing are counted apart, over real
// gRPC, and a restarted partition's counters (starting again from zero)
// add to the totals instead of being lost.
func TestPoolCountsQueueAndComputeTimeFromTritonStatistics(t *testing.T) {
	const latency = 30 * time.Millisecond
	srv := tritontest.StartWith(t, tritontest.Options{Batch: &kserve.BatchConfig{MaxBatchSize: 1, Instances: 1}})
	srv.SetLatency(latency)
	reg := prometheus.NewRegistry()
	cfg := poolConfig(srv.Addr)
	cfg.MaxInflight = 8
	p := newPool(t, cfg, reg)
	ctx := context.Background()
	const n = 6
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := p.Transcribe(ctx, triton.Request{Samples: make([]float32, 1600)}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	p.CollectStats(ctx)
	addr := srv.Addr
	get := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				for _, m := range mf.GetMetric() {
					if m.GetLabel()[0].GetValue() == addr {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return -1
	}
	if got := get("fleetscribe_triton_server_requests_total"); got != n {
		t.Errorf("server requests = %v, want %d", got, n)
	}
	compute, queue := get("fleetscribe_triton_compute_seconds_total"), get("fleetscribe_triton_queue_seconds_total")
	// One at a time: n executions of ~latency each; the k-th request
	// waits behind k-1 of them, n(n-1)/2 latencies in all.
	if compute < float64(n)*latency.Seconds() || compute > 5*float64(n)*latency.Seconds() {
		t.Errorf("compute = %.3fs, want about %.3fs", compute, float64(n)*latency.Seconds())
	}
	if want := float64(n*(n-1)/2) * latency.Seconds(); queue < 0.8*want {
		t.Errorf("queue = %.3fs, want at least about %.3fs (requests waited behind each other)", queue, want)
	}
	if got := get("fleetscribe_triton_executions_total"); got != n {
		t.Errorf("executions = %v, want %d", got, n)
	}
	// Nothing new: nothing added.
	p.CollectStats(ctx)
	if got := get("fleetscribe_triton_server_requests_total"); got != n {
		t.Errorf("after a second read: %v", got)
	}
	if testutil.CollectAndCount(reg, "fleetscribe_triton_queue_seconds_total") != 1 {
		t.Error("one partition, one series")
	}

	// The partition restarts (an MPS fault takes it down): its counters
	// start from zero, and what it serves afterwards still adds up.
	srv.Close()
	again, err := tritontest.ListenWith(addr, triton.DefaultModelIO(), tritontest.Options{Batch: &kserve.BatchConfig{MaxBatchSize: 1, Instances: 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	for range 2 {
		if _, err := p.Transcribe(ctx, triton.Request{Samples: make([]float32, 1600)}); err != nil {
			t.Fatal(err)
		}
	}
	p.CollectStats(ctx)
	if got := get("fleetscribe_triton_server_requests_total"); got != n+2 {
		t.Errorf("after the restart: %v requests, want %d", got, n+2)
	}
}
