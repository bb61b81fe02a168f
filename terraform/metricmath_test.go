package terraform

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
	"github.com/zclconf/go-cty/cty/function/stdlib"
)

// A small evaluator of CloudWatch metric math, enough for the fleet's
// expressions: numbers, metric ids, + - * /, comparisons, AND, OR,
// IF(cond, a, b), FILL(m, value|REPEAT) and DIFF(m). A series is one value per
// period; NaN is a missing data point. Arithmetic and comparisons work
// point by point, and a missing operand makes the point missing, as
// CloudWatch drops it.
type series []float64

type mathExpr interface {
	eval(env map[string]series, n int) series
}

type num float64
type ref string
type binop struct {
	op   string
	l, r mathExpr
}
type call struct {
	fn   string
	args []mathExpr
}

func (v num) eval(_ map[string]series, n int) series {
	out := make(series, n)
	for i := range out {
		out[i] = float64(v)
	}
	return out
}

func (r ref) eval(env map[string]series, n int) series {
	s, ok := env[string(r)]
	if !ok {
		panic("metric " + string(r) + " has no data")
	}
	return s
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (b binop) eval(env map[string]series, n int) series {
	l, r := b.l.eval(env, n), b.r.eval(env, n)
	out := make(series, n)
	for i := range out {
		x, y := l[i], r[i]
		if math.IsNaN(x) || math.IsNaN(y) {
			out[i] = math.NaN()
			continue
		}
		switch b.op {
		case "+":
			out[i] = x + y
		case "-":
			out[i] = x - y
		case "*":
			out[i] = x * y
		case "/":
			out[i] = x / y
		case "<":
			out[i] = b2f(x < y)
		case ">":
			out[i] = b2f(x > y)
		case "<=":
			out[i] = b2f(x <= y)
		case ">=":
			out[i] = b2f(x >= y)
		case "==":
			out[i] = b2f(x == y)
		case "AND":
			out[i] = b2f(x != 0 && y != 0)
		case "OR":
			out[i] = b2f(x != 0 || y != 0)
		default:
			panic("operator " + b.op)
		}
	}
	return out
}

func (c call) eval(env map[string]series, n int) series {
	switch c.fn {
	case "IF":
		cond, a, b := c.args[0].eval(env, n), c.args[1].eval(env, n), c.args[2].eval(env, n)
		out := make(series, n)
		for i := range out {
			switch {
			case math.IsNaN(cond[i]):
				out[i] = math.NaN()
			case cond[i] != 0:
				out[i] = a[i]
			default:
				out[i] = b[i]
			}
		}
		return out
	case "DIFF":
		// Each value less the one before it; the first has none.
		s := c.args[0].eval(env, n)
		out := make(series, n)
		for i := range out {
			out[i] = math.NaN()
			if i > 0 && !math.IsNaN(s[i]) && !math.IsNaN(s[i-1]) {
				out[i] = s[i] - s[i-1]
			}
		}
		return out
	case "FILL":
		s := c.args[0].eval(env, n)
		out := make(series, n)
		if r, ok := c.args[1].(ref); ok && r == "REPEAT" {
			last := math.NaN()
			for i, v := range s {
				if !math.IsNaN(v) {
					last = v
				}
				out[i] = last
			}
			return out
		}
		fill := c.args[1].eval(env, n)
		for i, v := range s {
			out[i] = v
			if math.IsNaN(v) {
				out[i] = fill[i]
			}
		}
		return out
	}
	panic("function " + c.fn)
}

type mathParser struct {
	toks []string
	pos  int
}

func tokenize(s string) []string {
	var out []string
	for i := 0; i < len(s); {
		c := rune(s[i])
		switch {
		case unicode.IsSpace(c):
			i++
		case strings.ContainsRune("()+-*/,", c):
			out = append(out, string(c))
			i++
		case strings.ContainsRune("<>=", c):
			j := i + 1
			if j < len(s) && s[j] == '=' {
				j++
			}
			out = append(out, s[i:j])
			i = j
		default:
			j := i
			for j < len(s) && (unicode.IsLetter(rune(s[j])) || unicode.IsDigit(rune(s[j])) || s[j] == '_' || s[j] == '.') {
				j++
			}
			if j == i {
				panic(fmt.Sprintf("unexpected %q in %q", s[i], s))
			}
			out = append(out, s[i:j])
			i = j
		}
	}
	return out
}

// parseMath parses a metric math expression.
func parseMath(s string) mathExpr {
	p := &mathParser{toks: tokenize(s)}
	e := p.expr(0)
	if p.pos != len(p.toks) {
		panic(fmt.Sprintf("trailing %v in %q", p.toks[p.pos:], s))
	}
	return e
}

var precedence = map[string]int{"OR": 1, "AND": 2, "<": 3, ">": 3, "<=": 3, ">=": 3, "==": 3, "+": 4, "-": 4, "*": 5, "/": 5}

func (p *mathParser) expr(minPrec int) mathExpr {
	l := p.primary()
	for p.pos < len(p.toks) {
		op := p.toks[p.pos]
		prec, ok := precedence[op]
		if !ok || prec < minPrec {
			break
		}
		p.pos++
		l = binop{op, l, p.expr(prec + 1)}
	}
	return l
}

func (p *mathParser) primary() mathExpr {
	t := p.toks[p.pos]
	p.pos++
	if t == "(" {
		e := p.expr(0)
		p.expect(")")
		return e
	}
	if f, err := strconv.ParseFloat(t, 64); err == nil {
		return num(f)
	}
	if p.pos < len(p.toks) && p.toks[p.pos] == "(" {
		p.pos++
		var args []mathExpr
		for {
			args = append(args, p.expr(0))
			if p.toks[p.pos] == ")" {
				p.pos++
				return call{t, args}
			}
			p.expect(",")
		}
	}
	return ref(t)
}

func (p *mathParser) expect(tok string) {
	if p.toks[p.pos] != tok {
		panic(fmt.Sprintf("want %q at %d of %v", tok, p.pos, p.toks))
	}
	p.pos++
}

func evalMath(t *testing.T, expr string, env map[string]series) series {
	t.Helper()
	n := 0
	for _, s := range env {
		n = max(n, len(s))
	}
	var out series
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("%s: %v", expr, r)
			}
		}()
		out = parseMath(expr).eval(env, n)
	}()
	return out
}

