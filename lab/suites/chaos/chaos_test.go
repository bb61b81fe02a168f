//go:build chaos

package chaos

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/lab/kit/modroot"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
)

// The short chaos run of make test (a step of its own, after the other
// tests, so its load does not disturb their timing): 60 jobs (six of them
// bad inputs, one of each kind) through two real workers and
// two partitions of real Triton Inference Server (pocketsphinx), with two SIGKILLs, a partition crash, every
// partition down for 3 s, a SIGTERM drain and 3% of S3/SQS requests
// failing. make chaos runs the full suite (1000 jobs).
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the real binaries")
	}
	tritonproc.Require(t)
	dir := t.TempDir()
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]string{
		{"build", "-o", dir + "/", "./cmd/worker"},
	} {
		cmd := exec.CommandContext(t.Context(), "go", b...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", b, err, out)
		}
	}
	var log bytes.Buffer
	rep, err := Run(context.Background(), Config{
		Jobs: 60, Workers: 2, Partitions: 2, Kills: 2, PartitionCrashes: 1, AllDown: 3 * time.Second,
		FaultRate: 0.03, MaxReceives: 4, Timeout: 4 * time.Minute, Seed: uint64(time.Now().UnixNano()),
		WorkerBin: filepath.Join(dir, "worker"), Dir: dir, Log: &log,
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	rep.WriteTable(&log)
	t.Logf("\n%s%s", log.String(), rep.ResultLine())
	if !rep.OK() || rep.Kills != 2 {
		t.Errorf("not clean: %s", rep.ResultLine())
	}
}
