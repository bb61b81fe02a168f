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
	rank      int         // 0 is the highest priority
	priority  uint64      // Triton request priority of its chunks (0: the pool's)
	reachable atomic.Bool // its last check or receive succeeded
}

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

// Ready reports whether the worker is running and every queue answered
// its last receive: a worker that cannot reach its queues should not take
// traffic.
func (w *Worker) Ready() bool {
	if !w.running.Load() {
		return false
	}
	for _, q := range w.queues {
		if !q.reachable.Load() {
			return false
		}
	}
	return true
}

// Run receives and processes messages until ctx is cancelled (or, with
// ExitWhenIdle, until the queues have been quiet that long, or an
// interruption arrives), then drains the jobs in hand. One receiver per
// queue takes slots from a shared gate before each receive, so the queues
// share -concurrency by priority. It returns nil after a clean drain.
func (w *Worker) Run(ctx context.Context) error {
	for _, q := range w.queues {
		if err := w.checkQueue(ctx, q.url); err != nil {
			return err
		}
		q.reachable.Store(true)
	}
	w.running.Store(true)
	defer w.running.Store(false)
	// Jobs outlive ctx: cancelling ctx only stops receiving.
	workCtx, cancelWork := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancelWork(nil)
	hb := &heartbeat{
		sqs: w.sqs, visibility: w.cfg.VisibilityTimeout,
		interval: w.cfg.HeartbeatInterval, log: w.log, m: w.m, now: w.now, beats: map[string]*beat{},
	}
	var helpers sync.WaitGroup
	hbCtx, stopHB := context.WithCancel(workCtx)
	helpers.Go(func() { hb.run(hbCtx) })
	del := newDeleter(w.sqs, 50*time.Millisecond, w.m)
	delCtx, stopDel := context.WithCancel(workCtx)
	helpers.Go(func() { del.run(delCtx) })
	helpers.Go(func() { w.watchBacklog(delCtx) })
	defer func() { stopDel(); stopHB(); helpers.Wait() }()

	gate := newSlotGate(w.cfg.Concurrency, len(w.queues), w.cfg.minShareSlots(), w.m)
	recvCtx, stopReceiving := context.WithCancelCause(ctx)
	defer stopReceiving(nil)
	var (
		jobs       sync.WaitGroup
		inHand     atomic.Int64
		lastActive atomic.Int64
	)
	lastActive.Store(w.now().UnixNano())
	var pool runners
	defer pool.stop()
	start := func(q *queue, msg types.Message) {
		inHand.Add(1)
		jobs.Add(1)
		pool.run(func() {
			defer func() {
				gate.release(q.rank, 1)
				lastActive.Store(w.now().UnixNano())
				inHand.Add(-1)
				jobs.Done()
			}()
			w.handle(workCtx, hb, del, q, msg)
		})
	}
	urls := make([]string, len(w.queues))
	for i, q := range w.queues {
		urls[i] = q.url
	}
	w.log.Info().Strs("queue_urls", urls).Int("concurrency", w.cfg.Concurrency).Msg("worker started")

	var receivers sync.WaitGroup
	for _, q := range w.queues {
		receivers.Go(func() { w.receiveLoop(recvCtx, q, gate, start, &lastActive) })
	}
	var (
		reason    = "shutdown requested"
		interrupt *Interruption
	)
	idle := time.NewTicker(50 * time.Millisecond)
	defer idle.Stop()
wait:
	for {
		select {
		case <-ctx.Done():
			break wait
		case in := <-w.interrupt:
			reason, interrupt = in.Reason, &in
			break wait
		case <-idle.C:
			if w.cfg.ExitWhenIdle > 0 && inHand.Load() == 0 && w.now().Sub(time.Unix(0, lastActive.Load())) >= w.cfg.ExitWhenIdle {
				reason = "queue idle"
				break wait
			}
		}
	}
	stopReceiving(errors.New(reason))
	if interrupt != nil && !interrupt.Deadline.IsZero() {
		// Jobs that cannot make it go back now, for another instance.
		hb.releaseHopeless(interrupt.Deadline)
	}
	receivers.Wait()

	w.log.Info().Str("reason", reason).Int64("jobs_in_hand", inHand.Load()).Msg("stopped receiving; draining")
	drained := make(chan struct{})
	go func() { jobs.Wait(); close(drained) }()
	deadline := w.cfg.DrainTimeout
	if interrupt != nil && !interrupt.Deadline.IsZero() {
		// Keep a tenth of what is left (at most 2 s) for the releases.
		left := interrupt.Deadline.Sub(w.now())
		deadline = max(0, min(deadline, left-min(2*time.Second, left/10)))
	}
	if deadline > 0 {
		t := time.NewTimer(deadline)
		defer t.Stop()
		select {
		case <-drained:
		case <-t.C:
			w.log.Warn().Dur("drain_timeout", deadline).Msg("drain deadline; releasing jobs in hand to the queue")
			cancelWork(errDrainTimeout)
			<-drained
		}
	} else {
		cancelWork(errDrainTimeout)
		<-drained
	}
	w.log.Info().Msg("worker stopped")
	return nil
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
		n, err := gate.acquire(ctx, q.rank, want)
		if err != nil {
			gate.setBusy(q.rank, false)
			return
		}
		// A long poll in flight is never cut short: SQS may already have
		// handed its messages out. It ends within the poll wait.
		rctx, cancelReceive := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.WaitTime+30*time.Second)
		msgs, err := w.receive(rctx, q, n)
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
		WaitTimeSeconds:             int32(w.cfg.WaitTime / time.Second),
		VisibilityTimeout:           int32(w.cfg.VisibilityTimeout / time.Second),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
	})
	if err != nil {
		return nil, fmt.Errorf("receive messages: %w", err)
	}
	w.m.received.Add(float64(len(out.Messages)))
	return out.Messages, nil
}
