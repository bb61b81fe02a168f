// Package tritonproc runs real Triton Inference Server processes (the
// pinned build that `make deps` installs, through scripts/tritonserver) on
// loopback, for the demo, the tests, the conformance suite and the chaos
// suite. It writes model repositories whose models all run the shipped
// deploy/triton/models/asr/1/model.py, with configurations that modelspec
// renders (Model is a test model's), starts a server on free ports, waits
// until its models are ready, and kills or restarts it.
//
// Tests call Require first: on a laptop without `make deps`
// they are skipped, in `make test` (FLEETSCRIBE_REQUIRE_TRITON=1) a missing
// server fails them.
package tritonproc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetscribe/fleetscribe/lab/kit/freeport"
	"github.com/fleetscribe/fleetscribe/lab/kit/modroot"
	"github.com/fleetscribe/fleetscribe/modelspec"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// Version is the Triton Inference Server release the project pins
// (deploy/triton/requirements.txt) and is tested against.
const Version = "2.51.0"

// RequireEnv, set to 1, turns a missing server from a skip into a failure.
const RequireEnv = "FLEETSCRIBE_REQUIRE_TRITON"

// Root returns the module's root folder (the one holding go.mod), searched
// upwards from the working directory.
func Root() (string, error) { return modroot.Find() }

// Launcher returns the path of scripts/tritonserver, which runs the pinned
// server, after checking that the server is installed.
func Launcher() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	script := filepath.Join(root, "scripts", "tritonserver")
	bins, _ := filepath.Glob(filepath.Join(root, ".triton", "venv", "lib", "python3*", "site-packages", "pytriton", "tritonserver", "bin", "tritonserver"))
	if os.Getenv("FLEETSCRIBE_TRITONSERVER") == "" && len(bins) == 0 {
		return "", fmt.Errorf("tritonproc: Triton Inference Server is not installed in %s (run make deps)", filepath.Join(root, ".triton"))
	}
	return script, nil
}

// ModelFile returns the shipped Python-backend model folder (version 1).
func ModelFile() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", "triton", "models", "asr", "1"), nil
}

// TB is what Require needs of a test (testing.TB has it), so that this
// package, linked into the demo and chaos binaries, does not link testing.
type TB interface {
	Helper()
	Fatal(args ...any)
	Skip(args ...any)
}

