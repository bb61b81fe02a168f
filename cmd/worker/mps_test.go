package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// `worker mps status` against the stand-in daemon: clients on each planned
// GPU pass; a FAULT is a problem, and -recover restarts every partition
// service through docker compose (a stand-in docker records the call).
func TestMPSStatusAndRecover(t *testing.T) {
	control, err := filepath.Abs("../../mps/testdata/fake-mps-control")
	if err != nil {
		t.Fatal(err)
	}
	pipe := t.TempDir()
	bin := t.TempDir()
	calls := filepath.Join(bin, "calls")
	docker := "#!/bin/sh\necho \"$*\" >>" + calls + "\n"
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(docker), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("CUDA_MPS_PIPE_DIRECTORY", pipe)
	if out, err := exec.Command(control, "-d").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	// Two clients on each of GPUs 0 and 1, as four partitions would be.
	for i := range 4 {
		c := exec.Command("sleep", "60")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
		if err := os.WriteFile(filepath.Join(pipe, "clients", strconv.Itoa(c.Process.Pid)), []byte(strconv.Itoa(i/2)+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status := func(extra ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		args := append([]string{"status", "-gpus", "0-1", "-per-gpu", "2", "-mps-control", control, "-pipe-dir", pipe, "-project-dir", bin}, extra...)
		err := runMPS(t.Context(), args, &stdout, &stderr)
		return stdout.String(), err
	}
	out, err := status()
	if err != nil || !strings.Contains(out, "4242") || !strings.Contains(out, "ACTIVE") {
		t.Fatalf("healthy stack: %v\n%s", err, out)
	}
	out, err = status("-per-gpu", "3")
	if err == nil || !strings.Contains(out, "problem: GPU 0: 2 MPS clients, 3 partitions planned") {
		t.Errorf("missing clients: %v\n%s", err, out)
	}
	if err := os.WriteFile(filepath.Join(pipe, "state"), []byte("FAULT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = status("-recover")
	if err == nil || !strings.Contains(out, "FAULT") {
		t.Errorf("faulted server: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(calls)
	if got := strings.TrimSpace(string(b)); got != "compose restart triton-gpu0-p0 triton-gpu0-p1 triton-gpu1-p0 triton-gpu1-p1" {
		t.Errorf("recovery ran %q", got)
	}
	if out, err := status("-format", "json"); err == nil || !strings.Contains(out, `"State": "FAULT"`) {
		t.Errorf("json: %v\n%s", err, out)
	}
}

// Only plan and run take -sharing: the compose rendering always runs the
// MPS daemon beside the partitions, so a time-sliced compose file would
// still put them under MPS.
func TestSharingOnlyWherePlanned(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if err := runMPS(t.Context(), []string{"plan", "-gpus", "0", "-sharing", "timesliced", "-format", "json"}, &stdout, &stderr); err != nil {
		t.Fatalf("plan: %v: %s", err, stderr.String())
	}
	if !strings.Contains(stdout.String(), `"Sharing": "timesliced"`) || strings.Contains(stdout.String(), "CUDA_MPS") {
		t.Errorf("time-sliced plan:\n%s", stdout.String())
	}
	for _, sub := range []string{"compose", "up", "status"} {
		stderr.Reset()
		if err := runMPS(t.Context(), []string{sub, "-gpus", "0", "-sharing", "timesliced"}, &stdout, &stderr); err == nil {
			t.Errorf("%s accepted -sharing timesliced", sub)
		}
	}
}
