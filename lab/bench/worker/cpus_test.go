package main

import (
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string][]int{"": nil, "0-3": {0, 1, 2, 3}, "1,3": {1, 3}, "0, 2-3,2": {0, 2, 3}} {
		got, err := parseCPUList(in)
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("parseCPUList(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"a", "3-1", "-1", "0-", "2000"} {
		if _, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q): no error", in)
		}
	}
}

// The child runs on the CPUs asked for, and the thread that started it
// keeps its own: a child started after it from the same thread may run
// anywhere it could before.
func TestStartOnLimitsTheChildOnly(t *testing.T) {
	runtime.LockOSThread() // startOn's own lock nests in this one: one thread throughout
	defer runtime.UnlockOSThread()
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Skip(err)
	}
	if before.Count() < 2 {
		t.Skip("needs two CPUs")
	}
	cpu := 0
	for !before.IsSet(cpu) {
		cpu++
	}
	if got := allowedCPUs(t, []int{cpu}); got != strconv.Itoa(cpu) {
		t.Fatalf("child ran on CPUs %q, want %d", got, cpu)
	}
	all := allowedCPUs(t, nil)
	if all == strconv.Itoa(cpu) {
		t.Fatalf("a later child still ran on CPU %s alone: the thread's affinity was not restored", all)
	}
}

// allowedCPUs starts a child with startOn and returns the CPU list it may
// run on.
func allowedCPUs(t *testing.T, cpus []int) string {
	t.Helper()
	cmd := exec.Command("grep", "Cpus_allowed_list", "/proc/self/status")
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := startOn(cmd, cpus); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(out.String(), ":")
	return strings.TrimSpace(list)
}
