package terraform

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2"

	"github.com/fleetscribe/fleetscribe/worker"
)

// A small matcher of CloudWatch Logs JSON filter patterns, enough for the
// fleet's: { cond }, where cond is $.field = "value" joined by && and ||
// with parentheses. A field missing from the event does not match.
type filterPattern struct {
	toks []string
	pos  int
}

func tokenizePattern(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		switch c := s[i]; {
		case c == ' ':
			i++
		case strings.HasPrefix(s[i:], "&&"), strings.HasPrefix(s[i:], "||"):
			out = append(out, s[i:i+2])
			i += 2
		case strings.ContainsRune("{}()=", rune(c)):
			out = append(out, string(c))
			i++
		case c == '"':
			j := strings.IndexByte(s[i+1:], '"')
			out = append(out, s[i:i+j+2])
			i += j + 2
		default:
			j := i
			for j < len(s) && !strings.ContainsRune(" {}()=&|", rune(s[j])) {
				j++
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out
}

func matchPattern(t *testing.T, pattern string, event map[string]any) bool {
	t.Helper()
	p := &filterPattern{toks: tokenizePattern(pattern)}
	p.expect(t, "{")
	ok := p.or(t, event)
	p.expect(t, "}")
	if p.pos != len(p.toks) {
		t.Fatalf("pattern %q: trailing %v", pattern, p.toks[p.pos:])
	}
	return ok
}

func (p *filterPattern) next() string {
	if p.pos >= len(p.toks) {
		return ""
	}
	p.pos++
	return p.toks[p.pos-1]
}

func (p *filterPattern) expect(t *testing.T, tok string) {
	t.Helper()
	if got := p.next(); got != tok {
		t.Fatalf("pattern %v: %q where %q belongs", p.toks, got, tok)
	}
}

func (p *filterPattern) or(t *testing.T, ev map[string]any) bool {
	v := p.and(t, ev)
	for p.pos < len(p.toks) && p.toks[p.pos] == "||" {
		p.pos++
		v = p.and(t, ev) || v
	}
	return v
}

func (p *filterPattern) and(t *testing.T, ev map[string]any) bool {
	v := p.term(t, ev)
	for p.pos < len(p.toks) && p.toks[p.pos] == "&&" {
		p.pos++
		v = p.term(t, ev) && v
	}
	return v
}

func (p *filterPattern) term(t *testing.T, ev map[string]any) bool {
	if p.toks[p.pos] == "(" {
		p.pos++
		v := p.or(t, ev)
		p.expect(t, ")")
		return v
	}
	field := p.next()
	if !strings.HasPrefix(field, "$.") {
		t.Fatalf("pattern %v: %q is not a $.field", p.toks, field)
	}
	p.expect(t, "=")
	want := p.next()
	if len(want) < 2 || want[0] != '"' {
		t.Fatalf("pattern %v: %q is not a quoted value", p.toks, want)
	}
	got, ok := ev[strings.TrimPrefix(field, "$.")].(string)
	return ok && got == want[1:len(want)-1]
}

// The fleet's job metrics read the line the worker ends each job with
// (cmd/worker's test sees it carry message, outcome and group): every job
// counts as done, and failed and retried ones as failed, by the worker's
// own outcome names; other lines count as nothing.
func TestJobMetricFiltersMatchTheWorkersLine(t *testing.T) {
	m := load(t, "modules/fleet")
	v, diags := m.local(t, "job_metrics").Value(&hcl.EvalContext{})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	patterns := map[string]string{}
	for _, e := range v.AsValueMap() {
		patterns[e.GetAttr("metric").AsString()] = e.GetAttr("pattern").AsString()
	}
	line := func(msg, outcome string) map[string]any {
		return map[string]any{"level": "info", "component": "worker", "group": "fs-fleet-canary", "message": msg, "outcome": outcome}
	}
	for _, c := range []struct {
		event        map[string]any
		done, failed bool
	}{
		{line("job done", worker.OutcomeOK), true, false},
		{line("job done", worker.OutcomeDuplicate), true, false},
		{line("job done", worker.OutcomeFailed), true, true},
		{line("job done", worker.OutcomeRetry), true, true},
		{line("job done", worker.OutcomeReleased), true, false},
		{line("job failed; error record written", ""), false, false},
		{map[string]any{"message": "job done"}, true, false},
	} {
		b, _ := json.Marshal(c.event)
		if got := matchPattern(t, patterns["JobsDone"], c.event); got != c.done {
			t.Errorf("JobsDone %q on %s: %v, want %v", patterns["JobsDone"], b, got, c.done)
		}
		if got := matchPattern(t, patterns["JobsFailed"], c.event); got != c.failed {
			t.Errorf("JobsFailed %q on %s: %v, want %v", patterns["JobsFailed"], b, got, c.failed)
		}
	}
}
