// Package procstat reads a process's resource use from /proc, for the
// benchmarks: a child's own peak RSS (rusage of a freshly forked child can
// report its parent's) and its CPU time.
package procstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// path is /proc/PID/name, or /proc/self/name for pid 0.
func path(pid int, name string) string {
	if pid == 0 {
		return "/proc/self/" + name
	}
	return fmt.Sprintf("/proc/%d/%s", pid, name)
}

// PeakRSS is the process's peak resident set (VmHWM) in bytes; pid 0 is
// this process.
func PeakRSS(pid int) (int64, error) {
	f, err := os.Open(path(pid, "status"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, errors.New("no VmHWM")
}

// statFields are the fields of /proc/PID/stat after the command name
// (which may hold spaces) in parentheses: [0] is field 3, the state.
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile(path(pid, "stat"))
	if err != nil {
		return nil, err
	}
	return fieldsAfter(pid, b)
}

// fieldsAfter is statFields of pid's stat b.
func fieldsAfter(pid int, b []byte) ([]string, error) {
	end := bytes.LastIndexByte(b, ')')
	if end < 0 || end+2 > len(b) {
		return nil, fmt.Errorf("%s: no command name", path(pid, "stat"))
	}
	f := strings.Fields(string(b[end+2:]))
	if len(f) < 13 {
		return nil, fmt.Errorf("%s: %d fields", path(pid, "stat"), len(f))
	}
	return f, nil
}

// CPU is the process's user and system time so far; pid 0 is this process.
func CPU(pid int) (user, sys time.Duration, err error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, 0, err
	}
	return cpuOf(f)
}

// Named is the process's command name (as /proc/PID/stat gives it, cut to
// 15 characters) and its user plus system time so far.
func Named(pid int) (comm string, cpu time.Duration, err error) {
	b, err := os.ReadFile(path(pid, "stat"))
	if err != nil {
		return "", 0, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return "", 0, fmt.Errorf("%s: no command name", path(pid, "stat"))
	}
	f, err := fieldsAfter(pid, b)
	if err != nil {
		return "", 0, err
	}
	user, sys, err := cpuOf(f)
	return string(b[open+1 : end]), user + sys, err
}

// cpuOf is the user and system time of a process's stat fields.
func cpuOf(f []string) (user, sys time.Duration, err error) {
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, 0, err
	}
	const hz = 100 // USER_HZ on Linux
	return time.Duration(utime) * time.Second / hz, time.Duration(stime) * time.Second / hz, nil
}

// MinorFaults is how many minor page faults the process has taken: pages
// first touched, each zeroed by the kernel (memory the Go runtime gave
// back and took again counts anew); pid 0 is this process.
func MinorFaults(pid int) (int64, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(f[7], 10, 64)
}
