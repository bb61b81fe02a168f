package conformance

import (
	"context"
	"os"
	"time"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

// Real starts real Triton Inference Server processes (the pinned build)
// serving model.py's echo engine. Dir is where their model repositories
// go.
type Real struct{ Dir string }

// Name is "real".
func (Real) Name() string { return "real" }

// ModelConfig returns the Triton model configuration of m: its Spec on one
// CPU instance of model.py's echo engine, with m's delays.
func ModelConfig(m Model) modelspec.Config {
	s := m.Spec()
	s.Kind = modelspec.KindCPU
	return s.WithParameters(map[string]string{"engine": "echo"}).WithParameters(tritonproc.EchoDelays(m.BatchDelay, m.RowDelay))
}

// Start writes a repository and starts a server on free ports.
func (r Real) Start(m Model) (Server, error) {
	repo, err := os.MkdirTemp(r.Dir, "repo-")
	if err != nil {
		return nil, err
	}
	if err := tritonproc.WriteRepo(repo, map[string]modelspec.Config{"asr": ModelConfig(m)}); err != nil {
		return nil, err
	}
	s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo, ReadyTimeout: 90 * time.Second})
	if err != nil {
		return nil, err
	}
	return &realServer{s: s}, nil
}

type realServer struct{ s *tritonproc.Server }

func (r *realServer) Addr() string { return r.s.Addr }
func (r *realServer) Kill()        { r.s.Kill() }
func (r *realServer) Restart() error {
	return r.s.Restart(context.Background())
}
