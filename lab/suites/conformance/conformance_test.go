package conformance_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/lab/suites/conformance"
)

type cell struct {
	ok      bool
	outcome conformance.Outcome
	err     error
}

// TestConformance runs every scenario against real Triton and the fake,
// checks that the fake answers with the codes real Triton answers, and
// prints the table and the RESULT line.
func TestConformance(t *testing.T) {
	targets := []conformance.Target{conformance.Fake{}}
	realOK := true
	if _, err := tritonproc.Launcher(); err != nil {
		if os.Getenv(tritonproc.RequireEnv) == "1" {
			t.Fatal(err)
		}
		t.Logf("real Triton skipped: %v", err)
		realOK = false
	} else {
		targets = append([]conformance.Target{conformance.Real{Dir: t.TempDir()}}, targets...)
	}
	results := map[string]map[string]cell{}
	var mu sync.Mutex
	for _, sc := range conformance.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			for _, tg := range targets {
				t.Run(tg.Name(), func(t *testing.T) {
					c := runOne(t, tg, sc)
					mu.Lock()
					if results[sc.Name] == nil {
						results[sc.Name] = map[string]cell{}
					}
					results[sc.Name][tg.Name()] = c
					mu.Unlock()
					if c.err != nil {
						t.Error(c.err)
					}
				})
			}
			if r, f := results[sc.Name]["real"], results[sc.Name]["fake"]; realOK && r.ok && f.ok && !slices.Equal(r.outcome.Codes, f.outcome.Codes) {
				t.Errorf("codes differ: real Triton %v, fake %v", r.outcome.Codes, f.outcome.Codes)
				f.ok = false
				results[sc.Name]["fake"] = f
			}
		})
	}
	report(t, results, realOK)
}

func runOne(t *testing.T, tg conformance.Target, sc conformance.Scenario) cell {
	n := max(sc.Servers, 1)
	var servers []conformance.Server
	for range n {
		s, err := tg.Start(sc.Model)
		if err != nil {
			return cell{err: fmt.Errorf("start: %w", err)}
		}
		t.Cleanup(s.Kill)
		servers = append(servers, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := sc.Run(ctx, servers)
	return cell{ok: err == nil, outcome: out, err: err}
}

func report(t *testing.T, results map[string]map[string]cell, realOK bool) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\treal Triton\tfake (tritontest)\tcodes\tmeasured (real)")
	var realPass, fakePass, n int
	for _, sc := range conformance.Scenarios() {
		n++
		r, f := results[sc.Name]["real"], results[sc.Name]["fake"]
		mark := func(c cell, ran bool) string {
			switch {
			case !ran:
				return "not run"
			case c.ok:
				return "pass"
			}
			return "FAIL"
		}
		if r.ok {
			realPass++
		}
		if f.ok {
			fakePass++
		}
		detail := r.outcome.Detail
		if !realOK {
			detail = f.outcome.Detail
		}
		codes := codeList(r.outcome.Codes)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", sc.Name, mark(r, realOK), mark(f, true), codes, detail)
	}
	_ = tw.Flush()
	version := tritonproc.Version
	if !realOK {
		version = "none"
	}
	fmt.Print(b.String())
	fmt.Printf("RESULT scenarios=%d real_pass=%d fake_pass=%d triton_version=%s\n", n, realPass, fakePass, version)
}

// codeList writes codes compactly: "InvalidArgument×7, NotFound".
func codeList(cs []codes.Code) string {
	if len(cs) == 0 {
		return "-"
	}
	var parts []string
	for i := 0; i < len(cs); {
		j := i
		for j < len(cs) && cs[j] == cs[i] {
			j++
		}
		p := cs[i].String()
		if j-i > 1 {
			p += fmt.Sprintf("×%d", j-i)
		}
		parts = append(parts, p)
		i = j
	}
	return strings.Join(parts, ", ")
}
