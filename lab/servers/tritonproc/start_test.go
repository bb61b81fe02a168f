package tritonproc

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/modelspec"
)

// A port taken by a process that does not reserve it (as go test's other
// packages' servers might) makes the server exit before it is ready:
// Start says what it printed and starts it again on fresh ports.
func TestStartMovesOffATakenPort(t *testing.T) {
	Require(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	picks := 0
	pickPort = func() (int, error) {
		if picks++; picks == 1 {
			return takenPort, nil // the first server's gRPC port
		}
		return FreePort()
	}
	defer func() { pickPort = FreePort }()
	repo := filepath.Join(t.TempDir(), "repo")
	if err := WriteRepo(repo, map[string]modelspec.Config{"asr": Model("echo")}); err != nil {
		t.Fatal(err)
	}
	// One attempt: the error is the server's own.
	_, err = startOnce(context.Background(), Options{Repo: repo})
	var exited *ExitedError
	if !errors.As(err, &exited) || exited.ModelFailed() || !strings.Contains(err.Error(), "its last lines:") {
		t.Fatalf("on a taken port: %v", err)
	}
	picks = 0
	s, err := Start(context.Background(), Options{Repo: repo})
	if err != nil {
		t.Fatalf("Start did not move off the taken port: %v", err)
	}
	defer s.Kill()
	if strings.HasSuffix(s.Addr, ":"+strconv.Itoa(takenPort)) || picks < 6 {
		t.Fatalf("server at %s after %d ports picked", s.Addr, picks)
	}
}
