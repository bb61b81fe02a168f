package lab

import (
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/fleetscribe/fleetscribe"

// goList runs go list from the module's root with a template of one line a
// package.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	cmd := exec.CommandContext(t.Context(), "go", append([]string{"list"}, args...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Split(strings.TrimSpace(string(out)), "\n")
}

// No shipped package (one outside lab/) depends on the lab, directly or
// through another package; its tests may.
func TestNothingShippedImportsTheLab(t *testing.T) {
	checked := 0
	for _, line := range goList(t, "-f", `{{.ImportPath}} {{join .Deps " "}}`, "./...") {
		pkg, deps, _ := strings.Cut(line, " ")
		if inLab(pkg) {
			continue
		}
		checked++
		for dep := range strings.FieldsSeq(deps) {
			if inLab(dep) {
				t.Errorf("%s depends on %s: the product must not import the lab (move the code it needs out of lab/, or the importer into it)", pkg, dep)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("only %d packages outside lab/: the listing is not the module's", checked)
	}
}

// The binaries that ship, and the lab's own (the demo, chaos), do not
// link the testing package.
func TestBinariesDoNotLinkTesting(t *testing.T) {
	for _, bin := range []string{"./cmd/worker", "./cmd/enqueue", "./lab/cmd/demo", "./lab/cmd/chaos"} {
		for _, dep := range goList(t, "-deps", bin) {
			if dep == "testing" {
				t.Errorf("%s links the testing package", bin)
			}
		}
	}
}

func inLab(pkg string) bool { return pkg == module+"/lab" || strings.HasPrefix(pkg, module+"/lab/") }