func one(v float64) series { return series{v} }

var missing = math.NaN()

// The backlog per GPU the target tracking policy holds, evaluated for the
// situations it must get right: it divides by GPUs, counts a weighted bulk
// queue at its weight, and does not count messages parked in retry
// backoff (in flight beyond what the desired GPUs hold) as work, and
// counts capacity that is still launching.
func TestBacklogMetricMath(t *testing.T) {
	m := load(t, "modules/fleet")
	for _, c := range []struct {
		name    string
		vars    fleetVars
		metrics map[string]series
		want    float64
	}{
		{"two 1-GPU instances", fleetVars{queues: []string{"live", "bulk"}},
			map[string]series{"visible0": one(100), "inflight0": one(20), "visible1": one(0), "inflight1": one(0), "desired": one(2)}, 60},
		{"retry storm: 5,000 parked messages, 2 GPUs of 16 jobs", fleetVars{queues: []string{"live"}},
			map[string]series{"visible0": one(0), "inflight0": one(5000), "desired": one(2)}, 16},
		{"bulk backfill at a tenth", fleetVars{queues: []string{"live", "bulk"}, weights: map[string]float64{"bulk": 0.1}},
			map[string]series{"visible0": one(0), "inflight0": one(0), "visible1": one(6000), "inflight1": one(0), "desired": one(2)}, 300},
		{"one 8-GPU instance, weighted", fleetVars{queues: []string{"live"}, types: []string{"g6e.48xlarge"}},
			map[string]series{"visible0": one(800), "inflight0": one(64), "desired": one(8)}, 108},
		// With a warm pool (no mixed instances policy) the group counts
		// instances, converted to GPUs.
		{"one 8-GPU instance with a warm pool", fleetVars{queues: []string{"live"}, types: []string{"g6e.48xlarge"}, warmPool: true},
			map[string]series{"visible0": one(800), "inflight0": one(64), "desired": one(1)}, 108},
		{"weighted spot group counts GPUs", fleetVars{queues: []string{"live"}, spot: true, types: []string{"g6e.48xlarge", "g6e.xlarge"}},
			map[string]series{"visible0": one(900), "inflight0": one(0), "desired": one(9)}, 100},
		// Launching capacity counts: four instances desired, one in service,
		// 400 visible is 100 a GPU (at the target of 100: nothing added
		// while the three boot), not 400.
		{"launching instances count", fleetVars{queues: []string{"live"}},
			map[string]series{"visible0": one(400), "inflight0": one(0), "desired": one(4), "in_service": one(1)}, 100},
		// A floor-capped bulk queue: outside the window (the group's minimum
		// at min_gpus, 1) a 100,000-message backfill counts at most the
		// floor's worth (1 GPU x 100), so 2 GPUs see 50 each and nothing
		// is added; inside it (minimum raised to 8) it counts in full.
		{"daytime backfill capped by the floor", fleetVars{queues: []string{"live", "bulk"}, capped: []string{"bulk"}, minGPUs: 1},
			map[string]series{"visible0": one(0), "inflight0": one(0), "visible1": one(100000), "inflight1": one(0), "desired": one(2), "minsize": one(1)}, 50},
		{"overnight backfill in full", fleetVars{queues: []string{"live", "bulk"}, capped: []string{"bulk"}, minGPUs: 1, weights: map[string]float64{"bulk": 0.1}},
			map[string]series{"visible0": one(0), "inflight0": one(0), "visible1": one(100000), "inflight1": one(0), "desired": one(8), "minsize": one(8)}, 1250},
		{"live traffic is never capped", fleetVars{queues: []string{"live", "bulk"}, capped: []string{"bulk"}},
			map[string]series{"visible0": one(900), "inflight0": one(0), "visible1": one(5000), "inflight1": one(0), "desired": one(3), "minsize": one(0)}, 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			expr := fleetLocals(t, m, c.vars).Variables["local"].GetAttr("per_gpu_expr").AsString()
			if got := evalMath(t, expr, c.metrics)[0]; math.Abs(got-c.want) > 1e-9 {
				t.Errorf("%s = %g, want %g", expr, got, c.want)
			}
		})
	}
}

