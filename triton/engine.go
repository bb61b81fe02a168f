package triton

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Engine is what a partition's model says it runs, from the Triton metric
// fleetscribe_model_engine that deploy/triton's model.py exports: which
// engine, on which device, its encoder path (compiled, eager, none) and
// its decoder's CUDA-graph mode (full_graph, no_while_loops, no_graphs,
// none). NeMo falls back to slower paths silently (an old driver, a
// failed compile), so the worker reports it and alerts on it.
type Engine struct {
	Engine, Device, Encoder, DecoderGraphs string
}

// Slow reports a GPU partition that runs its encoder eagerly or decodes
// without CUDA graphs: a fifth to a half of what the GPU can serve.
func (e Engine) Slow() bool {
	return e.Device == "gpu" && (e.Encoder != "compiled" || e.DecoderGraphs == "no_graphs" || e.DecoderGraphs == "none")
}

const engineMetric = "fleetscribe_model_engine"

// MetricsAddr is where a partition's Triton metrics are by the MPS plan's
// layout: each partition takes three ports, gRPC, HTTP and metrics, so
// metrics is the gRPC port plus two.
func MetricsAddr(grpcAddr string) (string, error) {
	host, port, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "", err
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		return "", fmt.Errorf("partition %s: port %q: %w", grpcAddr, port, err)
	}
	return net.JoinHostPort(host, strconv.Itoa(p+2)), nil
}

// readEngine reads the engine metric from a Triton metrics endpoint.
func readEngine(ctx context.Context, c *http.Client, metricsAddr string) (Engine, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return Engine{}, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return Engine{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return Engine{}, fmt.Errorf("metrics of %s: %s", metricsAddr, resp.Status)
	}
	return parseEngine(resp.Body)
}

// parseEngine finds the engine metric in Prometheus text: the series whose
// value is 1.
func parseEngine(r io.Reader) (Engine, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, engineMetric+"{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok || strings.TrimSpace(value) != "1" {
			continue
		}
		var e Engine
		for _, kv := range splitLabels(labels) {
			k, v, _ := strings.Cut(kv, "=")
			v, err := strconv.Unquote(v)
			if err != nil {
				continue
			}
			switch k {
			case "engine":
				e.Engine = v
			case "device":
				e.Device = v
			case "encoder":
				e.Encoder = v
			case "decoder_graphs":
				e.DecoderGraphs = v
			}
		}
		return e, nil
	}
	if err := sc.Err(); err != nil {
		return Engine{}, err
	}
	return Engine{}, fmt.Errorf("no %s metric (a model.py older than this worker, or another model)", engineMetric)
}

// splitLabels splits a{...} label text at the commas between pairs.
func splitLabels(s string) []string {
	var out []string
	quoted, escaped, start := false, false, 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case escaped:
			escaped = false
		case c == '\\':
			escaped = true
		case c == '"':
			quoted = !quoted
		case c == ',' && !quoted:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	if start < len(s) {
		out = append(out, s[start:])
	}
	return out
}

// engines keeps what each partition runs, read at every health check.
type engines struct {
	http  *http.Client
	addrs map[*partition]string // metrics address per partition
	g     *prometheus.GaugeVec

	mu   sync.Mutex
	last map[*partition]Engine
}

func newEngines(f promauto.Factory) *engines {
	return &engines{
		http:  &http.Client{},
		addrs: map[*partition]string{},
		last:  map[*partition]Engine{},
		g: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "fleetscribe_triton_engine",
			Help: "1 for what each partition's model runs, read from its Triton metrics: engine, device, encoder path (compiled, eager, none), decoder CUDA-graph mode.",
		}, []string{"partition", "engine", "device", "encoder", "decoder_graphs"}),
	}
}

func (e *engines) collect(ctx context.Context, parts []*partition) {
	var wg sync.WaitGroup
	for _, part := range parts {
		addr, ok := e.addrs[part]
		if !ok {
			continue
		}
		wg.Go(func() {
			got, err := readEngine(ctx, e.http, addr)
			if err != nil {
				return // not up yet, or no such metric: the last reading stands
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			prev, seen := e.last[part]
			if seen && prev == got {
				return
			}
			name := part.client.Addr()
			if seen {
				e.g.DeleteLabelValues(name, prev.Engine, prev.Device, prev.Encoder, prev.DecoderGraphs)
			}
			e.last[part] = got
			e.g.WithLabelValues(name, got.Engine, got.Device, got.Encoder, got.DecoderGraphs).Set(1)
		})
	}
	wg.Wait()
}

// Engines returns what each partition runs, by its gRPC address, as the
// last health checks read it (partitions not read yet are missing).
func (p *Pool) Engines() map[string]Engine {
	p.engines.mu.Lock()
	defer p.engines.mu.Unlock()
	out := map[string]Engine{}
	for part, e := range p.engines.last {
		out[part.client.Addr()] = e
	}
	return out
}

// EngineSummary says in one line what the partitions run, for /readyz:
// "encoder compiled on 8, decoder full_graph on 8 (of 8 partitions)".
func EngineSummary(engines map[string]Engine, partitions int) string {
	if len(engines) == 0 {
		return fmt.Sprintf("engine: not read yet from the %d partitions (their health checks read it)", partitions)
	}
	enc, dec := map[string]int{}, map[string]int{}
	var slow []string
	for addr, e := range engines {
		enc[e.Device+" "+e.Encoder]++
		dec[e.DecoderGraphs]++
		if e.Slow() {
			slow = append(slow, addr)
		}
	}
	count := func(m map[string]int) string {
		var parts []string
		for k, n := range m {
			parts = append(parts, fmt.Sprintf("%s on %d", k, n))
		}
		sort.Strings(parts)
		return strings.Join(parts, ", ")
	}
	s := fmt.Sprintf("encoder %s; decoder graphs %s (%d of %d partitions reported)", count(enc), count(dec), len(engines), partitions)
	if len(slow) > 0 {
		sort.Strings(slow)
		s += "; SLOW PATH (eager encoder or no decoder graphs on a GPU): " + strings.Join(slow, ", ")
	}
	return s
}
