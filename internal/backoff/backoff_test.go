package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestDelay(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {99, 10 * time.Second}} {
		if got := Delay(time.Second, 10*time.Second, c.attempt); got != c.want {
			t.Errorf("Delay(attempt %d) = %v, want %v", c.attempt, got, c.want)
		}
	}
	for range 100 {
		if j := Jitter(time.Second); j < time.Second/2 || j > time.Second {
			t.Fatalf("Jitter = %v", j)
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	cause := errors.New("stop")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if err := Sleep(ctx, time.Hour); !errors.Is(err, cause) {
		t.Fatalf("Sleep = %v, want the cause", err)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatal(err)
	}
}
