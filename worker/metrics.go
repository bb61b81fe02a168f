package worker

import (
	"time"

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
	queueMessages  *prometheus.GaugeVec
	dlqMessages    *prometheus.GaugeVec
	stages         map[string]prometheus.Observer
	outage         *outageMetrics
	diarizations   *prometheus.CounterVec
	// duplicateRecords: records that repeat another of their message.
	duplicateRecords prometheus.Counter
}

// Pipeline stages timed in fleetscribe_stage_seconds.
const (
	StageFetch    = "fetch"    // S3 reads of the input
	StageDecode   = "decode"   // container and codec to samples
	StageResample = "resample" // to the model's rate
	StageInfer    = "infer"    // every chunk through the partitions, wall time
	StageUpload   = "upload"   // transcript and formats written
	StageDiarize  = "diarize"  // a recording's chunks through the diarization model, wall time (beside infer)
)

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		received: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_messages_received_total", Help: "Queue messages received.",
		}),
		jobs: f.NewCounterVec(prometheus.CounterOpts{
			Name: "fleetscribe_jobs_total", Help: "Jobs (one per recording; an S3 event may carry several) by outcome.",
		}, []string{"outcome"}),
		duplicateRecords: f.NewCounter(prometheus.CounterOpts{
			Name: "fleetscribe_duplicate_records_total", Help: "Records that repeat an earlier record of their message (same object and options): run once, not again.",
		}),
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
		queueMessages: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_queue_messages", Help: "Messages in each queue the worker drains, by state (visible, inflight, delayed), as SQS last reported them.",
		}, []string{"queue", "state"}),
		dlqMessages: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_dlq_messages", Help: "Messages in the dead-letter queue of each queue the worker drains.",
		}, []string{"queue"}),
		stages: map[string]prometheus.Observer{},
		outage: &outageMetrics{
			up: f.NewGaugeVec(prometheus.GaugeOpts{
				Name: "fleetscribe_dependency_up", Help: "0 while a bucket the worker needs is down (output, input:BUCKET), 1 once it is back; only buckets that have failed.",
			}, []string{"dependency"}),
			outages: f.NewCounterVec(prometheus.CounterOpts{
				Name: "fleetscribe_dependency_outages_total", Help: "Times a bucket the worker needs went down: its jobs wait, their messages kept in hand.",
			}, []string{"dependency"}),
			waiting: f.NewGauge(prometheus.GaugeOpts{
				Name: "fleetscribe_jobs_waiting_for_dependency", Help: "Jobs in hand waiting for a bucket that is down.",
			}),
			reruns: f.NewCounterVec(prometheus.CounterOpts{
				Name: "fleetscribe_job_reruns_total", Help: "Jobs run again after the bucket they waited for came back, by whether a transcription had been computed before (computed: it is computed again).",
			}, []string{"computed"}),
		},
	}
	stages := f.NewHistogramVec(prometheus.HistogramOpts{
		Name: "fleetscribe_stage_seconds", Help: "Time one job spent in each pipeline stage (fetch, decode, resample, infer, upload; diarize runs beside infer).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	}, []string{"stage"})
	for _, s := range []string{StageFetch, StageDecode, StageResample, StageInfer, StageUpload, StageDiarize} {
		m.stages[s] = stages.WithLabelValues(s)
	}
	m.diarizations = f.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetscribe_diarizations_total", Help: "Jobs that asked for speakers, by outcome: ok, retry (the job is retried), or the error class of a transcript written without speakers.",
	}, []string{"outcome"})
	return m
}

// since observes the time from start in a stage's histogram.
func (m *metrics) since(stage string, start time.Time) {
	m.observe(stage, time.Since(start))
}

// observe records d as the time a job spent in stage.
func (m *metrics) observe(stage string, d time.Duration) {
	m.stages[stage].Observe(d.Seconds())
}
