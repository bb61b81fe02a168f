package worker

import (
	"context"
	"errors"
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

type beat struct {
	receipt  string
	cancel   context.CancelCauseFunc
	extended time.Time // when visibility was last set
}

// heartbeat extends the visibility of every message in hand, ten per
// ChangeMessageVisibilityBatch call.
type heartbeat struct {
	sqs        SQSAPI
	queueURL   string
	visibility time.Duration
	interval   time.Duration
	log        zerolog.Logger
	m          *metrics
	now        func() time.Time

	mu    sync.Mutex
	beats map[string]*beat // by message id
}

func (h *heartbeat) add(id, receipt string, cancel context.CancelCauseFunc) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.beats[id] = &beat{receipt: receipt, cancel: cancel, extended: h.now()}
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
	ids := make([]string, 0, len(h.beats))
	for id := range h.beats {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for start := 0; start < len(ids); start += 10 {
		h.extendBatch(ctx, ids[start:min(start+10, len(ids))])
	}
}

func (h *heartbeat) extendBatch(ctx context.Context, ids []string) {
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
		QueueUrl: aws.String(h.queueURL), Entries: entries,
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
		id := ids[mustAtoi(*e.Id)]
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

func mustAtoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}
