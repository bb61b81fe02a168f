package main

import (
	"flag"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
)

var updateDocs = flag.Bool("update-docs", false, "rewrite docs/configuration.md from the flags (make docs)")

const referencePath = "../../docs/configuration.md"

// reference is docs/configuration.md as the flags make it.
func reference(t *testing.T) string {
	t.Helper()
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	layout := cfg.registerFlags(fs)
	return "# Worker configuration\n\n" +
		"Every flag of `worker` is also read from the environment variable beside it " +
		"(the command line wins); compose files and Terraform's `worker_environment` use those names. " +
		"`worker -help` prints the same flags with their one-line help. " +
		"Generated from the flags by `make docs`; `make test` fails when it is out of date.\n" +
		flagenv.Reference(fs, EnvPrefix, layout)
}

// The configuration reference is the flags' own: a flag added, renamed or
// redescribed without it fails here. It replaces a README table written by
// hand, which had drifted (a default that was no longer true).
func TestConfigurationReferenceIsCurrent(t *testing.T) {
	golden.Check(t, referencePath, []byte(reference(t)), *updateDocs, "make docs")
}

// Every flag belongs to a section, and -help gives each one line: the
// rationale is the reference's.
func TestEveryFlagInASectionWithOneLineHelp(t *testing.T) {
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	layout := cfg.registerFlags(fs)
	ref := flagenv.Reference(fs, EnvPrefix, layout)
	n := 0
	fs.VisitAll(func(f *flag.Flag) {
		n++
		if !strings.Contains(ref, "| `-"+f.Name+"` |") {
			t.Errorf("-%s is in no section", f.Name)
		}
		if line, _ := flagenv.Help(f.Usage); len(line) > 110 {
			t.Errorf("-%s: help of %d characters; keep it to a line and move the rationale after a newline:\n%s", f.Name, len(line), line)
		}
	})
	if n < 60 {
		t.Errorf("only %d flags", n)
	}
}
