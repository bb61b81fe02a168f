package modroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestFind(t *testing.T) {
	root, err := Find()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Errorf("%s holds no go.mod: %v", root, err)
	}
	if wd := mustWd(t); filepath.Join(root, "lab", "kit", "modroot") != wd {
		t.Errorf("root %s is not lab/kit/modroot's module root (%s)", root, wd)
	}
	t.Chdir(t.TempDir())
	if _, err := Find(); err == nil {
		t.Error("found a module root above a temporary folder")
	}
}

func mustWd(t *testing.T) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}
