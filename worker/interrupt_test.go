package worker_test

import (
	"context"
	"io"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/worker"
)

// A spot interruption with a deadline: the worker stops receiving at
// once, finishes the job that can finish by the deadline at its pace so
// far, and releases the one that cannot with visibility 0, so that it is
// visible again at once (not after the 30 s visibility timeout) for
// another instance. A job sent after the notice is not started (a long
// poll already in flight may return it; it goes straight back).
func TestInterruptionFinishesWhatCanFinishAndReleasesTheRest(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.servers[0].SetLatency(100 * time.Millisecond)
	e.put("long.wav", tone(16000, 60*16000))  // about 60 chunks: 6 s or more
	e.put("medium.wav", tone(16000, 4*16000)) // 4 chunks: about 0.4 s
	e.put("later.wav", tone(16000, 16000))
	cfg := e.config()
	cfg.Audio.ChunkSeconds, cfg.Audio.ChunkParallelism, cfg.Jobs.ExitWhenIdle, cfg.Claims.Settle = 1, 1, 0, 0
	reg := prometheus.NewRegistry()
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: e.recorder, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), Metrics: reg})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- w.Run(context.Background()) }()
	e.sendJob("long.wav")
	// The long job's second chunk means its first is done (one chunk at a
	// time): its pace is known. Then the medium one arrives.
	testwait.For(t, "the long job's second chunk", func() bool { return e.servers[0].Calls() >= 2 })
	e.sendJob("medium.wav")
	testwait.For(t, "two jobs in flight", func() bool { return metricValue(t, reg, "fleetscribe_jobs_inflight", nil, 0) >= 2 })
	interrupted := time.Now()
	w.Interrupt(worker.Interruption{Reason: "spot interruption notice", Deadline: interrupted.Add(3 * time.Second)})
	e.sendJob("later.wav")
	// The long job goes back at once, not at the deadline.
	testwait.For(t, "the long job released", func() bool {
		return counter(t, reg, "fleetscribe_messages_total", "outcome", worker.MessageReleased) >= 1
	})
	if d := time.Since(interrupted); d > 1500*time.Millisecond {
		t.Errorf("the job that cannot finish was released %s after the notice; it should go at once", d)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	took := time.Since(interrupted)
	if _, ok := e.transcript("medium.wav"); !ok {
		t.Error("the job that could finish by the deadline was not finished")
	}
	if _, ok := e.transcript("long.wav"); ok {
		t.Error("the long job finished; the test's timing is off")
	}
	if took > 3*time.Second {
		t.Errorf("worker stopped %s after the notice, past the deadline", took)
	}
	v, f := e.depth(e.queue.URL)
	if v != 2 || f != 0 {
		t.Errorf("queue: %d visible, %d in flight; want the released job and the later one visible at once", v, f)
	}
	if _, ok := e.transcript("later.wav"); ok {
		t.Error("a job sent after the notice was started")
	}
}
