// Command mutate runs a table of mutations against the checks that must
// catch them (make tf-mutations): for each, it changes one piece of one
// file, runs the named check, puts the file back, and says whether the
// check failed (caught) or passed (survived). It ends with
// RESULT mutations=N caught=N survived=N and exits 1 if any survived.
//
// The table is JSON lines: {"name", "file", "from", "to", "check"}, where
// from must occur exactly once in file and check is "go PKG REGEX" (go
// test -run REGEX PKG) or "tf DIR" (terraform test in DIR, initialised by
// make tf-validate).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

type mutation struct {
	Name, File, From, To, Check string
}

func main() {
	table := flag.String("table", "terraform/mutations.jsonl", "the mutations, JSON lines")
	only := flag.String("only", "", "run the mutations whose name contains this")
	verbose := flag.Bool("v", false, "print every check's output")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ms, err := load(*table)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		os.Exit(2)
	}
	// Each check passes on the tree as it is, or its failing says nothing.
	checked := map[string]bool{}
	for _, m := range ms {
		if (*only != "" && !strings.Contains(m.Name, *only)) || checked[m.Check] {
			continue
		}
		checked[m.Check] = true
		ok, out, err := check(ctx, m.Check)
		if err != nil || !ok {
			fmt.Fprintf(os.Stderr, "mutate: check %q fails without a mutation (%v):\n%s\n", m.Check, err, indent(out))
			os.Exit(2)
		}
	}
	caught, survived, ran := 0, 0, 0
	for _, m := range ms {
		if *only != "" && !strings.Contains(m.Name, *only) {
			continue
		}
		ran++
		start := time.Now()
		ok, out, err := run(ctx, m)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mutate:", m.Name+":", err)
			os.Exit(2)
		}
		verdict := "caught"
		if ok {
			verdict = "SURVIVED"
			survived++
		} else {
			caught++
		}
		fmt.Printf("%-8s %-60s %-48s %5.1fs\n", verdict, m.Name, m.Check, time.Since(start).Seconds())
		if ok || *verbose {
			fmt.Println(indent(out))
		}
	}
	fmt.Printf("RESULT mutations=%d caught=%d survived=%d\n", ran, caught, survived)
	if survived > 0 {
		os.Exit(1)
	}
}

func load(path string) ([]mutation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var ms []mutation
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<16), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var m mutation
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, n, err)
		}
		if m.Name == "" || m.File == "" || m.From == "" || m.Check == "" {
			return nil, fmt.Errorf("%s:%d: name, file, from and check are required", path, n)
		}
		ms = append(ms, m)
	}
	return ms, sc.Err()
}

// run applies m, runs its check and restores the file whatever happens; ok
// is whether the check passed on the mutated file.
func run(ctx context.Context, m mutation) (ok bool, out string, err error) {
	orig, err := os.ReadFile(m.File)
	if err != nil {
		return false, "", err
	}
	if n := bytes.Count(orig, []byte(m.From)); n != 1 {
		return false, "", fmt.Errorf("%q occurs %d times in %s, want once", m.From, n, m.File)
	}
	mutated := bytes.Replace(orig, []byte(m.From), []byte(m.To), 1)
	if err := os.WriteFile(m.File, mutated, 0o644); err != nil {
		return false, "", err
	}
	defer func() {
		if rerr := os.WriteFile(m.File, orig, 0o644); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return check(ctx, m.Check)
}

// check runs one check: ok is whether it passed.
func check(ctx context.Context, spec string) (ok bool, out string, err error) {
	var cmd *exec.Cmd
	switch f := strings.Fields(spec); {
	case len(f) == 3 && f[0] == "go":
		cmd = exec.CommandContext(ctx, "go", "test", "-count=1", "-run", f[2], f[1])
	case len(f) == 2 && f[0] == "tf":
		cmd = exec.CommandContext(ctx, "terraform", "-chdir="+f[1], "test", "-no-color")
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "TF_INPUT=0", "TF_CLI_CONFIG_FILE=/dev/null")
	default:
		return false, "", fmt.Errorf("check %q: want \"go PKG REGEX\" or \"tf DIR\"", spec)
	}
	b, cerr := cmd.CombinedOutput()
	if ctx.Err() != nil {
		return false, "", ctx.Err()
	}
	return cerr == nil, string(b), nil
}

func indent(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
