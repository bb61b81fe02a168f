package modelspec

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		`name: "asr"`, `backend: "python"`, "max_batch_size: 32", "allow_ragged_batch: true", "preferred_batch_size: [ 8, 16 ]",
		"priority_levels: 2", "default_timeout_microseconds: 10000000", "max_queue_size: 256", "instance_group [ { count: 1 } ]",
	} {
		if !strings.Contains(ragged, want) {
			t.Errorf("GPU lacks %q:\n%s", want, ragged)
		}
	}
	buckets := GPUBuckets().Render()
	if strings.Contains(buckets, "allow_ragged_batch") || strings.Count(buckets, "optional: true") != 1 {
		t.Errorf("bucket mode: audio not ragged, audio_length required:\n%s", buckets)
	}
	cut := GPU().WithMaxBatch(12).WithParameters(map[string]string{"engine": "module", "b": "2"})
	got := cut.Render()
	for _, want := range []string{"max_batch_size: 12", "preferred_batch_size: [ 8, 12 ]",
		"parameters: { key: \"b\" value: { string_value: \"2\" } }\nparameters: { key: \"engine\""} {
		if !strings.Contains(got, want) {
			t.Errorf("cut to 12 lacks %q:\n%s", want, got)
		}
	}
	if GPU().Parameters != nil {
		t.Error("WithParameters changed GPU()'s own map")
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