// Require skips t when no server is installed, or fails it under
// FLEETSCRIBE_REQUIRE_TRITON=1.
func Require(t TB) {
	t.Helper()
	if _, err := Launcher(); err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// Model is a model of a test repository: model.py's engine ("echo",
// "pocketsphinx", "whisper", "module", ...) on one CPU instance, batches of
// up to 8 formed within 5 ms, two priority levels (the default the last),
// no queue bound or timeout. Callers change what they test on the
// modelspec.Config it returns.
func Model(engine string) modelspec.Config {
	return modelspec.Config{
		Backend: "python", MaxBatch: 8, Instances: 1, Kind: modelspec.KindCPU,
		Batching:   modelspec.Batching{MaxQueueDelay: 5 * time.Millisecond, PriorityLevels: 2, DefaultPriority: 2},
		Parameters: map[string]string{"engine": engine},
	}
}

// EchoDelays are the echo engine's parameters that make it take batch
// plus row for each 30 s of audio in a batch (each row's share scaled by
// its length); zero leaves a delay out.
func EchoDelays(batch, row time.Duration) map[string]string {
	out := map[string]string{}
	for k, d := range map[string]time.Duration{"batch_delay_ms": batch, "row_delay_ms": row} {
		if d > 0 {
			out[k] = strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', -1, 64)
		}
	}
	return out
}

// WriteRepo writes a model repository in dir: one folder per model (each
// config rendered under its key's name) with version 1 linked to the
// shipped model.py.
func WriteRepo(dir string, models map[string]modelspec.Config) error {
	src, err := ModelFile()
	if err != nil {
		return err
	}
	for name, c := range models {
		md := filepath.Join(dir, name)
		if err := os.MkdirAll(md, 0o755); err != nil {
			return err
		}
		c.Model = name
		if err := os.WriteFile(filepath.Join(md, "config.pbtxt"), []byte(c.Render()), 0o644); err != nil {
			return err
		}
		link := filepath.Join(md, "1")
		_ = os.Remove(link)
		if err := os.Symlink(src, link); err != nil {
			return err
		}
	}
	return nil
}

// Options say how to run one server.
type Options struct {
	Repo string // model repository folder
	// GRPCPort, HTTPPort, MetricsPort: 0 picks free ports.
	GRPCPort, HTTPPort, MetricsPort int
	// Models to wait for (none: every model directory in Repo).
	Models []string
	Log    io.Writer // the server's output (nil: discarded)
	// ReadyTimeout bounds the wait for readiness (default 60 s).
	ReadyTimeout time.Duration
}

// Server is one running tritonserver process.
type Server struct {
	Addr string // gRPC, host:port
	opts Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// MetricsAddr is the server's metrics endpoint, host:port.
func (s *Server) MetricsAddr() string { return "127.0.0.1:" + strconv.Itoa(s.opts.MetricsPort) }

// ShmPrefix is the prefix of the shared memory regions the Python backend
// of a server started here creates in /dev/shm; a server killed with
// SIGKILL leaves them, and Kill removes them.
func ShmPrefix(grpcPort string) string { return "fleetscribe-tritonpy-" + grpcPort + "-" }

// startAttempts bounds the starts of a server on ports Start chose, when
// it exits before it is ready for a reason other than its models.
const startAttempts = 3

// Start runs a server and waits until it and its models are ready. A
// server on ports Start chose that exits before it is ready, for any
// reason but a model that failed to load, is started again on fresh
// ports (a port held against other processes can still be taken by one
// that does not ask; the error says what the server's last attempt
// printed).
func Start(ctx context.Context, o Options) (*Server, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var s *Server
		s, err = startOnce(ctx, o)
		if err == nil {
			return s, nil
		}
		var exited *ExitedError
		if !errors.As(err, &exited) || exited.ModelFailed() || attempt == startAttempts ||
			o.GRPCPort != 0 || o.HTTPPort != 0 || o.MetricsPort != 0 {
			return nil, err
		}
	}
}

func startOnce(ctx context.Context, o Options) (*Server, error) {
	ports := []*int{&o.GRPCPort, &o.HTTPPort, &o.MetricsPort}
	for _, p := range ports {
		if *p == 0 {
			var err error
			if *p, err = pickPort(); err != nil {
				return nil, err
			}
		}
	}
	if len(o.Models) == 0 {
		entries, err := os.ReadDir(o.Repo)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			if _, err := os.Stat(filepath.Join(o.Repo, e.Name(), "config.pbtxt")); err == nil {
				o.Models = append(o.Models, e.Name())
			}
		}
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	s := &Server{Addr: "127.0.0.1:" + strconv.Itoa(o.GRPCPort), opts: o}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Args returns the tritonserver arguments of a server on these ports
// (numbers, or the templates of `worker mps run`, such as {grpc_port}).
func Args(repo, grpcPort, httpPort, metricsPort string) []string {
	return []string{
		"--model-repository=" + repo,
		"--grpc-address=127.0.0.1", "--http-address=127.0.0.1",
		"--grpc-port=" + grpcPort, "--http-port=" + httpPort, "--metrics-port=" + metricsPort,
		// No GPU metrics on a CPU host: DCGM and NVML only log failures.
		"--allow-gpu-metrics=false",
		"--backend-config=python,shm-region-prefix-name=" + ShmPrefix(grpcPort),
		"--exit-timeout-secs=5",
	}
}

func (s *Server) start(ctx context.Context) error {
	bin, err := Launcher()
	if err != nil {
		return err
	}
	o := s.opts
	cmd := exec.Command(bin, Args(o.Repo, strconv.Itoa(o.GRPCPort), strconv.Itoa(o.HTTPPort), strconv.Itoa(o.MetricsPort))...)
	tail := &tailWriter{max: 16 << 10}
	var out io.Writer = tail
	if o.Log != nil {
		out = io.MultiWriter(o.Log, tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so that Kill reaches the Python backend's
	// stub processes too, and gone with the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start tritonserver: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	if err := WaitReady(ctx, s.Addr, o.Models, o.ReadyTimeout, done); err != nil {
		s.Kill()
		var exited *ExitedError
		if errors.As(err, &exited) {
			exited.Tail = tail.String()
		}
		return err
	}
	return nil
}

// ExitedError is a server that exited before it was ready.
type ExitedError struct {
	Addr string
	Tail string // the end of what it printed, where Start kept it
}

func (e *ExitedError) Error() string {
	msg := fmt.Sprintf("tritonserver %s exited before it was ready", e.Addr)
	if e.Tail == "" {
		return msg + " (see its log)"
	}
	// Its error lines (glog's E lines, Python's exceptions) say why; the
	// table it prints at start and its shutdown say nothing.
	var lines, errs []string
	for _, l := range strings.Split(strings.TrimRight(e.Tail, "\n"), "\n") {
		lines = append(lines, l)
		if strings.HasPrefix(l, "E") || strings.Contains(l, "rror") {
			errs = append(errs, l)
		}
	}
	if len(errs) > 0 {
		lines = errs
	}
	if len(lines) > 12 {
		lines = lines[len(lines)-12:]
	}
	return msg + "; its last lines:\n" + strings.Join(lines, "\n")
}

// ModelFailed reports whether the server said a model failed to load
// (which another start would repeat).
func (e *ExitedError) ModelFailed() bool {
	return strings.Contains(e.Tail, "failed to load")
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - w.max; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// WaitReady waits until the server at addr answers that it and each
// model are ready, or exited is closed, or timeout passes.
func WaitReady(ctx context.Context, addr string, models []string, timeout time.Duration, exited <-chan struct{}) error {
	// Reconnect within a second of the server listening: gRPC's default
	// backoff grows to two minutes, longer than the last minutes of a
	// partition that compiles its encoder for five (seen on an H200: ready
	// at 5 min 47 s, noticed after the 7 min deadline).
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
			MinConnectTimeout: 2 * time.Second,
		}))
	if err != nil {
		return err
	}
	defer conn.Close()
	rpc := pb.NewGRPCInferenceServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready(ctx, rpc, models) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("tritonserver %s: not ready within %s: %w", addr, timeout, ctx.Err())
		case <-exited:
			return &ExitedError{Addr: addr}
		case <-tick.C:
		}
	}
}

