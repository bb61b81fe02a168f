// Package conformance is one set of scenarios that a KServe v2 inference
// server must pass to stand in for Triton Inference Server behind the
// worker: batching (ragged and buckets), priority, backpressure, queue
// timeouts, unknown models, invalid inputs, system shared memory, clients
// that give up, statistics, and a partition killed mid-batch. Each
// scenario drives the project's own client and pool, and raw gRPC only for
// requests the client never sends (malformed inputs, inputs left out). The same scenarios
// run against real Triton (the pinned build, through package tritonproc)
// and against the in-process fake (package tritontest), which earns its
// place in unit tests by passing them with the same gRPC codes.
//
// `make conformance` runs them and prints a table and the line
//
//	RESULT scenarios=N real_pass=N fake_pass=N triton_version=X
package conformance

import (
	"time"

	"github.com/fleetscribe/fleetscribe/modelspec"
)

// Model is the model a scenario needs: Triton's batching and queue policy,
// and a model time of BatchDelay plus RowDelay for each 30 s of audio per
// execution. Its
// answers are those of the echo engine: "samples N" for N samples.
type Model struct {
	MaxBatchSize    int
	Buckets         bool // fixed shapes: only identical shapes batch, audio_length required
	MaxQueueDelay   time.Duration
	PriorityLevels  int // 0: 2
	DefaultPriority int // 0: the last level
	MaxQueueSize    int // per priority level; 0: unbounded
	QueueTimeout    time.Duration
	BatchDelay      time.Duration
	RowDelay        time.Duration
}

// Spec is m as the model contract: the batching and queue policy both
// targets serve (the real server renders it, the fake batches by it).
func (m Model) Spec() modelspec.Config {
	levels := m.PriorityLevels
	if levels == 0 {
		levels = 2
	}
	def := m.DefaultPriority
	if def == 0 {
		def = levels
	}
	return modelspec.Config{
		Backend: "python", MaxBatch: m.MaxBatchSize, Buckets: m.Buckets, Instances: 1,
		Batching: modelspec.Batching{MaxQueueDelay: m.MaxQueueDelay, PriorityLevels: levels, DefaultPriority: def,
			QueueTimeout: m.QueueTimeout, MaxQueueSize: m.MaxQueueSize},
	}
}

// Server is a running server under test, serving one model named "asr".
type Server interface {
	Addr() string
	// Kill stops the server at once, as SIGKILL does: requests in flight
	// fail, connections drop.
	Kill()
	// Restart brings a killed server back on the same address and waits
	// until it is ready.
	Restart() error
}

// Target starts servers of one implementation.
type Target interface {
	Name() string
	Start(m Model) (Server, error)
}
