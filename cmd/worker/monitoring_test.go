package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
	"go.yaml.in/yaml/v4"

	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// namesRegisterer records the name of every metric registered through it.
type namesRegisterer struct {
	prometheus.Registerer
	names map[string]bool
}

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (n *namesRegisterer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			n.names[m[1]] = true
		}
	}
	return n.Registerer.Register(c)
}

func (n *namesRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := n.Register(c); err != nil {
			panic(err)
		}
	}
}

// exportedNames are the metric names the worker process exports, wired as
// run wires it.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.registerFlags(fs)
	if err := fs.Parse([]string{"-queue-url", "https://sqs.example/q", "-output-bucket", "out", "-input-buckets", "inbox"}); err != nil {
		t.Fatal(err)
	}
	reg := &namesRegisterer{Registerer: prometheus.NewRegistry(), names: map[string]bool{}}
	registerProcessMetrics(reg, cfg)
	pool, err := triton.NewPool(cfg.pool, cfg.model, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := worker.New(cfg.worker, worker.Deps{Model: cfg.model.Model, Transcriber: pool, Log: zerolog.Nop(), Metrics: reg}); err != nil {
		t.Fatal(err)
	}
	return reg.names
}

// monitoringExprs returns every PromQL expression of the alert rules and
// the dashboard, by where it is.
func monitoringExprs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	b, err := os.ReadFile("../../deploy/monitoring/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert, Expr string
			}
		}
	}
	if err := yaml.Unmarshal(b, &rules); err != nil {
		t.Fatal(err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			out["alert "+r.Alert] = r.Expr
		}
	}
	b, err = os.ReadFile("../../deploy/monitoring/grafana/dashboards/fleetscribe.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	for _, p := range dash.Panels {
		for i, tg := range p.Targets {
			out["panel "+p.Title+" #"+string(rune('A'+i))] = tg.Expr
		}
	}
	return out
}

var (
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
)

// Every metric the alert rules and the dashboard query is one the worker
// exports (histograms by their _bucket, _sum and _count series); a rename
// in the code breaks this test, not a dashboard in production.
func TestMonitoringQueriesUseExportedMetrics(t *testing.T) {
	names := exportedNames(t)
	exprs := monitoringExprs(t)
	if len(exprs) < 20 {
		t.Fatalf("only %d expressions found", len(exprs))
	}
	used := map[string]bool{}
	for where, expr := range exprs {
		for _, id := range identifier.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
			if !strings.HasPrefix(id, "fleetscribe_") && !strings.HasPrefix(id, "process_") && !strings.HasPrefix(id, "go_") {
				continue
			}
			base := id
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(id, suf); ok && names[b] {
					base = b
				}
			}
			if !names[base] {
				t.Errorf("%s queries %s, which the worker does not export", where, id)
			}
			used[base] = true
		}
	}
	// The operators' questions the issue names each have a query.
	for _, want := range []string{"fleetscribe_jobs_total", "fleetscribe_job_errors_total", "fleetscribe_triton_inflight",
		"fleetscribe_triton_request_seconds", "fleetscribe_triton_partition_healthy", "fleetscribe_queue_messages",
		"fleetscribe_dlq_messages", "fleetscribe_gpus", "fleetscribe_audio_seconds_total", "fleetscribe_heartbeats_total",
		"fleetscribe_stage_seconds", "fleetscribe_triton_queue_seconds_total", "fleetscribe_triton_compute_seconds_total"} {
		if !used[want] {
			t.Errorf("no alert or panel uses %s", want)
		}
	}
	var unused []string
	for n := range names {
		if strings.HasPrefix(n, "fleetscribe_") && !used[n] {
			unused = append(unused, n)
		}
	}
	sort.Strings(unused)
	t.Logf("worker metrics on no panel: %v", unused)
}

// promtool (Debian's prometheus package; make deps installs it) parses
// the alert rules, the Prometheus configuration and every dashboard query.
// make test sets FLEETSCRIBE_REQUIRE_PROMTOOL=1 so a missing promtool
// fails instead of skipping.
func TestMonitoringParsesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("FLEETSCRIBE_REQUIRE_PROMTOOL") == "1" {
			t.Fatal("promtool not found: run make deps")
		}
		t.Skip("promtool not found (make deps installs it)")
	}
	dir := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		out, err := exec.CommandContext(t.Context(), promtool, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run("check", "rules", "../../deploy/monitoring/alerts.yml")

	// The dashboard's queries, as recording rules ($__rate_interval is
	// Grafana's; Prometheus sees a duration there).
	type rule struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rule
	exprs := monitoringExprs(t)
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for i, k := range keys {
		if strings.HasPrefix(k, "panel ") {
			rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: strings.ReplaceAll(exprs[k], "$__rate_interval", "5m")})
		}
	}
	b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	dashRules := filepath.Join(dir, "dashboard.yml")
	if err := os.WriteFile(dashRules, b, 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "rules", dashRules)

	// The Prometheus configuration, with its rule file where it is here.
	cfg, err := os.ReadFile("../../deploy/monitoring/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	alerts, _ := filepath.Abs("../../deploy/monitoring/alerts.yml")
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(strings.ReplaceAll(string(cfg), "/etc/prometheus/alerts.yml", alerts)), 0o644); err != nil {
		t.Fatal(err)
	}
	run("check", "config", cfgFile)
}