// The scale-from-zero alarm's expression, evaluated minute by minute: it
// fires while messages wait and nothing is desired, and not when the
// latest desired capacity of a busy fleet is merely late.
func TestScaleFromZeroAlarmMath(t *testing.T) {
	m := load(t, "modules/fleet")
	ctx := fleetLocals(t, m, fleetVars{queues: []string{"live", "bulk"}})
	alarm := m.one(t, "resource", "aws_cloudwatch_metric_alarm", "scale_from_zero")
	var expr string
	for _, q := range nested(alarm, "metric_query") {
		if e := attr(q, "expression"); e != nil {
			v, diags := e.Value(ctx)
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			expr = v.AsString()
		}
	}
	periods := literal(t, attr(alarm, "evaluation_periods"))
	for _, c := range []struct {
		name    string
		desired series
		fires   bool
	}{
		{"an empty group", series{0, 0, 0}, true},
		{"a group that never reported", series{missing, missing, missing}, true},
		{"a busy fleet whose latest point is late", series{3, 3, missing}, false},
		{"a busy fleet whose points are late for every evaluated period", series{3, 3, missing, missing, missing}, false},
		{"a busy fleet", series{3, 3, 3}, false},
		{"a fleet just scaled out from zero", series{0, 1, 1}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			visible0, visible1 := make(series, len(c.desired)), make(series, len(c.desired))
			for i := range visible0 {
				visible0[i] = 5
			}
			v := evalMath(t, expr, map[string]series{"visible0": visible0, "visible1": visible1, "desired": c.desired})
			// In ALARM when every one of the evaluated periods breaches
			// (datapoints_to_alarm equals evaluation_periods).
			n, _ := periods.AsBigFloat().Int64()
			fires := true
			for _, x := range v[len(v)-int(n):] {
				fires = fires && x >= 1
			}
			if fires != c.fires {
				t.Errorf("%s with desired %v: %v, alarm %v, want %v", expr, c.desired, v, fires, c.fires)
			}
		})
	}
	// A floor-capped bulk queue does not start the fleet from zero: its
	// backfill waits for the window, whose floor starts it.
	capped := fleetLocals(t, m, fleetVars{queues: []string{"live", "bulk"}, capped: []string{"bulk"}})
	var cexpr string
	for _, q := range nested(alarm, "metric_query") {
		if e := attr(q, "expression"); e != nil {
			v, diags := e.Value(capped)
			if diags.HasErrors() {
				t.Fatal(diags.Error())
			}
			cexpr = v.AsString()
		}
	}
	v := evalMath(t, cexpr, map[string]series{"visible0": {0, 0, 0}, "visible1": {5000, 5000, 5000}, "desired": {0, 0, 0}})
	if v[2] != 0 {
		t.Errorf("%s: a capped bulk backlog with nothing desired starts the fleet (%v)", cexpr, v)
	}
	v = evalMath(t, cexpr, map[string]series{"visible0": {5, 5, 5}, "visible1": {0, 0, 0}, "desired": {0, 0, 0}})
	if v[2] != 1 {
		t.Errorf("%s: live messages with nothing desired do not start the fleet (%v)", cexpr, v)
	}
}

