package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// queue is one queue the worker drains.
type queue struct {
	url       string
	rank      int          // 0 is the highest priority
	priority  uint64       // Triton request priority of its chunks (0: the pool's)
	reachable atomic.Bool  // its last check or receive succeeded
	polling   atomic.Int64 // when the receive in flight began (unix ns; 0: none)
}

// receiveHang is how far past its long poll a receive may run before the
// worker says it is not ready (the receive itself gives up 30 s past it).
const receiveHang = 10 * time.Second

// Interruption asks the worker to stop receiving at once and finish what
// it holds by Deadline (zero: within -drain-timeout), releasing to the
// queue, with visibility 0, every job that cannot finish by then. Fleet
// signals (a spot interruption notice, an Auto Scaling termination) send
// one; see package fleet.
type Interruption struct {
	Reason   string
	Deadline time.Time
}

// Interrupt delivers an interruption. Only the first one counts.
func (w *Worker) Interrupt(in Interruption) {
	select {
	case w.interrupt <- in:
	default:
	}
}

// Ready reports why the worker should not take traffic, or nil: it is
// running, every queue answered its last receive, and its output bucket
// takes writes.
func (w *Worker) Ready() error {
	if !w.running.Load() {
		return errors.New("not running")
	}
	for _, q := range w.queues {
		if !q.reachable.Load() {
			return fmt.Errorf("queue %s not reachable", q.url)
		}
		if began := q.polling.Load(); began != 0 {
			if d := w.now().Sub(time.Unix(0, began)); d > w.cfg.Queues.WaitTime+receiveHang {
				return fmt.Errorf("queue %s: a receive unanswered for %.0f s (long poll %.0f s)", q.url, d.Seconds(), w.cfg.Queues.WaitTime.Seconds())
			}
		}
	}
	return w.deps.down()
}

// healthReporter is a Transcriber that knows how many of its partitions
// take requests (*triton.Pool).
type healthReporter interface{ Healthy() int }

// intakeCheck is how often a paused receiver looks again.
const intakeCheck = 250 * time.Millisecond

// waitForIntake returns once the worker can finish what it would receive:
// the output bucket takes writes and some Triton partition is healthy.
// Meanwhile messages stay in the queue, for workers that can.
// A pause is not idleness: lastActive moves on while it lasts.
func (w *Worker) waitForIntake(ctx context.Context, q *queue, lastActive *atomic.Int64) error {
	paused := false
	for {
		reason := w.deps.down()
		if hr, ok := w.tr.(healthReporter); ok && reason == nil && hr.Healthy() == 0 {
			reason = errors.New("no Triton partition is healthy")
		}
		if reason == nil {
			if paused {
				w.log.Info().Str("queue_url", q.url).Msg("receiving again")
			}
			return nil
		}
		if !paused {
			paused = true
			w.log.Warn().Str("queue_url", q.url).Err(reason).Msg("not receiving: the jobs could not finish")
		}
		lastActive.Store(w.now().UnixNano())
		if err := backoff.Sleep(ctx, intakeCheck); err != nil {
			return err
		}
	}
}

// Run receives and processes messages until ctx is cancelled (or, with
// ExitWhenIdle, until the queues have been quiet that long, or an
// interruption arrives), then drains the jobs in hand. One receiver per
// queue takes slots from a shared gate before each receive, so the queues
// share -concurrency by priority. It returns nil after a clean drain.
func (w *Worker) Run(ctx context.Context) error {
	s, err := w.start(ctx)
	if err != nil {
		return err
	}
	defer s.close()
	reason, interrupt := s.wait(ctx)
	s.drain(reason, interrupt)
	return nil
}

// session is one Run: its receivers, the jobs they started, and the
// helpers the jobs need (heartbeats, batched deletes, the backlog watch).
// Jobs run under workCtx, which outlives Run's context: cancelling that
// only stops receiving.
type session struct {
	w                  *Worker
	workCtx            context.Context
	cancelWork         context.CancelCauseFunc
	stopReceiving      context.CancelCauseFunc
	stopHelpers        func()
	hb                 *heartbeat
	gate               *slotGate
	pool               runners
	jobs, receivers    sync.WaitGroup
	inHand, lastActive atomic.Int64
}

