// Package modroot finds the module's root folder (the one holding go.mod),
// where the project's tools, scripts and model repositories lie, from a
// test's or command's working directory inside the module.
package modroot

import (
	"errors"
	"os"
	"path/filepath"
)

// Find returns the nearest folder at or above the working directory that
// holds go.mod.
func Find() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("module root (go.mod) not found above the working directory")
		}
		dir = parent
	}
}
