package testwait

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestWithin(t *testing.T) {
	var n atomic.Int32
	go func() {
		time.Sleep(20 * time.Millisecond)
		n.Store(1)
	}()
	if !Within(t, 5*time.Second, func() bool { return n.Load() == 1 }) {
		t.Fatal("condition made true by another goroutine not seen")
	}
	start := time.Now()
	if Within(t, 100*time.Millisecond, func() bool { return false }) {
		t.Fatal("a condition never true reported true")
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > 2*time.Second {
		t.Errorf("gave up after %s, want about 100 ms", d)
	}
}
