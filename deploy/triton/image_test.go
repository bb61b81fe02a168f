// Package tritonimage_test checks the GPU Triton image (deploy/triton/
// Dockerfile) where no Docker engine runs: its Dockerfile, and every other,
// lints clean, and its pinned packages are a whole, consistent set for the
// image's Python.
package tritonimage_test

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/lab/kit/modroot"
)

// tools returns the folder of hadolint and uv (scripts/pytools.sh), or
// skips t where they cannot be installed, unless FLEETSCRIBE_REQUIRE_PYTOOLS=1.
func tools(t *testing.T, root string) string {
	t.Helper()
	out, err := exec.Command(filepath.Join(root, "scripts", "pytools.sh")).Output()
	if err != nil {
		if os.Getenv("FLEETSCRIBE_REQUIRE_PYTOOLS") == "1" {
			t.Fatalf("scripts/pytools.sh: %v", err)
		}
		t.Skipf("scripts/pytools.sh: %v", err)
	}
	return strings.TrimSpace(string(out))
}

func TestDockerfilesLint(t *testing.T) {
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	bin := tools(t, root)
	files := []string{filepath.Join(root, "Dockerfile"), filepath.Join(root, "deploy", "triton", "Dockerfile")}
	cmd := exec.Command(filepath.Join(bin, "hadolint"), append([]string{"--config", filepath.Join(root, ".hadolint.yaml"), "--no-color"}, files...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("hadolint: %v\n%s", err, out)
	}
}

var pinRE = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*)==([^ \\]+)`)

// pins reads name==version lines (and counts those without a hash).
func pins(t *testing.T, path string) (map[string]string, []string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	var unhashed []string
	var last string
	hashed := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if m := pinRE.FindStringSubmatch(line); m != nil {
			last = m[1]
			out[m[1]] = m[2]
		}
		if strings.Contains(line, "--hash=sha256:") && last != "" {
			hashed[last] = true
		}
	}
	for name := range out {
		if !hashed[name] {
			unhashed = append(unhashed, name)
		}
	}
	return out, unhashed
}

// The image's pinned set, given to the resolver as its own input for the
// image's Python (3.10, manylinux_2_28 x86_64), comes back unchanged: it
// is whole (every dependency of every package is in it) and consistent,
// and every package has a hash. Needs the package index.
func TestGPURequirementsResolve(t *testing.T) {
	root, err := modroot.Find()
	if err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(root, "deploy", "triton", "gpu-requirements.txt")
	want, unhashed := pins(t, lock)
	if len(unhashed) > 0 {
		t.Errorf("pinned without a hash: %v", unhashed)
	}
	for name, v := range map[string]string{"torch": "2.11.0", "nemo-toolkit": "2.7.3"} {
		if want[name] != v {
			t.Errorf("%s %q, want %s (what the GPU benchmark measured)", name, want[name], v)
		}
	}
	if !strings.HasPrefix(want["numpy"], "1.") {
		t.Errorf("numpy %q: Triton 2.51's Python backend needs numpy 1.x", want["numpy"])
	}
	bin := tools(t, root)
	out := filepath.Join(t.TempDir(), "resolved.txt")
	cmd := exec.Command(filepath.Join(bin, "uv"), "pip", "compile", lock, "--python-version", "3.10", "--python-platform", "x86_64-manylinux_2_28",
		"--no-header", "--quiet", "-o", out)
	if b, err := cmd.CombinedOutput(); err != nil {
		if os.Getenv("FLEETSCRIBE_REQUIRE_PYTOOLS") != "1" && strings.Contains(string(b), "Failed to fetch") {
			t.Skipf("no package index: %s", b)
		}
		t.Fatalf("uv pip compile: %v\n%s", err, b)
	}
	got, _ := pins(t, out)
	var diff []string
	for name, v := range want {
		if got[name] != v {
			diff = append(diff, name+" "+v+" -> "+got[name])
		}
	}
	for name, v := range got {
		if _, ok := want[name]; !ok {
			diff = append(diff, "missing "+name+"=="+v)
		}
	}
	slices.Sort(diff)
	if len(diff) > 0 {
		t.Errorf("the pinned set is not whole and consistent for Python 3.10 (run scripts/triton-image-lock.sh):\n%s", strings.Join(diff, "\n"))
	}
}