// start checks the queues, then starts the helpers and one receiver per
// queue.
func (w *Worker) start(ctx context.Context) (*session, error) {
	for _, q := range w.queues {
		if err := w.checkQueue(ctx, q.url); err != nil {
			return nil, err
		}
		q.reachable.Store(true)
	}
	// The output bucket must take writes: a worker that cannot write
	// would transcribe and then fail every job. One that cannot yet runs
	// not ready and receives nothing, probing until it can.
	w.deps.probeOnce(ctx, depOutput)
	if err := w.deps.down(); err != nil {
		w.log.Error().Err(err).Msg("output bucket cannot be written: not ready and receiving nothing until it can")
	}
	w.running.Store(true)
	s := &session{w: w}
	s.workCtx, s.cancelWork = context.WithCancelCause(context.WithoutCancel(ctx))
	s.hb = &heartbeat{
		sqs: w.sqs, visibility: w.cfg.Queues.VisibilityTimeout,
		interval: w.cfg.Queues.Heartbeat(), log: w.log, m: w.m, now: w.now, beats: map[string]*beat{},
	}
	var helpers sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(s.workCtx)
	helpers.Go(func() { s.hb.run(hbCtx) })
	del := newDeleter(w.sqs, 50*time.Millisecond, w.m)
	delCtx, stopDel := context.WithCancel(s.workCtx)
	helpers.Go(func() { del.run(delCtx) })
	helpers.Go(func() { w.watchBacklog(delCtx) })
	helpers.Go(func() { w.deps.run(delCtx) })
	s.stopHelpers = func() { stopDel(); stopHB(); helpers.Wait() }

	s.gate = newSlotGate(w.cfg.Jobs.Concurrency, len(w.queues), w.cfg.minShareSlots(), w.m)
	w.slots.Store(s.gate)
	recvCtx, stopReceiving := context.WithCancelCause(ctx)
	s.stopReceiving = stopReceiving
	s.lastActive.Store(w.now().UnixNano())
	handle := func(q *queue, msg types.Message) {
		s.inHand.Add(1)
		s.jobs.Add(1)
		s.pool.run(func() {
			defer func() {
				s.gate.release(q.rank, 1)
				s.lastActive.Store(w.now().UnixNano())
				s.inHand.Add(-1)
				s.jobs.Done()
			}()
			w.handle(s.workCtx, s.hb, del, q, msg)
		})
	}
	urls := make([]string, len(w.queues))
	for i, q := range w.queues {
		urls[i] = q.url
	}
	w.log.Info().Strs("queue_urls", urls).Int("concurrency", w.cfg.Jobs.Concurrency).Msg("worker started")
	for _, q := range w.queues {
		s.receivers.Go(func() { w.receiveLoop(recvCtx, q, s.gate, handle, &s.lastActive) })
	}
	return s, nil
}

// wait returns why receiving should stop: ctx cancelled, an interruption
// (returned with its deadline), or the queues idle for ExitWhenIdle.
func (s *session) wait(ctx context.Context) (reason string, interrupt *Interruption) {
	w := s.w
	idle := time.NewTicker(50 * time.Millisecond)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return "shutdown requested", nil
		case in := <-w.interrupt:
			return in.Reason, &in
		case <-idle.C:
			if w.cfg.Jobs.ExitWhenIdle > 0 && s.inHand.Load() == 0 && w.now().Sub(time.Unix(0, s.lastActive.Load())) >= w.cfg.Jobs.ExitWhenIdle {
				return "queue idle", nil
			}
		}
	}
}

// drain stops receiving and waits for the jobs in hand, until the drain
// timeout (or the interruption's deadline, less a margin for the
// releases); then the rest are released to the queue.
func (s *session) drain(reason string, interrupt *Interruption) {
	w := s.w
	s.stopReceiving(errors.New(reason))
	if interrupt != nil && !interrupt.Deadline.IsZero() {
		// Jobs that cannot make it go back now, for another instance.
		s.hb.releaseHopeless(interrupt.Deadline)
	}
	s.receivers.Wait()

	w.log.Info().Str("reason", reason).Int64("jobs_in_hand", s.inHand.Load()).Msg("stopped receiving; draining")
	drained := make(chan struct{})
	go func() { s.jobs.Wait(); close(drained) }()
	deadline := w.cfg.Jobs.DrainTimeout
	if interrupt != nil && !interrupt.Deadline.IsZero() {
		// Keep a tenth of what is left (at most 2 s) for the releases.
		left := interrupt.Deadline.Sub(w.now())
		deadline = max(0, min(deadline, left-min(2*time.Second, left/10)))
	}
	if deadline > 0 {
		t := time.NewTimer(deadline)
		defer t.Stop()
		// Jobs held for a dependency that is down, now or later in the
		// drain, go back at once.
		held := time.NewTicker(intakeCheck)
		defer held.Stop()
		s.hb.releaseHeld()
	wait:
		for {
			select {
			case <-drained:
				break wait
			case <-held.C:
				s.hb.releaseHeld()
			case <-t.C:
				w.log.Warn().Dur("drain_timeout", deadline).Msg("drain deadline; releasing jobs in hand to the queue")
				s.cancelWork(errDrainTimeout)
				<-drained
				break wait
			}
		}
	} else {
		s.cancelWork(errDrainTimeout)
		<-drained
	}
	w.log.Info().Msg("worker stopped")
}

