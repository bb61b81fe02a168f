package lab

import (
	"os/exec"
	"slices"
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

// rooms are the lab's rooms in order: each may import only those before it
// (bench and cmd: any room but cmd).
var rooms = []string{"kit", "servers", "suites", "bench", "cmd"}

// room is the lab room of pkg ("" outside the lab or in none).
func room(pkg string) string {
	rest, ok := strings.CutPrefix(pkg, module+"/lab/")
	if !ok {
		return ""
	}
	r, _, _ := strings.Cut(rest, "/")
	return r
}

// allowed reports whether a package of room from (its code or its tests)
// may import one of room to. Outside the lab (from ""), tests only, and
// only kit and servers.
func allowed(from, to string) bool {
	switch {
	case to == "":
		return true
	case from == "":
		return to == "kit" || to == "servers"
	case from == to && from != "cmd":
		return true
	case from == "bench" || from == "cmd":
		return to != "cmd"
	}
	return slices.Index(rooms, to) >= 0 && slices.Index(rooms, to) < slices.Index(rooms, from)
}

// imports lists each package's lab imports, its tests' included, as
// "pkg room imported-package" lines.
func labImports(t *testing.T) [][3]string {
	var out [][3]string
	for _, line := range goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "./...") {
		pkg, deps, _ := strings.Cut(line, " ")
		for dep := range strings.FieldsSeq(deps) {
			if inLab(dep) && dep != pkg {
				out = append(out, [3]string{pkg, room(pkg), dep})
			}
		}
	}
	return out
}

// Every lab package sits in a room, and every import between packages
// (tests included) follows the rooms' order; a product package's tests
// import only the kit and the servers.
func TestTheLabIsSortedByKind(t *testing.T) {
	for _, pkg := range goList(t, "./lab/...") {
		if pkg != module+"/lab" && !slices.Contains(rooms, room(pkg)) {
			t.Errorf("%s is in no room of the lab (%s)", pkg, strings.Join(rooms, ", "))
		}
	}
	checked := 0
	for _, imp := range labImports(t) {
		checked++
		if from, to := imp[1], room(imp[2]); !allowed(from, to) {
			where := "the lab's " + from
			if from == "" {
				where = "a product package's tests"
			}
			t.Errorf("%s imports %s: %s may not import the lab's %s", imp[0], imp[2], where, to)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d imports of the lab: the listing is not the module's", checked)
	}
}

func TestRoomRules(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"", "kit", true}, {"", "servers", true}, {"", "suites", false}, {"", "bench", false}, {"", "cmd", false},
		{"kit", "kit", true}, {"kit", "servers", false}, {"servers", "kit", true}, {"servers", "suites", false},
		{"suites", "servers", true}, {"suites", "bench", false}, {"bench", "suites", true}, {"bench", "cmd", false},
		{"cmd", "bench", true}, {"cmd", "cmd", false},
	} {
		if got := allowed(c.from, c.to); got != c.ok {
			t.Errorf("allowed(%q, %q) = %v, want %v", c.from, c.to, got, c.ok)
		}
	}
}
