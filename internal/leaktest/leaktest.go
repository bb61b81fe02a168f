// Package leaktest checks test binaries for leaked goroutines with goleak,
// ignoring the idle keep-alive connections of HTTP clients (the AWS SDK's
// transport keeps them open by design).
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// Ignore lists goroutines that are not leaks.
func Ignore() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
	}
}

// VerifyTestMain runs the tests, then fails the binary on leaked goroutines.
func VerifyTestMain(m *testing.M) { goleak.VerifyTestMain(m, Ignore()...) }
