package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/triton"
)

// imds is a local IMDSv2: PUT for a token (TTL header required), 401
// without it, 404 for signals that are absent.
type imds struct {
	mu        sync.Mutex
	spot      string
	lifecycle string
	rebalance string
}

func (f *imds) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch {
	case r.URL.Path == "/latest/api/token" && r.Method == http.MethodPut && r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") != "":
		_, _ = w.Write([]byte("token"))
	case r.Header.Get("X-aws-ec2-metadata-token") != "token":
		http.Error(w, "", http.StatusUnauthorized)
	case r.URL.Path == "/latest/meta-data/instance-id":
		_, _ = w.Write([]byte("i-0abc"))
	case r.URL.Path == "/latest/meta-data/spot/instance-action" && f.spot != "":
		_, _ = w.Write([]byte(f.spot))
	case r.URL.Path == "/latest/meta-data/events/recommendations/rebalance" && f.rebalance != "":
		_, _ = w.Write([]byte(f.rebalance))
	case r.URL.Path == "/latest/meta-data/autoscaling/target-lifecycle-state" && f.lifecycle != "":
		_, _ = w.Write([]byte(f.lifecycle))
	default:
		http.NotFound(w, r)
	}
}

func (f *imds) set(spot, lifecycle string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.spot, f.lifecycle = spot, lifecycle
}

// proc is a worker process started from the test binary.
type proc struct {
	cmd   *exec.Cmd
	lines chan string
	log   strings.Builder
}

func startWorker(t *testing.T, env ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.CommandContext(t.Context(), os.Args[0]), lines: make(chan string, 1000)}
	// At the test's end, stopped as an operator stops it (SIGTERM), so it
	// removes its shared memory regions as it exits; SIGKILL only if it
	// has not exited 30 s later (a killed worker's regions stay behind).
	p.cmd.Cancel = func() error { return p.cmd.Process.Signal(syscall.SIGTERM) }
	p.cmd.WaitDelay = 30 * time.Second
	p.cmd.Env = append(append(os.Environ(), "FLEETSCRIBE_TEST_RUN_WORKER=1", "FLEETSCRIBE_METRICS_ADDR=127.0.0.1:0",
		"FLEETSCRIBE_WAIT_TIME=1s", "FLEETSCRIBE_TRITON_HEALTH_INTERVAL=200ms", "FLEETSCRIBE_CONCURRENCY=1"), env...)
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.cmd.Wait() }) // after t.Context() ends, which signals it
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p
}

// metricsAddr waits for the worker's metrics address.
func (p *proc) metricsAddr(t *testing.T) string {
	t.Helper()
	for {
		l := p.next(t, "metrics listening")
		var v struct{ Addr string }
		if json.Unmarshal([]byte(l), &v) == nil && v.Addr != "" {
			return v.Addr
		}
	}
}

func (p *proc) next(t *testing.T, substr string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				t.Fatalf("worker output ended before %q\n%s", substr, p.log.String())
			}
			p.log.WriteString(l + "\n")
			if strings.Contains(l, substr) {
				return l
			}
		case <-timeout:
			t.Fatalf("no %q in worker output\n%s", substr, p.log.String())
		}
	}
}

// exitCode waits for the process to end and drains its output.
func (p *proc) exitCode(t *testing.T) int {
	t.Helper()
	go func() {
		for range p.lines {
		}
	}()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0
	case <-time.After(30 * time.Second):
		t.Fatal("worker did not exit")
		return -1
	}
}

// probe returns the status code of GET url, or 0 when it cannot connect.
func probe(url string) (int, string) {
	resp, err := http.Get(url) //nolint:noctx // a test probe
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitStatus(t *testing.T, url string, want int) string {
	t.Helper()
	var code int
	var body string
	if !testwait.Within(t, 20*time.Second, func() bool { code, body = probe(url); return code == want }) {
		t.Fatalf("%s: %d %q, want %d", url, code, body, want)
	}
	return body
}

func setupQueue(t *testing.T, name string, keys ...string) (*localaws.Server, localaws.Queue) {
	t.Helper()
	ctx := context.Background()
	emu, err := localaws.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(emu.Stop)
	sqsc, s3c := emu.Clients()
	q, err := emu.Provision(ctx, name, 3, "inbox", "out")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		wav := audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: make([]float32, 8000)})
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("inbox"), Key: aws.String(k), Body: bytes.NewReader(wav)}); err != nil {
			t.Fatal(err)
		}
		body, _ := contract.Job{Bucket: "inbox", Key: k}.Encode()
		if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q.URL), MessageBody: aws.String(string(body))}); err != nil {
			t.Fatal(err)
		}
	}
	return emu, q
}

