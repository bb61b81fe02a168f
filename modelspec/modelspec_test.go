package modelspec

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"

	"github.com/fleetscribe/fleetscribe/modelspec/configpb"
)

var update = flag.Bool("update", false, "rewrite the shipped model configurations from Shipped")

// The shipped configurations are the renderings of Shipped.
func TestShippedConfigsAreCurrent(t *testing.T) {
	for path, c := range Shipped() {
		file := filepath.Join("..", path)
		want := c.Render()
		if *update {
			if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		got, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != want {
			t.Errorf("%s is not the rendering of modelspec (go test ./modelspec -update):\n%s", path, want)
		}
	}
}

// The contract every configuration renders: the inputs of its batching
// mode, the outputs, max_batch_size and preferred sizes that fit it.
func TestRender(t *testing.T) {
	ragged := GPU().Render()
	for _, want := range []string{
		`name: "asr"`, `backend: "python"`, "max_batch_size: 32", "allow_ragged_batch: true",
		"preferred_batch_size: 8\n  preferred_batch_size: 16\n", "priority_levels: 2", "default_timeout_microseconds: 10000000",
		"max_queue_size: 256", "instance_group: {\n  count: 1\n}",
	} {
		if !strings.Contains(ragged, want) {
			t.Errorf("GPU lacks %q:\n%s", want, ragged)
		}
	}
	buckets := GPUBuckets().Render()
	if strings.Contains(buckets, "allow_ragged_batch") || strings.Count(buckets, "optional: true") != 1 ||
		!strings.Contains(buckets, "kind: KIND_GPU") {
		t.Errorf("bucket mode: audio not ragged, audio_length required, on the GPU:\n%s", buckets)
	}
	cut := GPU().WithMaxBatch(12).WithParameters(map[string]string{"engine": "module", "b": "2"})
	got := cut.Render()
	for _, want := range []string{"max_batch_size: 12", "preferred_batch_size: 8\n  preferred_batch_size: 12\n",
		"parameters: {\n  key: \"b\"\n  value: {\n    string_value: \"2\"\n  }\n}\nparameters: {\n  key: \"engine\""} {
		if !strings.Contains(got, want) {
			t.Errorf("cut to 12 lacks %q:\n%s", want, got)
		}
	}
	if GPU().Parameters != nil {
		t.Error("WithParameters changed GPU()'s own map")
	}
}

// Every rendering is protobuf's text format of the configuration's
// message: read back strictly (an unknown field or a misplaced comment
// fails), it is the message, and its bytes do not depend on the build
// (protobuf's encoder adds a random second space after names).
func TestRenderingsReadBack(t *testing.T) {
	cases := Shipped()
	cases["cut"] = GPU().WithMaxBatch(12).WithParameters(map[string]string{"engine": "echo", "delay": "a \"quoted\", value"})
	for name, c := range cases {
		text := c.Render()
		var got configpb.ModelConfig
		if err := prototext.Unmarshal([]byte(text), &got); err != nil {
			t.Errorf("%s does not read back: %v\n%s", name, err, text)
			continue
		}
		if !proto.Equal(&got, c.Proto()) {
			t.Errorf("%s reads back as another message:\n%v\nwant\n%v", name, &got, c.Proto())
		}
		if strings.Contains(text, ":  ") {
			t.Errorf("%s keeps protobuf's unstable spacing:\n%s", name, text)
		}
	}
}

// What a second model needs renders through Text: sequence batching with
// control inputs and implicit state, and an ensemble of two models, each
// with its notes where they belong.
func TestTextRendersSequencesAndEnsembles(t *testing.T) {
	seq := &configpb.ModelConfig{
		Name: "streaming", Backend: "python", MaxBatchSize: 16,
		SchedulingChoice: &configpb.ModelConfig_SequenceBatching{SequenceBatching: &configpb.ModelSequenceBatching{
			MaxSequenceIdleMicroseconds: 60_000_000,
			StrategyChoice: &configpb.ModelSequenceBatching_Oldest{Oldest: &configpb.ModelSequenceBatching_StrategyOldest{
				MaxCandidateSequences: 64, PreferredBatchSize: []int32{16}, MaxQueueDelayMicroseconds: 5000,
			}},
			ControlInput: []*configpb.ModelSequenceBatching_ControlInput{{
				Name: "START",
				Control: []*configpb.ModelSequenceBatching_Control{{
					Kind: configpb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START, BoolFalseTrue: []bool{false, true},
				}},
			}},
			State: []*configpb.ModelSequenceBatching_State{{
				InputName: "cache_in", OutputName: "cache_out", DataType: configpb.DataType_TYPE_FP32, Dims: []int64{4, 188, 512},
				InitialState: []*configpb.ModelSequenceBatching_InitialState{{
					Name: "empty", DataType: configpb.DataType_TYPE_FP32, Dims: []int64{4, 188, 512},
					StateData: &configpb.ModelSequenceBatching_InitialState_ZeroData{ZeroData: true},
				}},
			}},
		}},
		InstanceGroup: []*configpb.ModelInstanceGroup{{Count: 2, Kind: KindGPU}},
	}
	ens := &configpb.ModelConfig{
		Name: "pipeline", Platform: "ensemble", MaxBatchSize: 8,
		SchedulingChoice: &configpb.ModelConfig_EnsembleScheduling{EnsembleScheduling: &configpb.ModelEnsembling{
			Step: []*configpb.ModelEnsembling_Step{
				{ModelName: "diarize", ModelVersion: -1, InputMap: map[string]string{"audio": "AUDIO"}, OutputMap: map[string]string{"turns": "TURNS"}},
				{ModelName: Name, ModelVersion: -1, InputMap: map[string]string{"audio": "AUDIO"}, OutputMap: map[string]string{"text": "TEXT"}},
			},
		}},
	}
	for _, m := range []*configpb.ModelConfig{seq, ens} {
		text := Text(m, "A model of two lines\nof header.",
			Note{Path: "sequence_batching/state", Text: "The speaker cache, carried by Triton."},
			Note{Path: "ensemble_scheduling/step/model_name=asr", Text: "The speech model."})
		var got configpb.ModelConfig
		if err := prototext.Unmarshal([]byte(text), &got); err != nil || !proto.Equal(&got, m) {
			t.Errorf("%s does not read back (%v):\n%s", m.Name, err, text)
		}
		if !strings.HasPrefix(text, "# A model of two lines\n# of header.\n\nname: ") {
			t.Errorf("%s: header not on top:\n%s", m.Name, text)
		}
	}
	seqText := Text(seq, "", Note{Path: "sequence_batching/state", Text: "The speaker cache, carried by Triton."})
	for _, want := range []string{"  # The speaker cache, carried by Triton.\n  state: {\n    input_name: \"cache_in\"",
		"oldest: {\n    max_candidate_sequences: 64", "zero_data: true", "kind: KIND_GPU\n  count: 2"} {
		if !strings.Contains(seqText, want) {
			t.Errorf("sequence model lacks %q:\n%s", want, seqText)
		}
	}
	ensText := Text(ens, "", Note{Path: "ensemble_scheduling/step/model_name=asr", Text: "The speech model."})
	if !strings.Contains(ensText, "    # The speech model.\n    model_name: \"asr\"") || strings.Count(ensText, "# The speech model.") != 1 {
		t.Errorf("the note is not above the second step's model name only:\n%s", ensText)
	}
}

func TestParseKind(t *testing.T) {
	for s, want := range map[string]configpb.ModelInstanceGroup_Kind{"": KindAuto, "KIND_AUTO": KindAuto, "KIND_GPU": KindGPU, "KIND_CPU": KindCPU} {
		if got, err := ParseKind(s); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", s, got, err, want)
		}
	}
	for _, s := range []string{"KIND_MODEL", "kind_gpu", "GPU"} {
		if _, err := ParseKind(s); err == nil {
			t.Errorf("ParseKind(%q) took it", s)
		}
	}
}

// model.py's engines state the rate in Python; it is this one.
func TestPythonSampleRateIsTheContracts(t *testing.T) {
	b, err := os.ReadFile("../deploy/triton/models/asr/1/fleetscribe_asr/common.py")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("\nSAMPLE_RATE = %d\n", SampleRate)
	if !strings.Contains(string(b), want) {
		t.Errorf("fleetscribe_asr/common.py does not say %q", strings.TrimSpace(want))
	}
}

// A value may hold commas: a piece without "=" belongs to the value before it.
func TestAddParameters(t *testing.T) {
	got := map[string]string{}
	if err := AddParameters(got, []string{"model=/m.nemo", "length_buckets=30", "45", "batch_buckets=8", "16", "size=tiny"}); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"model": "/m.nemo", "length_buckets": "30,45", "batch_buckets": "8,16", "size": "tiny"}
	if !maps.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
	if err := AddParameters(map[string]string{}, []string{"30"}); err == nil {
		t.Error("a first piece without key= was taken")
	}
}
