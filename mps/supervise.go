package mps

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// Supervisor runs a plan as host processes, without containers: the MPS
// control daemon, then one process per partition with the partition's MPS
// environment, each restarted when it exits. It watches the daemon and,
// when a server reports FAULT, restarts every partition, which is the
// documented way out of FAULT (the server takes work again only once all
// clients of the faulted device have exited).
type Supervisor struct {
	Plan    []Partition
	Control *Control
	// Command is the partition's argv. {name}, {gpu}, {index}, {pct},
	// {grpc_port}, {http_port} and {metrics_port} are replaced by the
	// partition's values.
	Command []string
	// StartDaemon starts the control daemon first and quits it at the end;
	// leave it false where the daemon runs already.
	StartDaemon bool
	// CheckEvery is how often the daemon is asked for its servers' state
	// (0: 5s).
	CheckEvery time.Duration
	// Output receives each partition's output, each line prefixed with the
	// partition's name (nil: discarded).
	Output io.Writer
	Log    zerolog.Logger

	mu      sync.Mutex
	running map[string]*exec.Cmd
	outMu   sync.Mutex
}

// Expand fills a command template for one partition.
func Expand(argv []string, p Partition) []string {
	r := strings.NewReplacer(
		"{name}", p.Name(), "{gpu}", strconv.Itoa(p.GPU), "{index}", strconv.Itoa(p.Index),
		"{pct}", strconv.Itoa(p.ThreadPercentage), "{grpc_port}", strconv.Itoa(p.GRPCPort),
		"{http_port}", strconv.Itoa(p.HTTPPort), "{metrics_port}", strconv.Itoa(p.MetricsPort))
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = r.Replace(a)
	}
	return out
}

// Run supervises until ctx is done, then stops the partitions (SIGTERM,
// SIGKILL after ten seconds) and, if it started it, the daemon.
func (s *Supervisor) Run(ctx context.Context) error {
	if len(s.Plan) == 0 || len(s.Command) == 0 {
		return errors.New("supervise: nothing to run")
	}
	mps := false
	for _, p := range s.Plan {
		mps = mps || p.Sharing != SharingTimeSliced
	}
	if s.StartDaemon && mps {
		if err := s.startDaemon(ctx); err != nil {
			return err
		}
		s.Log.Info().Msg("mps control daemon started")
		defer func() {
			qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := s.Control.Quit(qctx); err != nil {
				s.Log.Warn().Err(err).Msg("mps daemon quit")
			}
		}()
	}
	s.running = map[string]*exec.Cmd{}
	var wg sync.WaitGroup
	for _, p := range s.Plan {
		wg.Go(func() { s.keep(ctx, p) })
	}
	if mps { // time-sliced partitions have no daemon to watch
		wg.Go(func() { s.watch(ctx) })
	}
	wg.Wait()
	return nil
}

// startDaemon starts the control daemon. A daemon that already answers at
// the pipe directory with no clients is one a supervisor left running when
// it was killed (it could not quit it): it is quit and ours started, so a
// restarted supervisor does not fail on it for ever. One with clients is
// in use: a clear error, nothing touched.
func (s *Supervisor) startDaemon(ctx context.Context) error {
	err := s.Control.StartDaemon(ctx)
	if err == nil {
		return nil
	}
	st, serr := s.Control.Status(ctx)
	if serr != nil {
		return err // no daemon answers: the start failed for another reason
	}
	var clients []int
	for _, pids := range st.Clients() {
		clients = append(clients, pids...)
	}
	if len(clients) > 0 {
		slices.Sort(clients)
		return fmt.Errorf("%w: a daemon already runs at %s with %d clients (pids %v): another supervisor's, or partitions it left; "+
			"stop them, or give this one its own pipe directory", err, s.Control.Dirs.Pipe, len(clients), clients)
	}
	s.Log.Warn().Str("pipe_dir", s.Control.Dirs.Pipe).Int("servers", len(st.Servers)).
		Msg("mps control daemon left running with no clients (its supervisor was killed): quitting it and starting this one's")
	if err := s.Control.Quit(ctx); err != nil {
		return fmt.Errorf("quit the mps daemon left running: %w", err)
	}
	// The daemon answers until it has exited; its pipe is then free.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := s.Control.StartDaemon(ctx); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("the mps daemon left running did not exit in 30s: %w", err)
		}
		if backoff.Sleep(ctx, 200*time.Millisecond) != nil {
			return ctx.Err()
		}
	}
}

