// Package shmtest runs a test with a small /dev/shm: the test binary runs
// the test again in a child process with a user and mount namespace of its
// own, where a tmpfs of the size asked for is mounted over /dev/shm, as a
// container's size-limited /dev/shm is. It is for tests only.
package shmtest

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
)

const (
	childEnv = "FLEETSCRIBE_SHMTEST_MIB"
	skipMark = "no small /dev/shm here"
)

// Small reports whether this is the child, with a /dev/shm of mib MiB
// mounted: then the test goes on and its failures are the child's. In the
// parent it runs the child, fails the test if the child failed (a SIGBUS
// included), and reports false: the test returns. Where the system lets
// no namespace be made here, the test is skipped, saying why.
func Small(t *testing.T, mib int) bool {
	t.Helper()
	if v := os.Getenv(childEnv); v != "" {
		if v != strconv.Itoa(mib) {
			t.Fatalf("%s=%s, want %d", childEnv, v, mib)
		}
		// Mounts made here stay in this namespace. A system that makes the
		// namespace but refuses mounts in it (a security module's policy
		// on unprivileged namespaces) skips, as one without namespaces does.
		if err := syscall.Mount("none", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			t.Skipf("%s: make mounts private: %v", skipMark, err)
		}
		if err := syscall.Mount("tmpfs", "/dev/shm", "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%dm,mode=1777", mib)); err != nil {
			t.Skipf("%s: mount a %d MiB tmpfs on /dev/shm: %v", skipMark, mib, err)
		}
		return true
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+strconv.Itoa(mib))
	uid, gid := os.Getuid(), os.Getgid()
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: uid, Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: gid, Size: 1}},
		GidMappingsEnableSetgroups: false,
	}
	out, err := cmd.CombinedOutput()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Skipf("no user and mount namespace for a small /dev/shm here: %v", err)
	}
	if err != nil {
		t.Fatalf("with a %d MiB /dev/shm: %v\n%s", mib, err, out)
	}
	if bytes.Contains(out, []byte(skipMark)) {
		t.Skipf("%s", out)
	}
	t.Logf("with a %d MiB /dev/shm:\n%s", mib, out)
	return false
}

// Killed runs the test again in a child process with env ("NAME=value")
// added, which the child's run of the test sees and acts on: it makes
// what a killed process leaves behind, prints ready as a line, and blocks.
// Killed waits for that line, kills the child with SIGKILL (no cleanup of
// any kind runs), waits for it to end and returns its pid.
func Killed(t *testing.T, env, ready string) int {
	t.Helper()
	child := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1")
	child.Env = append(os.Environ(), env)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(out).ReadString('\n')
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()
	if line != ready+"\n" {
		t.Fatalf("the child to be killed said %q, want %q", line, ready)
	}
	return child.Process.Pid
}
