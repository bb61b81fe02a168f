// Package testwait is the one way tests wait for something another
// goroutine or process makes true: polled, and bounded, so a test that
// would hang fails instead, saying what it waited for.
package testwait

import (
	"testing"
	"time"
)

// Timeout bounds every wait (or the test's own deadline, when sooner).
const Timeout = 30 * time.Second

// For polls cond until it is true, failing the test after Timeout (or at
// the test's deadline, less a second to report it) with what it waited
// for.
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	if !Within(t, Timeout, cond) {
		t.Fatalf("timed out waiting for %s", what)
	}
}

// Within polls cond for at most d (and never past the test's deadline),
// and reports whether it became true.
func Within(t testing.TB, d time.Duration, cond func() bool) bool {
	t.Helper()
	deadline := time.Now().Add(d)
	if td, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := td.Deadline(); ok && end.Add(-time.Second).Before(deadline) {
			deadline = end.Add(-time.Second)
		}
	}
	for pause := time.Millisecond; !cond(); pause = min(2*pause, 50*time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pause)
	}
	return true
}