func ready(ctx context.Context, rpc pb.GRPCInferenceServiceClient, models []string) bool {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r, err := rpc.ServerReady(cctx, &pb.ServerReadyRequest{})
	if err != nil || !r.GetReady() {
		return false
	}
	for _, m := range models {
		mr, err := rpc.ModelReady(cctx, &pb.ModelReadyRequest{Name: m})
		if err != nil || !mr.GetReady() {
			return false
		}
	}
	return true
}

// Kill ends the server and its stubs with SIGKILL at once, as a crash
// would, waits for it and removes the shared memory it leaves.
func (s *Server) Kill() { s.signal(syscall.SIGKILL, 0) }

// Stop ends the server with SIGTERM (its in-flight requests finish), and
// SIGKILL after grace.
func (s *Server) Stop(grace time.Duration) { s.signal(syscall.SIGTERM, grace) }

func (s *Server) signal(sig syscall.Signal, grace time.Duration) {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = syscall.Kill(-cmd.Process.Pid, sig)
	if sig != syscall.SIGKILL {
		select {
		case <-done:
		case <-time.After(grace):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	}
	<-done
	// The stubs of a killed server are in its process group; make sure
	// they are gone too, then remove what they leave in /dev/shm.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	removeShm(s.opts.GRPCPort)
}

// removeShm removes the Python backend's shared memory regions of the
// server on grpcPort.
func removeShm(grpcPort int) {
	left, _ := filepath.Glob(filepath.Join("/dev/shm", ShmPrefix(strconv.Itoa(grpcPort))+"*"))
	for _, f := range left {
		_ = os.Remove(f)
	}
}

// Restart starts the server again on the same ports (after Kill or Stop).
func (s *Server) Restart(ctx context.Context) error {
	s.Kill()
	return s.start(ctx)
}

// pickPort gives Start its ports (a test's seam).
var pickPort = FreePort

// FreePort reserves a free loopback port for this process (freeport: held
// against the servers other packages' tests start at the same time).
func FreePort() (int, error) { return freeport.Get() }

// FreePortRange reserves n consecutive free loopback ports.
func FreePortRange(n int) (int, error) { return freeport.Range(n) }
