package worker_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fleetscribe/fleetscribe/internal/leaktest"
	"github.com/fleetscribe/fleetscribe/internal/localaws"
)

// emulator is the local SQS+S3 server shared by the integration tests;
// each test makes its own queues and buckets.
var emulator *localaws.Server

func TestMain(m *testing.M) {
	srv, err := localaws.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "local AWS emulator:", err)
		os.Exit(1)
	}
	emulator = srv
	code := m.Run()
	srv.Stop()
	if code == 0 {
		// Idle keep-alive connections of the SDK's HTTP client are not leaks.
		if err := goleak.Find(leaktest.Ignore()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