// close stops what start started, in reverse.
func (s *session) close() {
	s.pool.stop()
	s.stopReceiving(nil)
	s.stopHelpers()
	s.cancelWork(nil)
	s.w.running.Store(false)
}

var errDrainTimeout = errors.New("drain deadline reached during shutdown")

// runners run jobs on goroutines that outlive each job: a job's call
// stacks (the AWS SDK's are deep) grow a new goroutine's stack several
// times over, which cost a twentieth of the worker's CPU when every job
// had a goroutine of its own. The slots bound how many run at once.
type runners struct {
	work chan func()
	wg   sync.WaitGroup
	once sync.Once
}

// run hands f to an idle runner, or starts one.
func (r *runners) run(f func()) {
	r.once.Do(func() { r.work = make(chan func()) })
	select {
	case r.work <- f:
	default:
		r.wg.Go(func() {
			f()
			for f := range r.work {
				f()
			}
		})
	}
}

// stop ends the runners once their jobs are done.
func (r *runners) stop() {
	r.once.Do(func() { r.work = make(chan func()) })
	close(r.work)
	r.wg.Wait()
}

// receiveLoop is the receiver of one queue: it takes slots from the gate
// before each receive, so it never holds messages it has no slot for, and
// starts a job per message. It asks for twice what its last receive
// brought (one to ten): a quiet queue's long poll holds one slot, not ten
// that another queue could use.
func (w *Worker) receiveLoop(ctx context.Context, q *queue, gate *slotGate, start func(*queue, types.Message), lastActive *atomic.Int64) {
	want := 1
	for {
		if w.waitForIntake(ctx, q, lastActive) != nil {
			gate.setBusy(q.rank, false)
			return
		}
		n, err := gate.acquire(ctx, q.rank, want)
		if err != nil {
			gate.setBusy(q.rank, false)
			return
		}
		// A long poll in flight is never cut short: SQS may already have
		// handed its messages out. It ends within the poll wait.
		rctx, cancelReceive := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Queues.WaitTime+30*time.Second)
		q.polling.Store(w.now().UnixNano())
		msgs, err := w.receive(rctx, q, n)
		q.polling.Store(0)
		cancelReceive()
		gate.release(q.rank, n-len(msgs))
		if ctx.Err() != nil && len(msgs) > 0 {
			// Shutdown began during the poll: hand the messages straight
			// back rather than leave them invisible until their timeout.
			fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			for _, msg := range msgs {
				w.setVisibility(fctx, w.log.With().Str("message_id", aws.ToString(msg.MessageId)).Logger(), q, msg, 0)
			}
			fcancel()
			gate.release(q.rank, len(msgs))
			w.log.Info().Int("messages", len(msgs)).Str("queue_url", q.url).Msg("released messages received during shutdown")
			return
		}
		if err != nil {
			q.reachable.Store(false)
			if ctx.Err() != nil {
				return
			}
			w.log.Error().Err(err).Str("queue_url", q.url).Msg("receive failed; backing off")
			if backoff.Sleep(ctx, time.Second) != nil {
				return
			}
			continue
		}
		q.reachable.Store(true)
		gate.setBusy(q.rank, len(msgs) == n)
		want = min(10, max(1, 2*len(msgs)))
		if len(msgs) > 0 {
			lastActive.Store(w.now().UnixNano())
		}
		for _, msg := range msgs {
			start(q, msg)
		}
	}
}

func (w *Worker) receive(ctx context.Context, q *queue, n int) ([]types.Message, error) {
	out, err := w.sqs.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(q.url),
		MaxNumberOfMessages:         int32(n),
		WaitTimeSeconds:             int32(w.cfg.Queues.WaitTime / time.Second),
		VisibilityTimeout:           int32(w.cfg.Queues.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("receive messages: %w", err)
	}
	w.m.received.Add(float64(len(out.Messages)))
	return out.Messages, nil
}