// The launch-shortfall alarm: desired capacity above what is in service
// or launching.
func TestLaunchShortfallMath(t *testing.T) {
	expr := alarmExpression(t, "launch_shortfall")
	for _, c := range []struct {
		desired, inService, pending float64
		short                       bool
	}{
		{4, 4, 0, false},
		{4, 2, 2, false}, // launching
		{4, 2, 0, true},  // launches refused
		{0, 0, 0, false},
	} {
		v := evalMath(t, expr, map[string]series{"desired": one(c.desired), "in_service": one(c.inService), "pending": one(c.pending)})
		if (v[0] >= 1) != c.short {
			t.Errorf("%s: desired %g, in service %g, pending %g: %g", expr, c.desired, c.inService, c.pending, v[0])
		}
	}
}

// The never-in-service alarm: desired capacity above what is in service
// while none enters service, minute after minute for a boot's time and
// the shortfall's (every point breaching fires it; one minute where
// capacity entered service ends the run). A long, healthy scale-out ramp
// always has desired above in service, but a boot finishes within
// boot_timeout_seconds, so capacity enters service inside every window;
// an ABANDON loop, or boots that die before their start script, never do.
func TestNeverInServiceMath(t *testing.T) {
	expr := alarmExpression(t, "never_in_service")
	window := 2700/60 + 15 // the defaults: boot_timeout_seconds, launch_shortfall_minutes
	const minutes = 240
	boot := 40 // minutes from launch to service, within the boot timeout
	ramp := func(every int, until int) (desired, inService series) {
		// One more instance desired every `every` minutes until `until`;
		// each enters service boot minutes after its launch.
		desired, inService = make(series, minutes), make(series, minutes)
		for m := range minutes {
			for l := 0; l <= min(m, until); l += every {
				desired[m]++
				if m >= l+boot {
					inService[m]++
				}
			}
		}
		return desired, inService
	}
	flat := func(v float64) series {
		s := make(series, minutes)
		for i := range s {
			s[i] = v
		}
		return s
	}
	slowDesired, slowIn := ramp(30, minutes) // a slow ramp for 4 hours: desired above in service throughout
	fastDesired, fastIn := ramp(2, 100)      // 50 instances asked for over 100 minutes
	for _, c := range []struct {
		name               string
		desired, inService series
		fires              bool
	}{
		{"steady", flat(4), flat(4), false},
		{"a slow scale-out ramp", slowDesired, slowIn, false},
		{"a fast scale-out ramp", fastDesired, fastIn, false},
		{"an ABANDON loop (launching, abandoned, launching again)", flat(4), flat(2), true},
		{"draining past a scale-in", flat(2), flat(3), false},
		{"nothing asked", flat(0), flat(0), false},
	} {
		v := evalMath(t, expr, map[string]series{"desired": c.desired, "in_service": c.inService})
		if got := fires(v, window); got != c.fires {
			t.Errorf("%s: %s: fires %v over %d minutes, want %v", c.name, expr, got, minutes, c.fires)
		}
	}
}

// fires reports whether an alarm of n one-minute periods, every one of
// them breaching (>= 1; missing is not breaching), fires on v.
func fires(v series, n int) bool {
	run := 0
	for _, x := range v {
		if x >= 1 {
			run++
		} else {
			run = 0
		}
		if run >= n {
			return true
		}
	}
	return false
}

// alarmExpression is the metric math expression of the fleet module's
// alarm name (a literal: the alarms over the group's own metrics).
func alarmExpression(t *testing.T, name string) string {
	t.Helper()
	return alarmExpressionWith(t, name, nil)
}

