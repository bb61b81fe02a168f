package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/rs/zerolog"
)

// errHeartbeatLost cancels a job whose visibility could not be extended:
// the message may already be visible to another worker, so carrying on
// risks doing the job twice.
var errHeartbeatLost = errors.New("visibility extension failed; job abandoned to avoid double processing")

// lease is a message in hand: the queue it came from and its receipt.
type lease struct {
	q       *queue
	id      string // message id
	receipt string
}

type beat struct {
	lease
	prog     *progress
	cancel   context.CancelCauseFunc
	extended time.Time // when visibility was last set
}

// heartbeat extends the visibility of every message in hand, ten per
// ChangeMessageVisibilityBatch call and queue.
type heartbeat struct {
	sqs        SQSAPI
	visibility time.Duration
	interval   time.Duration
	log        zerolog.Logger
	m          *metrics
	now        func() time.Time

	mu    sync.Mutex
	beats map[string]*beat // by message id
}

func (h *heartbeat) add(l lease, cancel context.CancelCauseFunc, prog *progress) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beats[l.id] = &beat{lease: l, prog: prog, cancel: cancel, extended: h.now()}
}

// releaseHopeless cancels, for release to the queue, each job in hand
// that at its own pace so far cannot finish by deadline, so that another
// instance starts it at once. Jobs without progress yet stay until the
// deadline.
func (h *heartbeat) releaseHopeless(deadline time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	for id, b := range h.beats {
		done, total := b.prog.done.Load(), b.prog.total.Load()
		if done == 0 || total == 0 {
			continue
		}
		perChunk := now.Sub(b.prog.start) / time.Duration(done)
		if now.Add(perChunk * time.Duration(total-done)).After(deadline) {
			h.log.Warn().Str("message_id", id).Int64("chunks_done", done).Int64("chunks", total).Msg("cannot finish before the interruption deadline; releasing")
			b.cancel(errDrainTimeout)
		}
	}
}

// releaseHeld cancels, for release to the queue, each message with a job
// waiting for a dependency that is down: at shutdown it cannot progress,
// and another instance (or this one, restarted) takes it once the
// dependency is back; its receive is not spent on a failure.
func (h *heartbeat) releaseHeld() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, b := range h.beats {
		if b.prog.held.Load() > 0 {
			h.log.Warn().Str("message_id", id).Msg("waiting for a dependency that is down at shutdown; releasing")
			b.cancel(errDrainTimeout)
		}
	}
}

func (h *heartbeat) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.beats, id)
}

func (h *heartbeat) run(ctx context.Context) {
	t := time.NewTicker(h.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.extendAll(ctx)
		}
	}
}

func (h *heartbeat) extendAll(ctx context.Context) {
	h.mu.Lock()
	byQueue := map[string][]string{}
	for id, b := range h.beats {
		byQueue[b.q.url] = append(byQueue[b.q.url], id)
	}
	h.mu.Unlock()
	for url, ids := range byQueue {
		for start := 0; start < len(ids); start += 10 {
			h.extendBatch(ctx, url, ids[start:min(start+10, len(ids))])
		}
	}
}

