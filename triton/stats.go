package triton

import (
	"context"
	"errors"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// ErrNoStatistics is returned by a server without the statistics extension.
var ErrNoStatistics = errors.New("server has no statistics extension")

// ServerStats are a server's cumulative counts for the model, from
// Triton's statistics extension.
type ServerStats struct {
	Requests   uint64 // requests completed (succeeded or failed)
	Rows       uint64 // batch rows executed
	Executions uint64 // model executions (batches)
	QueueNs    uint64 // summed time requests waited in the scheduler's queue
	ComputeNs  uint64 // summed time requests spent in the model (input, run, output)
}

// Statistics returns the server's counts for the configured model, summed
// over its versions.
func (c *Client) Statistics(ctx context.Context) (ServerStats, error) {
	var p peer.Peer
	r, err := c.rpc.ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: c.io.Model, Version: c.io.Version}, grpc.Peer(&p))
	if status.Code(err) == codes.Unimplemented {
		return ServerStats{}, ErrNoStatistics
	}
	if err != nil {
		return ServerStats{}, classify("model statistics", err, &p)
	}
	var s ServerStats
	for _, m := range r.GetModelStats() {
		if m.GetName() != c.io.Model {
			continue
		}
		is := m.GetInferenceStats()
		s.Requests += is.GetSuccess().GetCount() + is.GetFail().GetCount()
		s.Rows += m.GetInferenceCount()
		s.Executions += m.GetExecutionCount()
		s.QueueNs += is.GetQueue().GetNs()
		s.ComputeNs += is.GetComputeInput().GetNs() + is.GetComputeInfer().GetNs() + is.GetComputeOutput().GetNs()
	}
	return s, nil
}

// serverStats turns each partition's cumulative statistics into counters:
// time queued at the partition and time computing, apart, which the
// worker's own request latency cannot tell.
type serverStats struct {
	queue, compute, requests, rows, executions *prometheus.CounterVec

	mu   sync.Mutex
	last map[*partition]ServerStats
	off  map[*partition]bool // the server has no statistics extension
}

func newServerStats(f promauto.Factory) *serverStats {
	c := func(name, help string) *prometheus.CounterVec {
		return f.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"partition"})
	}
	return &serverStats{
		queue:      c("fleetscribe_triton_queue_seconds_total", "Time requests waited in the partition's scheduler queue, summed (Triton statistics)."),
		compute:    c("fleetscribe_triton_compute_seconds_total", "Time requests spent in the partition's model, summed (Triton statistics)."),
		requests:   c("fleetscribe_triton_server_requests_total", "Requests the partition completed (Triton statistics)."),
		rows:       c("fleetscribe_triton_batch_rows_total", "Batch rows the partition executed (Triton statistics)."),
		executions: c("fleetscribe_triton_executions_total", "Model executions (batches) on the partition (Triton statistics); rows / executions is the mean batch size."),
		last:       map[*partition]ServerStats{},
		off:        map[*partition]bool{},
	}
}

// collect reads every partition's statistics and adds what is new. A
// counter that went backwards means the server restarted: its whole value
// is new.
func (s *serverStats) collect(ctx context.Context, parts []*partition) {
	var wg sync.WaitGroup
	for _, part := range parts {
		s.mu.Lock()
		off := s.off[part]
		s.mu.Unlock()
		if off {
			continue
		}
		wg.Go(func() {
			cur, err := part.client.Statistics(ctx)
			if err != nil {
				if errors.Is(err, ErrNoStatistics) {
					s.mu.Lock()
					s.off[part] = true
					s.mu.Unlock()
				}
				return
			}
			s.mu.Lock()
			prev := s.last[part]
			s.last[part] = cur
			s.mu.Unlock()
			if cur.Requests < prev.Requests || cur.QueueNs < prev.QueueNs || cur.ComputeNs < prev.ComputeNs || cur.Rows < prev.Rows || cur.Executions < prev.Executions {
				prev = ServerStats{}
			}
			addr := part.client.Addr()
			s.queue.WithLabelValues(addr).Add(float64(cur.QueueNs-prev.QueueNs) / 1e9)
			s.compute.WithLabelValues(addr).Add(float64(cur.ComputeNs-prev.ComputeNs) / 1e9)
			s.requests.WithLabelValues(addr).Add(float64(cur.Requests - prev.Requests))
			s.rows.WithLabelValues(addr).Add(float64(cur.Rows - prev.Rows))
			s.executions.WithLabelValues(addr).Add(float64(cur.Executions - prev.Executions))
		})
	}
	wg.Wait()
}
