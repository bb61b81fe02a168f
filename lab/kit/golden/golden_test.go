package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ref.md")
	Check(t, path, []byte("a\nb\n"), true, "make docs")
	r := &recorder{TB: t}
	Check(r, path, []byte("a\nb\n"), false, "make docs")
	if len(r.errs) != 0 {
		t.Fatalf("equal file reported: %v", r.errs)
	}
	Check(r, path, []byte("a\nc\n"), false, "make docs")
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "out of date") {
		t.Fatalf("a changed line not reported: %v", r.errs)
	}
	if b, _ := os.ReadFile(path); string(b) != "a\nb\n" {
		t.Fatalf("checked without update, yet written: %q", b)
	}
}
