// Package backoff has the two pieces every retry loop here needs: an
// exponential delay and a sleep that ends early with its context.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Delay returns base doubled attempt-1 times, capped at limit. Attempt 1
// gets base.
func Delay(base, limit time.Duration, attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base << min(attempt-1, 30)
	if d <= 0 || d > limit {
		return limit
	}
	return d
}

// Jitter returns a random duration in [d/2, d], so retries from many
// clients do not line up.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// Sleep waits for d or until ctx is done, returning the context's cause then.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
