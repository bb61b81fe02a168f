package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/rs/zerolog"
	"go.uber.org/goleak"

	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
)

// The test binary doubles as the worker binary, so the SIGTERM test sends a
// real signal to a real process.
func TestMain(m *testing.M) {
	if os.Getenv("FLEETSCRIBE_TEST_RUN_WORKER") == "1" {
		os.Args = os.Args[:1] // configured through the environment only
		main()
		os.Exit(0)
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(leaktest.Ignore()...); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func TestSIGTERMFinishesJobInHandAndStopsReceiving(t *testing.T) {
	ctx := context.Background()
	keys := []string{"a.wav", "b.wav", "c.wav"}
	emu, q := setupQueue(t, "sigterm", keys...)
	sqsc, s3c := emu.Clients()
	asr := tritontest.Start(t)
	asr.Hold()

	cmd := exec.CommandContext(t.Context(), os.Args[0])
	cmd.Env = append(os.Environ(),
		"FLEETSCRIBE_TEST_RUN_WORKER=1",
		"FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint,
		"FLEETSCRIBE_QUEUE_URL="+q.URL,
		"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox",
		"FLEETSCRIBE_TRITON_ADDRS="+asr.Addr,
		"FLEETSCRIBE_CONCURRENCY=1",
		"FLEETSCRIBE_WAIT_TIME=1s",
		"FLEETSCRIBE_METRICS_ADDR=127.0.0.1:0",
		"FLEETSCRIBE_ASG_NAME=fleetscribe-prod-canary",
	)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()

	select {
	case <-asr.Started(): // the one job is in inference, held there
	case <-time.After(30 * time.Second):
		var log strings.Builder
		for len(lines) > 0 {
			log.WriteString(<-lines + "\n")
		}
		t.Fatalf("worker never reached inference\n%s", log.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	waitLine(t, lines, &log, "stopped receiving")
	asr.Release()
	// The rest of the log is read by one goroutine until the worker's
	// stderr ends; the test reads log only after drained is closed.
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		for l := range lines {
			log.WriteString(l + "\n")
		}
	}()
	// Wait closes the pipe, so it comes after the last read (os/exec).
	select {
	case <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not exit after SIGTERM")
	}
	if err := cmd.Wait(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("worker exited %d, want 0\n%s", ee.ExitCode(), log.String())
		}
		t.Fatal(err)
	}

	// The fleet's log metric filters count jobs by the group on the line
	// that ends each job (terraform/modules/fleet: job_metrics).
	jobLine := false
	for l := range strings.SplitSeq(log.String(), "\n") {
		var e struct{ Message, Outcome, Group string }
		if json.Unmarshal([]byte(l), &e) == nil && e.Message == "job done" {
			jobLine = true
			if e.Group != "fleetscribe-prod-canary" || e.Outcome == "" {
				t.Errorf("job's last line names group %q and outcome %q, want the instance's group and an outcome: %s", e.Group, e.Outcome, l)
			}
		}
	}
	if !jobLine {
		t.Errorf("no \"job done\" line in the worker's log\n%s", log.String())
	}

	transcripts := 0
	for _, k := range keys {
		res, err := s3c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("out"), Prefix: aws.String("transcripts/inbox/" + k + "/")})
		if err != nil {
			t.Fatal(err)
		}
		transcripts += len(res.Contents)
	}
	if transcripts != 1 {
		t.Errorf("%d transcripts, want exactly the one job in hand", transcripts)
	}
	visible, inflight, err := localaws.Depth(ctx, sqsc, q.URL)
	if err != nil {
		t.Fatal(err)
	}
	if visible != 2 || inflight != 0 {
		t.Errorf("queue: %d visible, %d in flight; want the 2 untouched messages visible and the finished one deleted", visible, inflight)
	}
	if asr.Calls() != 1 {
		t.Errorf("%d inference calls, want 1", asr.Calls())
	}
}

func waitLine(t *testing.T, lines <-chan string, log *strings.Builder, substr string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("worker output ended before %q\n%s", substr, log.String())
			}
			log.WriteString(l + "\n")
			if strings.Contains(l, substr) {
				return
			}
		case <-timeout:
			t.Fatalf("no %q in worker output\n%s", substr, log.String())
		}
	}
}

func TestHelpListsEnvironmentNames(t *testing.T) {
	var out bytes.Buffer
	r, w, _ := os.Pipe()
	err := run(context.Background(), []string{"-help"}, w)
	w.Close()
	_, _ = io.Copy(&out, r)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run -help: %v", err)
	}
	for _, want := range []string{"-queue-url", "FLEETSCRIBE_QUEUE_URL", "FLEETSCRIBE_TRITON_ADDRS", "FLEETSCRIBE_EXIT_WHEN_IDLE"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-help output lacks %s", want)
		}
	}
}

func TestInvalidConfigIsAnError(t *testing.T) {
	_, w, _ := os.Pipe()
	defer w.Close()
	err := run(context.Background(), []string{"-output-bucket", "x"}, w)
	if err == nil || !strings.Contains(err.Error(), "queue URL") {
		t.Fatalf("want a queue URL config error, got %v", err)
	}
}

// A helper (metrics server, pool health loop) that fails while the worker
// runs stops the worker and fails the process; when the worker stops, the
// helpers stop with it.
func TestRunGroupStopsWorkerWhenAHelperFails(t *testing.T) {
	boom := errors.New("listener closed")
	workerStopped := make(chan struct{})
	work := func(ctx context.Context) error {
		<-ctx.Done()
		close(workerStopped)
		return nil
	}
	failing := part{name: "metrics server", run: func(context.Context) error { return boom }}
	healthy := part{name: "health", run: func(ctx context.Context) error { <-ctx.Done(); return nil }}
	err := runGroup(context.Background(), zerolog.Nop(), work, healthy, failing)
	if !errors.Is(err, boom) {
		t.Fatalf("runGroup = %v, want the helper's error", err)
	}
	select {
	case <-workerStopped:
	default:
		t.Fatal("worker still running after its helper failed")
	}

	// The worker finishing on its own (idle exit) stops the helpers cleanly.
	err = runGroup(context.Background(), zerolog.Nop(), func(context.Context) error { return nil }, healthy)
	if err != nil {
		t.Fatalf("clean worker exit: %v", err)
	}
}
