package worker_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
)

// emulator is the local SQS+S3 server shared by the integration tests;
// each test makes its own queues and buckets.
var emulator *localaws.Server

// moto is started by the first test that needs S3's conditional writes as
// S3 does them (motoServer), and stopped with the package.
var (
	motoOnce sync.Once
	moto     *localaws.Server
	motoErr  error
)

// motoServer returns moto's server, skipping the test where it is not
// installed unless FLEETSCRIBE_REQUIRE_MOTO=1 (make test).
func motoServer(t *testing.T) *localaws.Server {
	t.Helper()
	if _, err := localaws.MotoBin(); err != nil {
		if os.Getenv(localaws.RequireMotoEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	motoOnce.Do(func() { moto, motoErr = localaws.StartMoto(context.Background()) })
	if motoErr != nil {
		t.Fatal(motoErr)
	}
	return moto
}

func TestMain(m *testing.M) {
	srv, err := localaws.Start(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "local AWS emulator:", err)
		os.Exit(1)
	}
	emulator = srv
	code := m.Run()
	srv.Stop()
	if moto != nil {
		moto.Stop()
	}
	if code == 0 {
		// Idle keep-alive connections of the SDK's HTTP client are not leaks.
		if err := goleak.Find(leaktest.Ignore()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