func (h *heartbeat) extendBatch(ctx context.Context, queueURL string, ids []string) {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, 0, len(ids))
	h.mu.Lock()
	for i, id := range ids {
		if b, ok := h.beats[id]; ok {
			entries = append(entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id:                aws.String(strconv.Itoa(i)),
				ReceiptHandle:     aws.String(b.receipt),
				VisibilityTimeout: int32(h.visibility / time.Second),
			})
		}
	}
	h.mu.Unlock()
	if len(entries) == 0 {
		return
	}
	started := h.now()
	out, err := h.sqs.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(queueURL), Entries: entries,
	})
	failed := map[string]string{}
	if err != nil {
		for _, e := range entries {
			failed[*e.Id] = err.Error()
		}
	} else {
		for _, f := range out.Failed {
			failed[aws.ToString(f.Id)] = aws.ToString(f.Code) + ": " + aws.ToString(f.Message)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, e := range entries {
		id := ids[entryIndex(*e.Id)]
		b, ok := h.beats[id]
		if !ok {
			continue
		}
		reason, bad := failed[*e.Id]
		if !bad {
			b.extended = started
			h.m.heartbeats.WithLabelValues("ok").Inc()
			continue
		}
		h.m.heartbeats.WithLabelValues("failed").Inc()
		// A failed call is retried on the next tick while the message is
		// surely still hidden; once the next tick would come too late, give up.
		if h.now().Add(h.interval).Sub(b.extended) >= h.visibility || err == nil {
			h.log.Warn().Str("message_id", id).Str("reason", reason).Msg("heartbeat lost; cancelling job")
			b.cancel(errHeartbeatLost)
			delete(h.beats, id)
		}
	}
}

// entryIndex is the index a batch entry's id names: the ids are the
// indexes this code gave the entries, so they always parse.
func entryIndex(id string) int {
	n, _ := strconv.Atoi(id)
	return n
}

// deleter deletes messages in DeleteMessageBatch calls: a call leaves when
// ten deletes of one queue are waiting or the oldest has waited interval.
// Delete returns its own entry's result. After stop, what is pending is
// flushed once more and later deletes go out on their own.
type deleter struct {
	sqs      SQSAPI
	interval time.Duration
	m        *metrics

	mu      sync.Mutex
	pending map[string][]*deletion // by queue URL
	stopped bool
	kick    chan struct{}
}

type deletion struct {
	receipt string
	done    chan error
}

func newDeleter(sqsc SQSAPI, interval time.Duration, m *metrics) *deleter {
	return &deleter{sqs: sqsc, interval: interval, m: m, pending: map[string][]*deletion{}, kick: make(chan struct{}, 1)}
}

// Delete deletes one message and waits for the result of its batch.
func (d *deleter) Delete(ctx context.Context, l lease) error {
	del := &deletion{receipt: l.receipt, done: make(chan error, 1)}
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		d.flush(ctx, l.q.url, []*deletion{del}) // answers on del.done, which has room
	} else {
		d.pending[l.q.url] = append(d.pending[l.q.url], del)
		full := len(d.pending[l.q.url]) >= 10
		d.mu.Unlock()
		if full {
			select {
			case d.kick <- struct{}{}:
			default:
			}
		}
	}
	select {
	case err := <-del.done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// run sends batches until ctx is done, then flushes what is left.
func (d *deleter) run(ctx context.Context) {
	t := time.NewTicker(d.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			d.mu.Lock()
			d.stopped = true
			d.mu.Unlock()
			d.flushAll(context.WithoutCancel(ctx), withPartial)
			return
		case <-t.C:
			d.flushAll(ctx, withPartial)
		case <-d.kick:
			d.flushAll(ctx, fullOnly)
		}
	}
}

// batches says which of the pending deletions flushAll sends: fullOnly
// batches of ten, or withPartial the rest as well.
type batches bool

const (
	fullOnly    batches = false
	withPartial batches = true
)

// flushAll sends the full batches, and withPartial also the rest.
func (d *deleter) flushAll(ctx context.Context, which batches) {
	partial := which == withPartial
	type batch struct {
		url  string
		dels []*deletion
	}
	var out []batch
	d.mu.Lock()
	for url, dels := range d.pending {
		for len(dels) >= 10 || partial && len(dels) > 0 {
			n := min(10, len(dels))
			out = append(out, batch{url, dels[:n:n]})
			dels = dels[n:]
		}
		if len(dels) == 0 {
			delete(d.pending, url)
		} else {
			d.pending[url] = dels
		}
	}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, b := range out {
		wg.Go(func() { d.flush(ctx, b.url, b.dels) })
	}
	wg.Wait()
}

func (d *deleter) flush(ctx context.Context, url string, dels []*deletion) {
	entries := make([]types.DeleteMessageBatchRequestEntry, len(dels))
	for i, del := range dels {
		entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(del.receipt)}
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	out, err := d.sqs.DeleteMessageBatch(cctx, &sqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
	cancel()
	d.m.deleteBatches.Inc()
	if err != nil {
		for _, del := range dels {
			del.done <- fmt.Errorf("delete message: %w", err)
		}
		return
	}
	failed := map[int]error{}
	for _, f := range out.Failed {
		failed[entryIndex(aws.ToString(f.Id))] = fmt.Errorf("delete message: %s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
	}
	for i, del := range dels {
		del.done <- failed[i]
	}
}