// keep runs one partition until ctx is done, restarting it with backoff.
func (s *Supervisor) keep(ctx context.Context, p Partition) {
	log := s.Log.With().Str("partition", p.Name()).Logger()
	for attempt := 0; ctx.Err() == nil; attempt++ {
		argv := Expand(s.Command, p)
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Env = append(os.Environ(), p.Env(s.Control.Dirs)...)
		// Its own group (stopped as one), and killed if the supervisor
		// dies without stopping it (SIGKILL, the OOM killer): an orphan
		// would hold its ports and its MPS client slot from the next run.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		dieWithParent(cmd.SysProcAttr)
		if s.Output != nil {
			w := &prefixWriter{prefix: p.Name() + " | ", out: s.Output, mu: &s.outMu}
			cmd.Stdout, cmd.Stderr = w, w
		}
		started := time.Now()
		if err := cmd.Start(); err != nil {
			log.Error().Err(err).Msg("partition did not start")
		} else {
			log.Info().Int("pid", cmd.Process.Pid).Int("gpu", p.GPU).Int("thread_percentage", p.ThreadPercentage).Msg("partition started")
			s.mu.Lock()
			s.running[p.Name()] = cmd
			s.mu.Unlock()
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-ctx.Done():
				stopGroup(cmd, done)
				return
			}
			s.mu.Lock()
			delete(s.running, p.Name())
			s.mu.Unlock()
			log.Warn().Err(err).Dur("ran", time.Since(started)).Msg("partition exited; restarting")
		}
		if time.Since(started) > time.Minute {
			attempt = 0
		}
		if backoff.Sleep(ctx, backoff.Delay(time.Second, 30*time.Second, attempt)) != nil {
			return
		}
	}
}

// stopGroup ends a partition's process group: SIGTERM, then SIGKILL.
func stopGroup(cmd *exec.Cmd, done <-chan error) {
	pgid := -cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-done
	}
}

// watch polls the daemon and restarts every partition when a server is in
// FAULT.
func (s *Supervisor) watch(ctx context.Context) {
	every := s.CheckEvery
	if every <= 0 {
		every = 5 * time.Second
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st, err := s.Control.Status(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.Log.Warn().Err(err).Msg("mps daemon status")
			}
			continue
		}
		if f := st.Faulted(); len(f) > 0 {
			s.Log.Error().Int("server_pid", f[0].PID).Msg("mps server in FAULT: restarting every partition")
			s.restartAll()
		}
	}
}

// restartAll signals every running partition's group; keep restarts them.
func (s *Supervisor) restartAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cmd := range s.running {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// PIDs returns the process id of each running partition, by name.
func (s *Supervisor) PIDs() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for name, cmd := range s.running {
		out[name] = cmd.Process.Pid
	}
	return out
}

// prefixWriter writes whole lines, each with a prefix.
type prefixWriter struct {
	prefix string
	out    io.Writer
	mu     *sync.Mutex
	buf    []byte
}

func (w *prefixWriter) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		w.mu.Lock()
		_, err := fmt.Fprintf(w.out, "%s%s\n", w.prefix, w.buf[:i])
		w.mu.Unlock()
		if err != nil {
			return len(b), err
		}
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

// GPUCheck compares what a plan puts on one GPU with what MPS reports.
type GPUCheck struct {
	GPU     int
	Planned int   // partitions planned on the GPU
	Clients []int // MPS client processes on it
}

// CheckPlan compares a plan with the daemon's status: each GPU of the plan
// should have at least its planned number of clients (a Triton partition
// with a Python backend has more: each model instance's stub is one), and
// no server may be in FAULT. It returns a row per GPU and the problems.
func CheckPlan(ps []Partition, st Status) ([]GPUCheck, []string) {
	clients := st.Clients()
	planned := map[int]int{}
	for _, p := range ps {
		planned[p.GPU]++
	}
	var rows []GPUCheck
	var problems []string
	for _, g := range GPUs(ps) {
		rows = append(rows, GPUCheck{GPU: g, Planned: planned[g], Clients: clients[g]})
		if n := len(clients[g]); n < planned[g] {
			problems = append(problems, fmt.Sprintf("GPU %d: %d MPS clients, %d partitions planned", g, n, planned[g]))
		}
	}
	if len(st.Servers) == 0 {
		problems = append(problems, "no MPS server (no partition has connected)")
	}
	for _, f := range st.Faulted() {
		problems = append(problems, fmt.Sprintf("MPS server %d is in FAULT: restart the partitions (worker mps status -recover)", f.PID))
	}
	return rows, problems
}
