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
	if filepath.Base(filepath.Dir(filepath.Dir(mustWd(t)))) != filepath.Base(root) {
		t.Errorf("root %s is not two folders above %s", root, mustWd(t))
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
