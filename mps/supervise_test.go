package mps

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/lab/kit/syncbuf"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/rs/zerolog"
)

func statefulControl(t *testing.T) *Control {
	t.Helper()
	bin, err := filepath.Abs("testdata/fake-mps-control")
	if err != nil {
		t.Fatal(err)
	}
	return &Control{Bin: bin, Dirs: Dirs{Pipe: t.TempDir(), Log: t.TempDir()}}
}

// The supervisor starts the daemon and one process per partition with its
// MPS environment and ports, sees them as clients on their GPUs, restarts
// all of them when the server reports FAULT, restarts one that exits, and
// leaves nothing running when stopped.
func TestSupervisorRunsPlanAndRecoversFromFault(t *testing.T) {
	c := statefulControl(t)
	plan, err := Plan(PlanConfig{GPUs: []int{0, 1}, PerGPU: 2, BasePort: 9001, MemLimit: "8G"})
	if err != nil {
		t.Fatal(err)
	}
	out := &syncbuf.Buffer{}
	s := &Supervisor{
		Plan: plan, Control: c, StartDaemon: true, CheckEvery: 50 * time.Millisecond, Output: out,
		// The partition registers as an MPS client of its device, as a
		// CUDA process does when it connects, and reports what it was given.
		Command: []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES" >"$CUDA_MPS_PIPE_DIRECTORY/clients/$$"; ` +
			`echo "port={grpc_port} pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; exec sleep 60`},
		Log: zerolog.Nop(),
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	healthy := func() bool {
		st, err := c.Status(ctx)
		if err != nil {
			return false
		}
		_, problems := CheckPlan(plan, st)
		return len(problems) == 0 && len(s.PIDs()) == len(plan)
	}
	testwait.For(t, "every partition a client on its GPU", healthy)
	st, _ := c.Status(ctx)
	rows, _ := CheckPlan(plan, st)
	pids := s.PIDs()
	for _, r := range rows {
		for _, p := range plan {
			if p.GPU == r.GPU && !slices.Contains(r.Clients, pids[p.Name()]) {
				t.Errorf("partition %s (pid %d) is not a client of GPU %d: %v", p.Name(), pids[p.Name()], r.GPU, r.Clients)
			}
		}
	}
	for _, want := range []string{"gpu0-p0 | port=9001 pct=100 mem=0=8G", "gpu1-p1 | port=9010 pct=100"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("partition output lacks %q:\n%s", want, out.String())
		}
	}

	// A server in FAULT: every partition is replaced.
	state := filepath.Join(c.Dirs.Pipe, "state")
	if err := os.WriteFile(state, []byte("FAULT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the faulted partitions to be stopped", func() bool {
		for _, pid := range pids {
			if syscall.Kill(pid, 0) == nil {
				return false
			}
		}
		return true
	})
	if err := os.WriteFile(state, []byte("ACTIVE\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "the partitions to come back", healthy)
	for name, pid := range s.PIDs() {
		if pid == pids[name] {
			t.Errorf("%s kept pid %d through the fault", name, pid)
		}
	}

	// One partition exits on its own: it alone is restarted.
	before := s.PIDs()
	if err := syscall.Kill(before["gpu1-p0"], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, "gpu1-p0 to restart", func() bool {
		p := s.PIDs()["gpu1-p0"]
		return p != 0 && p != before["gpu1-p0"] && healthy()
	})
	if after := s.PIDs(); after["gpu0-p0"] != before["gpu0-p0"] {
		t.Error("a sibling was restarted with the partition that exited")
	}

	last := s.PIDs()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil
	for name, pid := range last {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("%s (pid %d) still runs after the supervisor stopped", name, pid)
		}
	}
	if _, err := os.Stat(filepath.Join(c.Dirs.Pipe, "daemon")); err == nil {
		t.Error("the daemon was not quit")
	}
}

func TestStatusParsesDaemonReplies(t *testing.T) {
	// Replies as the real daemon prints them (driver 5xx, two H200s).
	devs, err := parseDeviceClients("[1] 00:01.0, NVIDIA H200\n594.1\n592.1\n[0] 00:00.0, NVIDIA H200\n589.1\n588.1\n588.2\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 2 || devs[0].Device != 0 || !slices.Equal(devs[0].Clients, []int{589, 588}) || devs[1].Desc != "00:01.0, NVIDIA H200" {
		t.Fatalf("%+v", devs)
	}
	for _, bad := range []string{"594.1\n", "[x] 00:00.0\n", "[0] ok\nnot-a-pid\n"} {
		if _, err := parseDeviceClients(bad); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
	st := Status{Servers: []ServerStatus{{PID: 1, State: StateFault, Devices: devs}}}
	plan, _ := Plan(PlanConfig{GPUs: []int{0, 1, 2}, PerGPU: 2, BasePort: 8001})
	rows, problems := CheckPlan(plan, st)
	if len(rows) != 3 || len(rows[2].Clients) != 0 {
		t.Errorf("rows %+v", rows)
	}
	joined := strings.Join(problems, "\n")
	if !strings.Contains(joined, "GPU 2: 0 MPS clients, 2 partitions planned") || !strings.Contains(joined, "FAULT") || strings.Contains(joined, "GPU 0") {
		t.Errorf("problems: %v", problems)
	}
}

func TestStatusWithoutDaemon(t *testing.T) {
	c := statefulControl(t)
	if _, err := c.Status(t.Context()); err == nil || !strings.Contains(err.Error(), "Cannot find MPS control daemon") {
		t.Fatalf("want the daemon's own error, got %v", err)
	}
}

func TestParseGPUs(t *testing.T) {
	gpus, err := ParseGPUs("1, GPU-cf76, NVIDIA H200, 143771\n0, GPU-2fd0, NVIDIA H200, 143771\n")
	if err != nil || len(gpus) != 2 || gpus[0].Index != 0 || gpus[1].UUID != "GPU-cf76" || gpus[0].MemoryMiB != 143771 {
		t.Fatalf("%+v %v", gpus, err)
	}
	for _, bad := range []string{"", "x, y, z, 1\n", "0, GPU-1\n"} {
		if _, err := ParseGPUs(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
	for in, want := range map[string][]int{"0": {0}, "0,1,3": {0, 1, 3}, "0-3": {0, 1, 2, 3}, "2-3,6": {2, 3, 6}} {
		if got, err := ParseGPUList(in); err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0-999"} {
		if _, err := ParseGPUList(bad); err == nil {
			t.Errorf("%q: want error", bad)
		}
	}
}

// A time-sliced plan runs its partitions without starting, asking or
// quitting an MPS daemon (there may be none, as on a host without GPUs).
func TestSupervisorTimeSlicedNeedsNoDaemon(t *testing.T) {
	plan, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 2, BasePort: 9101, Sharing: SharingTimeSliced})
	if err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(t.TempDir(), "calls")
	control := &Control{Bin: "sh", Args: []string{"-c", `echo called >>` + calls + `; exit 1`, "control"}, Dirs: Dirs{Pipe: t.TempDir(), Log: t.TempDir()}}
	out := &syncbuf.Buffer{}
	s := &Supervisor{Plan: plan, Control: control, StartDaemon: true, CheckEvery: 10 * time.Millisecond, Output: out,
		Command: []string{"sh", "-c", `echo "port={grpc_port} mps=${CUDA_MPS_PIPE_DIRECTORY:-none}"; exec sleep 60`}, Log: zerolog.Nop()}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testwait.For(t, "both partitions running", func() bool {
		return strings.Contains(out.String(), "port=9101 mps=none") && strings.Contains(out.String(), "port=9104 mps=none")
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(calls); err == nil {
		t.Errorf("the MPS control was called: %s", b)
	}
}

// registerAsClient is a partition command that registers as an MPS client
// of its device, as a CUDA process does when it connects.
var registerAsClient = []string{"sh", "-c", `echo "$CUDA_VISIBLE_DEVICES" >"$CUDA_MPS_PIPE_DIRECTORY/clients/$$"; exec sleep 60`}

// A daemon left running by a supervisor that was killed (it has no
// clients) is quit and replaced: the next supervisor starts instead of
// failing on it at every restart.
func TestSupervisorReplacesADaemonLeftWithoutClients(t *testing.T) {
	c := statefulControl(t)
	if err := c.StartDaemon(t.Context()); err != nil {
		t.Fatal(err)
	}
	daemon := filepath.Join(c.Dirs.Pipe, "daemon")
	if err := os.WriteFile(daemon, []byte("left\n"), 0o644); err != nil { // the stand-in's daemon, marked
		t.Fatal(err)
	}
	plan, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 2, BasePort: 9201})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	s := &Supervisor{Plan: plan, Control: c, StartDaemon: true, CheckEvery: 50 * time.Millisecond,
		Command: registerAsClient, Log: zerolog.New(logs)}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	testwait.For(t, "both partitions clients of the new daemon", func() bool {
		st, err := c.Status(ctx)
		return err == nil && len(st.Clients()[0]) == 2 && len(s.PIDs()) == 2
	})
	if b, _ := os.ReadFile(daemon); len(b) != 0 {
		t.Errorf("the daemon left running was not replaced (its marker %q is still there)", b)
	}
	if !strings.Contains(logs.String(), "left running with no clients") {
		t.Errorf("no warning of the daemon left running:\n%s", logs.String())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(daemon); err == nil {
		t.Error("the daemon was not quit")
	}
}

// A daemon with live clients is in use (another supervisor's, or
// partitions a killed one left): the supervisor says so, with their pids,
// and touches neither.
func TestSupervisorRefusesADaemonInUse(t *testing.T) {
	c := statefulControl(t)
	if err := c.StartDaemon(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	pid := strconv.Itoa(other.Process.Pid)
	if err := os.WriteFile(filepath.Join(c.Dirs.Pipe, "clients", pid), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plan, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 2, BasePort: 9301})
	if err != nil {
		t.Fatal(err)
	}
	s := &Supervisor{Plan: plan, Control: c, StartDaemon: true, Command: registerAsClient, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second) // a supervisor that goes ahead runs until then
	defer cancel()
	err = s.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "already running") || !strings.Contains(err.Error(), "1 clients (pids ["+pid+"])") {
		t.Fatalf("want the daemon's own error and its client named, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(c.Dirs.Pipe, "daemon")); err != nil {
		t.Error("the daemon in use was quit")
	}
	if syscall.Kill(other.Process.Pid, 0) != nil {
		t.Error("the daemon's client was stopped")
	}
}

// A supervisor killed outright (SIGKILL: no chance to stop anything)
// takes its partitions with it: an orphan would hold the ports and the MPS
// client slot the next supervisor's partitions need.
func TestPartitionsDieWithAKilledSupervisor(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the parent-death signal is Linux's")
	}
	pidFile := filepath.Join(t.TempDir(), "partition.pid")
	sup := exec.Command(os.Args[0], "-test.run=^TestHelperSupervisor$")
	sup.Env = append(os.Environ(), "FLEETSCRIBE_HELPER_SUPERVISOR="+pidFile)
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	var pid int
	testwait.For(t, "the helper supervisor's partition to start", func() bool {
		b, err := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil && pid > 0
	})
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := sup.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sup.Wait()
	testwait.For(t, "the partition to die with its supervisor", func() bool { return !running(pid) })
}

// TestHelperSupervisor is the supervisor TestPartitionsDieWithAKilledSupervisor
// kills: one time-sliced partition (no daemon) that writes its pid.
func TestHelperSupervisor(t *testing.T) {
	pidFile := os.Getenv("FLEETSCRIBE_HELPER_SUPERVISOR")
	if pidFile == "" {
		t.Skip("a helper process of TestPartitionsDieWithAKilledSupervisor")
	}
	plan, err := Plan(PlanConfig{GPUs: []int{0}, PerGPU: 1, BasePort: 9401, Sharing: SharingTimeSliced})
	if err != nil {
		t.Fatal(err)
	}
	s := &Supervisor{Plan: plan, Control: NewControl(Dirs{}), Log: zerolog.Nop(),
		Command: []string{"sh", "-c", `echo $$ >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 60`, pidFile}}
	_ = s.Run(t.Context())
}

// running is whether pid is a live process (a zombie, dead but not yet
// reaped by whoever adopted it, is not).
func running(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, rest, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(rest, "Z")
}