// canaryVars are the canary's defaults and two dead-letter queues.
func canaryVars() map[string]cty.Value {
	return map[string]cty.Value{
		"canary":                  cty.ObjectVal(map[string]cty.Value{"version": cty.NumberIntVal(4), "instances": cty.NumberIntVal(1), "failure_margin": cty.NumberFloatVal(0.05), "min_jobs": cty.NumberIntVal(20)}),
		"dead_letter_queue_names": cty.ListVal([]cty.Value{cty.StringVal("fs-live-dlq"), cty.StringVal("fs-bulk-dlq")}),
	}
}

// alarmExpressionWith is alarmExpression for an expression built from the
// module's variables.
func alarmExpressionWith(t *testing.T, name string, vars map[string]cty.Value) string {
	t.Helper()
	alarm := load(t, "modules/fleet").one(t, "resource", "aws_cloudwatch_metric_alarm", name)
	ctx := &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(vars)},
		Functions: map[string]function.Function{"join": stdlib.JoinFunc},
	}
	for _, q := range nested(alarm, "metric_query") {
		if e := attr(q, "expression"); e != nil {
			v, diags := e.Value(ctx)
			if diags.HasErrors() {
				t.Fatalf("alarm %s: %s", name, diags)
			}
			return v.AsString()
		}
	}
	t.Fatalf("alarm %s has no expression", name)
	return ""
}

// The canary's job-failure alarm, over one 15-minute period: its failed
// share against the fleet's, which takes jobs from the same queues. Input
// that fails everywhere (a burst of corrupt uploads) fails as large a share
// of each and says nothing; a version that breaks work fails the canary's
// alone. NaN is a period without a data point (the log metric filter
// publishes none while nothing matches).
func TestCanaryJobFailuresMath(t *testing.T) {
	expr := alarmExpressionWith(t, "canary_job_failures", canaryVars())
	nan := math.NaN()
	for _, c := range []struct {
		name                       string
		cdone, cfail, fdone, ffail float64
		fires                      bool
	}{
		{"both healthy", 60, 1, 900, 12, false},
		{"a new version breaks half its jobs", 60, 30, 900, 12, true},
		{"it breaks every job it takes (the fleet failing none)", 40, 40, 900, nan, true},
		{"corrupt uploads fail 30% everywhere", 60, 18, 900, 270, false},
		{"too few jobs to say", 5, 5, 900, 10, false},
		{"an idle canary", nan, nan, 900, 10, false},
		{"the fleet at zero, the canary healthy", 60, 1, nan, nan, false},
		{"the fleet at zero, the canary failing", 60, 12, nan, nan, true},
		{"just under the margin", 100, 8, 1000, 40, false},
	} {
		v := evalMath(t, expr, map[string]series{"cdone": one(c.cdone), "cfail": one(c.cfail), "fdone": one(c.fdone), "ffail": one(c.ffail)})
		if got := v[0] >= 1; got != c.fires {
			t.Errorf("%s: %s = %g, want fires %v", c.name, expr, v[0], c.fires)
		}
	}
}

// The canary's dead-letter alarm, over 5-minute periods: a rise in any
// dead-letter queue fires it; a steady count, a queue emptied by a
// redrive, or SQS's metrics stopping on an idle queue (missing points,
// carried over) do not.
func TestCanaryDeadLettersMath(t *testing.T) {
	expr := alarmExpressionWith(t, "canary_dead_letters", canaryVars())
	nan := math.NaN()
	for _, c := range []struct {
		name   string
		d0, d1 series
		fires  bool
	}{
		{"steady", series{3, 3, 3, 3}, series{0, 0, 0, 0}, false},
		{"a message dead-lettered", series{3, 3, 4, 4}, series{0, 0, 0, 0}, true},
		{"on the other queue", series{3, 3, 3, 3}, series{0, 0, 0, 2}, true},
		{"redriven", series{3, 3, 0, 0}, series{0, 0, 0, 0}, false},
		{"idle queues stop reporting", series{3, nan, nan, 3}, series{0, nan, 0, nan}, false},
	} {
		v := evalMath(t, expr, map[string]series{"d0": c.d0, "d1": c.d1})
		got := false
		for _, x := range v {
			got = got || x >= 1
		}
		if got != c.fires {
			t.Errorf("%s: %s = %v, want fires %v", c.name, expr, v, c.fires)
		}
	}
}