// /healthz is liveness only; /readyz says whether the worker can work:
// its queues answer and a partition is ready.
func TestReadiness(t *testing.T) {
	emu, q := setupQueue(t, "ready")
	asr, err := tritontest.Listen("127.0.0.1:0", triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	defer asr.Close()
	p := startWorker(t, "FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint, "FLEETSCRIBE_QUEUE_URL="+q.URL,
		"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS="+asr.Addr, "FLEETSCRIBE_IMDS=off")
	base := "http://" + p.metricsAddr(t)
	waitStatus(t, base+"/readyz", http.StatusOK)
	asr.Close() // the only partition goes away
	if body := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable); !strings.Contains(body, "no triton partition ready") {
		t.Errorf("readyz: %q", body)
	}
	// The instance health check's question: this instance cannot serve.
	if code, body := probe(base + "/readyz?local=1"); code != http.StatusServiceUnavailable {
		t.Errorf("readyz?local=1 %d (%q) with no partition ready", code, body)
	}
	if code, _ := probe(base + "/healthz"); code != http.StatusOK {
		t.Errorf("healthz %d while not ready: liveness must not depend on readiness", code)
	}
}

// The same with the queues unreachable.
func TestReadinessWithoutQueues(t *testing.T) {
	emu, q := setupQueue(t, "ready2")
	asr := tritontest.Start(t)
	p := startWorker(t, "FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint, "FLEETSCRIBE_QUEUE_URL="+q.URL,
		"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS="+asr.Addr, "FLEETSCRIBE_IMDS=off")
	base := "http://" + p.metricsAddr(t)
	waitStatus(t, base+"/readyz", http.StatusOK)
	emu.Stop()
	if body := waitStatus(t, base+"/readyz", http.StatusServiceUnavailable); !strings.Contains(body, "not reachable") {
		t.Errorf("readyz: %q", body)
	}
	// Every instance shares the queues: the instance health check must not
	// replace this one (or the fleet) over them.
	if code, body := probe(base + "/readyz?local=1"); code != http.StatusOK {
		t.Errorf("readyz?local=1 %d (%q) with the partitions up and the queues gone", code, body)
	}
}

// A spot interruption notice through IMDSv2: the worker stops receiving,
// and the job in hand, which cannot finish (its inference is held),
// is released with visibility 0 before the deadline (the notice's time
// less -interruption-margin); the process exits 0. An Auto Scaling
// termination (target lifecycle state Terminated) drains the same way
// within -drain-timeout.
func TestFleetSignalsDrainAndExit(t *testing.T) {
	for _, kind := range []string{"spot", "lifecycle"} {
		t.Run(kind, func(t *testing.T) {
			emu, q := setupQueue(t, "spot-"+kind, "a.wav", "b.wav")
			asr := tritontest.Start(t)
			asr.Hold()
			defer asr.Release()
			meta := &imds{lifecycle: "InService"}
			srv := httptest.NewServer(meta)
			defer srv.Close()
			p := startWorker(t, "FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint, "FLEETSCRIBE_QUEUE_URL="+q.URL,
				"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS="+asr.Addr,
				"FLEETSCRIBE_IMDS=auto", "FLEETSCRIBE_IMDS_ENDPOINT="+srv.URL, "FLEETSCRIBE_IMDS_INTERVAL=50ms",
				"FLEETSCRIBE_INTERRUPTION_MARGIN=1s", "FLEETSCRIBE_DRAIN_TIMEOUT=2s")
			select {
			case <-asr.Started():
			case <-time.After(30 * time.Second):
				t.Fatal("no job reached inference")
			}
			notice := time.Now()
			if kind == "spot" {
				meta.set(fmt.Sprintf(`{"action": "terminate", "time": %q}`, notice.Add(6*time.Second).UTC().Format(time.RFC3339)), "InService")
			} else {
				meta.set("", "Terminated")
			}
			p.next(t, "stopped receiving")
			if code := p.exitCode(t); code != 0 {
				t.Fatalf("exit %d\n%s", code, p.log.String())
			}
			took := time.Since(notice)
			if kind == "spot" && took > 5500*time.Millisecond {
				t.Errorf("exited %s after the notice; the instance goes at 6 s and the margin is 1 s", took)
			}
			sqsc, _ := emu.Clients()
			v, f, err := localaws.Depth(context.Background(), sqsc, q.URL)
			if err != nil || v != 2 || f != 0 {
				t.Errorf("queue %d visible, %d in flight (%v); want both jobs visible at once", v, f, err)
			}
		})
	}
}

