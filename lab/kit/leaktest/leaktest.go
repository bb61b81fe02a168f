// Package leaktest checks test binaries for leaked goroutines with goleak,
// ignoring only the idle keep-alive connections of HTTP clients (the AWS
// SDK's transport keeps them open by design). A goroutine parked in a
// network read anywhere else (a leaked listener, gRPC connection or
// reader) is reported.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"
)

// Ignore lists goroutines that are not leaks.
func Ignore() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	}
}

// VerifyTestMain runs the tests, then fails the binary on leaked goroutines.
func VerifyTestMain(m *testing.M) { goleak.VerifyTestMain(m, Ignore()...) }
