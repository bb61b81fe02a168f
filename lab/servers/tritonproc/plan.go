package tritonproc

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// Plan is partitions of real Triton run the way a GPU host runs its plan:
// the worker binary's `worker mps run -sharing timesliced`, each partition
// a server of one model repository, on ports base, base+3, ...
type Plan struct {
	Addrs []string // the partitions' gRPC addresses
	sup   *exec.Cmd
	done  chan struct{}
}

// RunPlan starts n partitions of repo (its models named by models, waited
// for) through workerBin, launcher running each server, their output to
// logs; they are ready when it returns. Stop ends them.
func RunPlan(ctx context.Context, workerBin, launcher, repo string, n int, models []string, logs io.Writer) (*Plan, error) {
	abs, err := filepath.Abs(repo)
	if err != nil {
		return nil, err
	}
	base, err := FreePortRange(3 * n)
	if err != nil {
		return nil, err
	}
	args := []string{"mps", "run", "-sharing", "timesliced", "-gpus", "0", "-per-gpu", strconv.Itoa(n), "-base-port", strconv.Itoa(base), "--", launcher}
	args = append(args, Args(abs, "{grpc_port}", "{http_port}", "{metrics_port}")...)
	sup := exec.CommandContext(ctx, workerBin, args...)
	sup.Stdout, sup.Stderr = logs, logs
	sup.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	sup.Cancel = func() error { return sup.Process.Signal(syscall.SIGTERM) }
	if err := sup.Start(); err != nil {
		return nil, fmt.Errorf("start worker mps run (run `make build`): %w", err)
	}
	p := &Plan{sup: sup, done: make(chan struct{})}
	go func() { _ = sup.Wait(); close(p.done) }()
	for i := range n {
		p.Addrs = append(p.Addrs, "127.0.0.1:"+strconv.Itoa(base+3*i))
	}
	for _, a := range p.Addrs {
		if err := WaitReady(ctx, a, models, 120*time.Second, p.done); err != nil {
			p.Stop()
			return nil, err
		}
	}
	return p, nil
}

// Pid is the supervisor's process id (the partitions are its children).
func (p *Plan) Pid() int { return p.sup.Process.Pid }

// Stop ends the partitions (SIGTERM to the supervisor) and waits for them.
func (p *Plan) Stop() {
	_ = p.sup.Process.Signal(syscall.SIGTERM)
	<-p.done
}