// A rebalance recommendation: by default the worker carries on (capacity
// rebalancing launches a replacement and terminates this instance through
// its drain; stopping now would idle GPUs that still count as capacity),
// and finishes its jobs; with -drain-on-rebalance it stops receiving.
func TestRebalanceRecommendation(t *testing.T) {
	for _, drain := range []bool{false, true} {
		t.Run(fmt.Sprintf("drain=%v", drain), func(t *testing.T) {
			emu, q := setupQueue(t, fmt.Sprintf("rebalance-%v", drain), "a.wav", "b.wav")
			asr := tritontest.Start(t)
			asr.Hold()
			defer asr.Release()
			meta := &imds{lifecycle: "InService"}
			srv := httptest.NewServer(meta)
			defer srv.Close()
			env := []string{"FLEETSCRIBE_AWS_ENDPOINT=" + emu.Endpoint, "FLEETSCRIBE_QUEUE_URL=" + q.URL,
				"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS=" + asr.Addr,
				"FLEETSCRIBE_IMDS=auto", "FLEETSCRIBE_IMDS_ENDPOINT=" + srv.URL, "FLEETSCRIBE_IMDS_INTERVAL=50ms", "FLEETSCRIBE_DRAIN_TIMEOUT=2s"}
			if drain { // the default is to carry on
				env = append(env, "FLEETSCRIBE_DRAIN_ON_REBALANCE=true")
			}
			p := startWorker(t, env...)
			select {
			case <-asr.Started():
			case <-time.After(30 * time.Second):
				t.Fatal("no job reached inference")
			}
			meta.mu.Lock()
			meta.rebalance = `{"noticeTime": "2026-12-01T10:00:00Z"}`
			meta.mu.Unlock()
			if drain {
				p.next(t, "stopped receiving")
				if code := p.exitCode(t); code != 0 {
					t.Fatalf("exit %d\n%s", code, p.log.String())
				}
				return
			}
			p.next(t, "rebalance recommendation: carrying on")
			asr.Release()
			sqsc, _ := emu.Clients()
			var v, f int
			var err error
			if !testwait.Within(t, 30*time.Second, func() bool {
				v, f, err = localaws.Depth(context.Background(), sqsc, q.URL)
				return err == nil && v == 0 && f == 0
			}) {
				t.Fatalf("jobs not done after the recommendation: %d visible, %d in flight (%v)\n%s", v, f, err, p.log.String())
			}
			for more := true; more; {
				select {
				case l, ok := <-p.lines:
					p.log.WriteString(l + "\n")
					more = ok
				default:
					more = false
				}
			}
			if strings.Contains(p.log.String(), "stopped receiving") {
				t.Errorf("the worker stopped on a rebalance recommendation:\n%s", p.log.String())
			}
		})
	}
}

// autoScaling is a local Auto Scaling endpoint (the AWS Query protocol)
// that answers SetInstanceProtection and records each call.
type autoScaling struct {
	mu    sync.Mutex
	calls []string
	seen  chan string
}

