package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/backoff"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
)

// claim is the short-lived object that marks a job in progress, so that a
// second message for the same input (a backfill overlapping live events)
// received by another worker at the same time is dropped instead of
// computed twice. Dropping it loses nothing: the claiming message stays
// in the queue until its own job reaches an outcome.
type claim struct {
	Token     string    `json:"token"`      // unique per attempt
	MessageID string    `json:"message_id"` // the message doing the job
	Expires   time.Time `json:"expires"`
}

// claimJob writes a claim for keys and reports whether this attempt may do
// the job. It writes with If-None-Match where S3 honours it, then waits
// ClaimSettle and reads the claim back: of writers racing each other, the
// last one to write always reads its own token, so at least one proceeds,
// and two proceed only if one wrote after the other had read back. A
// claim of the same message (a redelivery after a crash) or an expired
// one is taken over. The returned release deletes the claim.
func (w *Worker) claimJob(ctx context.Context, log zerolog.Logger, keys contract.OutputKeys, msgID string) (won bool, release func(), err error) {
	if w.cfg.Claims.Settle == 0 {
		return true, func() {}, nil
	}
	mine := claim{Token: newToken(), MessageID: msgID, Expires: w.now().Add(w.cfg.Jobs.Timeout + w.cfg.Queues.VisibilityTimeout).UTC()}
	body, err := json.Marshal(mine)
	if err != nil {
		return false, nil, err
	}
	const create, overwrite = true, false // putClaim's ifAbsent
	put := func(ifAbsent bool) error { return w.out.putClaim(ctx, keys.Claim, body, ifAbsent) }
	outcome := "won"
	if err := put(create); err != nil {
		if !s3errs.PreconditionFailed(err) {
			return false, nil, fmt.Errorf("write claim: %w", err)
		}
		held, err := w.readClaim(ctx, keys.Claim)
		if err != nil {
			return false, nil, err
		}
		if held != nil && held.MessageID != msgID && w.now().Before(held.Expires) {
			w.m.claims.WithLabelValues("lost").Inc()
			return false, nil, nil
		}
		if err := put(overwrite); err != nil {
			return false, nil, fmt.Errorf("write claim: %w", err)
		}
		outcome = "taken_over"
	}
	if err := backoff.Sleep(ctx, w.cfg.Claims.Settle); err != nil {
		return false, nil, err
	}
	held, err := w.readClaim(ctx, keys.Claim)
	if err != nil {
		return false, nil, err
	}
	if held != nil && held.Token != mine.Token {
		if held.MessageID != msgID && w.now().Before(held.Expires) {
			w.m.claims.WithLabelValues("lost").Inc()
			return false, nil, nil
		}
		log.Info().Str("claim_message_id", held.MessageID).Msg("claim overwritten by a redelivery of this message; carrying on")
	}
	w.m.claims.WithLabelValues(outcome).Inc()
	release = func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		// Only our own claim is removed; a failed delete leaves a claim
		// that expires by itself.
		if c, err := w.readClaim(dctx, keys.Claim); err == nil && c != nil && c.Token == mine.Token {
			if err := w.out.remove(dctx, keys.Claim); err != nil {
				log.Warn().Err(err).Msg("delete claim failed; it expires by itself")
			}
		}
	}
	return true, release, nil
}

// readClaim returns the claim at key, or nil when there is none.
func (w *Worker) readClaim(ctx context.Context, key string) (*claim, error) {
	b, err := w.out.read(ctx, key, 4096)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read claim: %w", err)
	case b == nil:
		return nil, nil
	}
	var c claim
	if json.Unmarshal(b, &c) != nil {
		return &claim{}, nil // unreadable: treat as expired
	}
	return &c, nil
}

func newToken() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
