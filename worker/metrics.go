package worker

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Job outcomes counted in fleetscribe_jobs_total.
const (
	OutcomeOK         = "ok"
	OutcomeDuplicate  = "duplicate"  // transcript already existed
	OutcomeSuperseded = "superseded" // object was overwritten after the event
	OutcomeFailed     = "failed"     // permanent error, record written, message deleted
	OutcomeRetry      = "retry"      // retryable error, message left for redelivery
	OutcomeReleased   = "released"   // shutdown or lost heartbeat, message returned to the queue
	OutcomeClaimed    = "claimed"    // another message for the same input is being processed; this one is dropped
)

type metrics struct {
	received     prometheus.Counter
	jobs         *prometheus.CounterVec
	errors       *prometheus.CounterVec
	duration     *prometheus.HistogramVec
	inflight     prometheus.Gauge
	audioSeconds prometheus.Counter
	heartbeats   *prometheus.CounterVec
	messages     *prometheus.CounterVec

	memoryBudget   prometheus.Gauge
	memoryReserved prometheus.Gauge
	claims         *prometheus.CounterVec
	deleteBatches  prometheus.Counter
	slotsInUse     *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		received: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_messages_received_total", Help: "Queue messages received.",
		}),
		jobs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_jobs_total", Help: "Jobs (one per recording; an S3 event may carry several) by outcome.",
		}, []string{"outcome"}),
		messages: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_messages_total", Help: "Queue messages handled, by final action (deleted, retry, released, ignored, invalid).",
		}, []string{"outcome"}),
		memoryBudget: f.NewGauge(prometheus.GaugeOpts{
			Name: "fleetscribe_memory_budget_bytes", Help: "Memory the jobs in hand may hold together, by estimate.",
		}),
		memoryReserved: f.NewGauge(prometheus.GaugeOpts{
			Name: "fleetscribe_memory_reserved_bytes", Help: "Estimated memory held by the jobs in hand.",
		}),
		claims: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_claims_total", Help: "In-progress claims by outcome (won, lost, taken_over).",
		}, []string{"outcome"}),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_job_errors_total", Help: "Job failures by error class (retryable failures are class retryable).",
		}, []string{"class"}),
		duration: f.NewHistogramVec(prometheus.HistogramOpts{
			Name: "fleetscribe_job_duration_seconds", Help: "Time a job took, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
		}, []string{"outcome"}),
		inflight: f.NewGauge(prometheus.GaugeOpts{
			Name: "fleetscribe_jobs_inflight", Help: "Messages in hand.",
		}),
		audioSeconds: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_audio_seconds_total", Help: "Seconds of audio transcribed.",
		}),
		deleteBatches: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_delete_batches_total", Help: "DeleteMessageBatch calls (each deletes up to ten messages of one queue).",
		}),
		slotsInUse: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_slots_in_use", Help: "Job slots held, by queue (in priority order: 0 is the highest).",
		}, []string{"queue"}),
		heartbeats: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_heartbeats_total", Help: "Visibility extensions by outcome (ok, failed).",
		}, []string{"outcome"}),
	}
}