func (a *autoScaling) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil || r.Form.Get("Action") != "SetInstanceProtection" ||
		r.Form.Get("AutoScalingGroupName") != "fleet" || r.Form.Get("InstanceIds.member.1") != "i-0abc" {
		http.Error(w, "<ErrorResponse><Error><Code>ValidationError</Code><Message>bad request</Message></Error></ErrorResponse>", http.StatusBadRequest)
		return
	}
	call := map[string]string{"true": "protect", "false": "unprotect"}[r.Form.Get("ProtectedFromScaleIn")]
	a.mu.Lock()
	a.calls = append(a.calls, call)
	a.mu.Unlock()
	a.seen <- call
	w.Header().Set("Content-Type", "text/xml")
	_, _ = w.Write([]byte(`<SetInstanceProtectionResponse xmlns="http://autoscaling.amazonaws.com/doc/2011-01-01/"><SetInstanceProtectionResult/><ResponseMetadata><RequestId>r</RequestId></ResponseMetadata></SetInstanceProtectionResponse>`))
}

func (a *autoScaling) got() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...)
}

func (a *autoScaling) await(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-a.seen:
		if got != want {
			t.Fatalf("Auto Scaling was asked to %s, want %s (calls %v)", got, want, a.got())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s call (calls %v)", want, a.got())
	}
}

// -scale-in-protection against a local Auto Scaling endpoint: the
// instance is protected when the first job is taken and unprotected once
// the worker is idle; stopped (SIGTERM) while holding a job, the worker
// drains and leaves the instance unprotected.
func TestScaleInProtection(t *testing.T) {
	for _, stopWhileBusy := range []bool{false, true} {
		t.Run(fmt.Sprintf("stop-while-busy=%v", stopWhileBusy), func(t *testing.T) {
			emu, q := setupQueue(t, fmt.Sprintf("protect-%v", stopWhileBusy), "a.wav")
			asr := tritontest.Start(t)
			asr.Hold()
			defer asr.Release()
			meta := httptest.NewServer(&imds{lifecycle: "InService"})
			defer meta.Close()
			as := &autoScaling{seen: make(chan string, 10)}
			asSrv := httptest.NewServer(as)
			defer asSrv.Close()
			p := startWorker(t, "FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint, "FLEETSCRIBE_QUEUE_URL="+q.URL,
				"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS="+asr.Addr,
				"FLEETSCRIBE_IMDS=on", "FLEETSCRIBE_IMDS_ENDPOINT="+meta.URL, "FLEETSCRIBE_SCALE_IN_PROTECTION=true",
				"FLEETSCRIBE_ASG_NAME=fleet", "FLEETSCRIBE_AUTOSCALING_ENDPOINT="+asSrv.URL,
				"FLEETSCRIBE_SCALE_IN_PROTECTION_IDLE=300ms", "FLEETSCRIBE_DRAIN_TIMEOUT=1s")
			select {
			case <-asr.Started():
			case <-time.After(30 * time.Second):
				t.Fatal("no job reached inference")
			}
			as.await(t, "protect")
			if stopWhileBusy {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			} else {
				asr.Release() // the job ends; the worker goes idle
			}
			as.await(t, "unprotect")
			if !stopWhileBusy {
				_ = p.cmd.Process.Signal(syscall.SIGTERM)
			}
			if code := p.exitCode(t); code != 0 {
				t.Fatalf("exit %d\n%s", code, p.log.String())
			}
			if got := as.got(); len(got) != 2 || got[0] != "protect" || got[1] != "unprotect" {
				t.Errorf("calls %v, want protect then unprotect, and nothing protected at the end", got)
			}
		})
	}
}

