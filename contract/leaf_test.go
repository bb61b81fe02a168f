package contract_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The contract is a leaf: the standard library only. And the enqueue
// command, which needs only the contract, links none of the worker's
// gRPC, Triton or audio code.
func TestContractIsALeaf(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	deps := func(pkg string) []string {
		out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list %s: %v", pkg, err)
		}
		return strings.Fields(string(out))
	}
	// The job contract, on the standard library alone; and the model
	// contract (modelspec), which the worker, the client, the fake and the
	// lab all import, on the standard library and protobuf's runtime (its
	// configpb: Triton's model configuration types).
	if d := deps("github.com/fleetscribe/fleetscribe/contract"); len(d) != 1 {
		t.Errorf("contract imports more than the standard library: %v", d)
	}
	for _, d := range deps("github.com/fleetscribe/fleetscribe/modelspec") {
		if !strings.HasPrefix(d, "google.golang.org/protobuf/") && !strings.HasPrefix(d, "github.com/fleetscribe/fleetscribe/modelspec") {
			t.Errorf("modelspec imports %s: more than the standard library and protobuf's runtime", d)
		}
	}
	for _, dep := range deps("github.com/fleetscribe/fleetscribe/cmd/enqueue") {
		for _, banned := range []string{"google.golang.org/grpc", "fleetscribe/triton", "fleetscribe/audio", "fleetscribe/worker"} {
			if strings.Contains(dep, banned) {
				t.Errorf("cmd/enqueue links %s", dep)
			}
		}
	}
}
