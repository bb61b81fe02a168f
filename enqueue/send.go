package enqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"
	"golang.org/x/time/rate"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// SQS limits on one SendMessageBatch call.
const (
	maxBatchEntries = 10
	maxBatchBytes   = 256 << 10
)

// outgoing is one message ready to send.
type outgoing struct {
	ref  itemRef
	body string
}

// sender sends messages in batches of up to ten entries and 256 KiB,
// from several goroutines, within a rate limit, retrying only the entries
// the queue refused.
type sender struct {
	sqs         SQSAPI
	queueURL    string
	concurrency int
	attempts    int
	limiter     *rate.Limiter // messages per second; nil: unlimited
	linger      time.Duration // how long a partial batch waits for more
	sleep       func(context.Context, time.Duration) error
	track       *tracker
	stats       *Counters
	log         func(msg string, err error)
}

// run sends everything from in until it is closed or ctx ends. Calls in
// flight when ctx ends still complete, and their results are journaled,
// so an interrupted run knows exactly what was sent.
func (s *sender) run(ctx context.Context, in <-chan outgoing) error {
	batches := make(chan []outgoing, s.concurrency)
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		defer close(batches)
		return s.batch(gctx, in, batches)
	})
	for range max(s.concurrency, 1) {
		g.Go(func() error {
			for b := range batches {
				if err := s.send(gctx, b); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return g.Wait()
}

// batch groups messages: a batch leaves when it is full or when no new
// message came for s.linger.
func (s *sender) batch(ctx context.Context, in <-chan outgoing, out chan<- []outgoing) error {
	var (
		cur   []outgoing
		bytes int
		timer = time.NewTimer(time.Hour)
	)
	timer.Stop()
	defer timer.Stop()
	emit := func() error {
		if len(cur) == 0 {
			return nil
		}
		select {
		case out <- cur:
		case <-ctx.Done():
			return ctx.Err()
		}
		cur, bytes = nil, 0
		return nil
	}
	for {
		select {
		case m, ok := <-in:
			if !ok {
				return emit()
			}
			if len(cur) > 0 && (len(cur) == maxBatchEntries || bytes+len(m.body) > maxBatchBytes) {
				if err := emit(); err != nil {
					return err
				}
			}
			cur = append(cur, m)
			bytes += len(m.body)
			if len(cur) == maxBatchEntries {
				if err := emit(); err != nil {
					return err
				}
				continue
			}
			timer.Reset(s.linger)
		case <-timer.C:
			if err := emit(); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// send delivers one batch, retrying refused entries and failed calls with
// backoff. Entries still unsent after the last attempt, and entries the
// queue refuses as the sender's fault, are journaled as failed.
func (s *sender) send(ctx context.Context, batch []outgoing) error {
	pending := batch
	var lastErr error
	for try := 0; try < max(s.attempts, 1) && len(pending) > 0; try++ {
		if try > 0 {
			s.stats.Retried.Add(int64(len(pending)))
			if err := s.sleep(ctx, backoff.Jitter(backoff.Delay(200*time.Millisecond, 15*time.Second, try))); err != nil {
				return nil // interrupted: pending entries stay unfinished and are sent by the next run
			}
		}
		if s.limiter != nil {
			if err := s.limiter.WaitN(ctx, len(pending)); err != nil {
				return nil
			}
		}
		if ctx.Err() != nil {
			return nil
		}
		entries := make([]types.SendMessageBatchRequestEntry, len(pending))
		for i, m := range pending {
			entries[i] = types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(m.body)}
		}
		// The call completes even if ctx ends meanwhile: its result must
		// reach the journal, or the next run would send these again.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		out, err := s.sqs.SendMessageBatch(cctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(s.queueURL), Entries: entries})
		cancel()
		s.stats.SendCalls.Add(1)
		if err != nil {
			lastErr = err
			continue
		}
		var ok, bad []itemRef
		retry := make(map[int]bool)
		for _, f := range out.Failed {
			i, convErr := strconv.Atoi(aws.ToString(f.Id))
			if convErr != nil || i < 0 || i >= len(pending) {
				continue
			}
			lastErr = fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message))
			if f.SenderFault {
				bad = append(bad, pending[i].ref)
				s.log("entry refused by the queue", lastErr)
				continue
			}
			retry[i] = true
		}
		for _, r := range out.Successful {
			if i, convErr := strconv.Atoi(aws.ToString(r.Id)); convErr == nil && i >= 0 && i < len(pending) {
				ok = append(ok, pending[i].ref)
			}
		}
		if len(ok) > 0 {
			s.track.sent(ok)
			s.stats.Sent.Add(int64(len(ok)))
		}
		if len(bad) > 0 {
			s.track.failedItems(bad, lastErr)
			s.stats.Failed.Add(int64(len(bad)))
		}
		next := pending[:0:0]
		for i, m := range pending {
			if retry[i] {
				next = append(next, m)
			}
		}
		pending = next
	}
	if len(pending) > 0 {
		if lastErr == nil {
			lastErr = errors.New("not sent")
		}
		refs := make([]itemRef, len(pending))
		for i, m := range pending {
			refs[i] = m.ref
		}
		s.track.failedItems(refs, lastErr)
		s.stats.Failed.Add(int64(len(pending)))
		s.log(fmt.Sprintf("%d entries not sent after %d attempts", len(pending), s.attempts), lastErr)
	}
	return nil
}