// `worker drain` (a Kubernetes preStop hook) starts the drain SIGTERM
// starts: the worker stops receiving, releases the job it holds when the
// drain timeout passes, and exits 0 with both jobs back in the queue.
func TestDrainCommand(t *testing.T) {
	emu, q := setupQueue(t, "drain", "a.wav", "b.wav")
	asr := tritontest.Start(t)
	asr.Hold()
	defer asr.Release()
	p := startWorker(t, "FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint, "FLEETSCRIBE_QUEUE_URL="+q.URL,
		"FLEETSCRIBE_OUTPUT_BUCKET=out", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS="+asr.Addr,
		"FLEETSCRIBE_IMDS=off", "FLEETSCRIBE_DRAIN_TIMEOUT=1s")
	addr := p.metricsAddr(t)
	select {
	case <-asr.Started():
	case <-time.After(30 * time.Second):
		t.Fatal("no job reached inference")
	}
	if code, _ := probe("http://" + addr + "/drain"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /drain: %d, want 405 (only a POST drains)", code)
	}
	var out, errOut strings.Builder
	if err := runDrain(t.Context(), []string{"-addr", addr}, &out, &errOut); err != nil {
		t.Fatalf("worker drain: %v (%s)", err, errOut.String())
	}
	if out.String() != "draining\n" {
		t.Errorf("worker drain printed %q", out.String())
	}
	p.next(t, "stopped receiving")
	if code := p.exitCode(t); code != 0 {
		t.Fatalf("exit %d\n%s", code, p.log.String())
	}
	sqsc, _ := emu.Clients()
	v, f, err := localaws.Depth(context.Background(), sqsc, q.URL)
	if err != nil || v != 2 || f != 0 {
		t.Errorf("queue %d visible, %d in flight (%v); want both jobs back", v, f, err)
	}
	if err := runDrain(t.Context(), []string{"-addr", addr}, &out, &errOut); err == nil {
		t.Error("worker drain with no worker listening succeeded")
	}
}

// `worker ready` (the chart's helm test) passes on a ready worker, prints
// what /readyz says, and fails on one that is not ready or not there.
func TestReadyCommand(t *testing.T) {
	status, body := http.StatusOK, "ready\nengines: 2 partitions, encoder compiled\n"
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.RequestURI()
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	addr := strings.TrimPrefix(srv.URL, "http://")
	var out, errOut strings.Builder
	if err := runReady(t.Context(), []string{"-addr", addr}, &out, &errOut); err != nil || out.String() != body || asked != "/readyz" {
		t.Errorf("ready worker: %v, printed %q, asked %q", err, out.String(), asked)
	}
	if err := runReady(t.Context(), []string{"-addr", addr, "-local"}, &out, &errOut); err != nil || asked != "/readyz?local=1" {
		t.Errorf("-local: %v, asked %q", err, asked)
	}
	status, body = http.StatusServiceUnavailable, "not ready: no partition ready\n"
	if err := runReady(t.Context(), []string{"-addr", addr}, &out, &errOut); err == nil || !strings.Contains(err.Error(), "no partition ready") {
		t.Errorf("a worker that is not ready: %v", err)
	}
	srv.Close()
	if err := runReady(t.Context(), []string{"-addr", addr}, &out, &errOut); err == nil {
		t.Error("no worker listening: ready")
	}
}

func TestDrainOnlyFromLoopback(t *testing.T) {
	for remote, want := range map[string]bool{"127.0.0.1:5000": true, "[::1]:5000": true, "10.0.3.7:5000": false, "[fd00::1]:80": false, "garbage": false} {
		if got := fromLoopback(remote); got != want {
			t.Errorf("fromLoopback(%q) = %v, want %v", remote, got, want)
		}
	}
}

// A worker whose output bucket does not exist is not ready (a HEAD of a
// missing bucket is a 404 like a missing key, so only a write tells), and
// the instance health check still passes: the bucket is every instance's.
func TestReadinessWithoutOutputBucket(t *testing.T) {
	emu, q := setupQueue(t, "ready3")
	asr := tritontest.Start(t)
	p := startWorker(t, "FLEETSCRIBE_AWS_ENDPOINT="+emu.Endpoint, "FLEETSCRIBE_QUEUE_URL="+q.URL,
		"FLEETSCRIBE_OUTPUT_BUCKET=no-such-bucket", "FLEETSCRIBE_INPUT_BUCKETS=inbox", "FLEETSCRIBE_TRITON_ADDRS="+asr.Addr, "FLEETSCRIBE_IMDS=off")
	base := "http://" + p.metricsAddr(t)
	var code int
	var body string
	testwait.For(t, "the worker running", func() bool {
		code, body = probe(base + "/readyz")
		return code != 0 && !strings.Contains(body, "not running")
	})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "output bucket unavailable") || !strings.Contains(body, "NoSuchBucket") {
		t.Errorf("readyz: %d %q, want 503 naming the missing output bucket", code, body)
	}
	if code, body := probe(base + "/readyz?local=1"); code != http.StatusOK {
		t.Errorf("readyz?local=1 %d (%q) with the partitions up and the output bucket missing", code, body)
	}
}
