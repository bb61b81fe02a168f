package triton

import (
	"strings"
	"testing"
)

func TestParseEngine(t *testing.T) {
	text := `# HELP fleetscribe_model_engine 1 for the engine
# TYPE fleetscribe_model_engine gauge
nv_inference_count{model="asr",version="1"} 12
fleetscribe_model_engine{decoder_graphs="full_graph",device="gpu",encoder="compiled",engine="parakeet"} 1
`
	got, err := parseEngine(strings.NewReader(text))
	want := Engine{Engine: "parakeet", Device: "gpu", Encoder: "compiled", DecoderGraphs: "full_graph"}
	if err != nil || got != want {
		t.Fatalf("%+v, %v; want %+v", got, err, want)
	}
	if got.Slow() {
		t.Error("compiled with full graphs reported slow")
	}
	if _, err := parseEngine(strings.NewReader("nv_inference_count 1\n")); err == nil {
		t.Error("no engine metric: want an error")
	}
	for _, e := range []Engine{{Device: "gpu", Encoder: "eager", DecoderGraphs: "full_graph"}, {Device: "gpu", Encoder: "compiled", DecoderGraphs: "no_graphs"}} {
		if !e.Slow() {
			t.Errorf("%+v not reported slow", e)
		}
	}
	if (Engine{Device: "cpu", Encoder: "none", DecoderGraphs: "none"}).Slow() {
		t.Error("a CPU engine reported slow")
	}
}

func TestEngineSummary(t *testing.T) {
	s := EngineSummary(map[string]Engine{
		"h:8001": {Engine: "parakeet", Device: "gpu", Encoder: "compiled", DecoderGraphs: "full_graph"},
		"h:8004": {Engine: "parakeet", Device: "gpu", Encoder: "eager", DecoderGraphs: "full_graph"},
	}, 3)
	for _, want := range []string{"gpu compiled on 1", "gpu eager on 1", "full_graph on 2", "2 of 3 partitions", "SLOW PATH", "h:8004"} {
		if !strings.Contains(s, want) {
			t.Errorf("summary %q lacks %q", s, want)
		}
	}
	if strings.Contains(s, "h:8001") {
		t.Errorf("summary %q names a partition on the fast path", s)
	}
}

func TestMetricsAddr(t *testing.T) {
	if got, err := MetricsAddr("10.0.0.1:8001"); err != nil || got != "10.0.0.1:8003" {
		t.Errorf("%q, %v", got, err)
	}
	if _, err := MetricsAddr("nohost"); err == nil {
		t.Error("want an error")
	}
}
