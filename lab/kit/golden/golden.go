// Package golden compares what code generates with a file committed beside
// it: golden test outputs and generated references alike.
package golden

import (
	"os"
	"strings"
	"testing"
)

// Check fails t unless the file at path holds exactly want; with update it
// writes want there first. The failure names the first line that differs
// and how to regenerate the file (fix: "go test -update", "make docs").
func Check(t testing.TB, path string, want []byte, update bool, fix string) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (%s writes it)", err, fix)
	}
	if string(got) == string(want) {
		return
	}
	gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		var g, w string
		if i < len(gl) {
			g = gl[i]
		}
		if i < len(wl) {
			w = wl[i]
		}
		if g != w {
			t.Errorf("%s is out of date (run %s); line %d:\n have %s\n want %s", path, fix, i+1, g, w)
			return
		}
	}
}
