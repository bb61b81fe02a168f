package main

import (
	"flag"
	"slices"
	"testing"

	"github.com/fleetscribe/fleetscribe/modelspec"
)

// The shipped Triton configurations (rendered from modelspec and checked
// current there) batch what the worker sends and let the worker's
// in-flight default reach every preferred batch size.
func TestShippedModelConfigsBatch(t *testing.T) {
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.registerFlags(fs)
	for name, c := range map[string]modelspec.Config{"models": modelspec.GPU(), "buckets": modelspec.GPUBuckets()} {
		preferred := c.Batching.Preferred
		if len(preferred) == 0 || slices.Max(preferred) > c.MaxBatch {
			t.Errorf("%s: preferred sizes %v against max_batch_size %d", name, preferred, c.MaxBatch)
			continue
		}
		if slices.Max(preferred) > cfg.pool.MaxInflight {
			t.Errorf("%s: preferred size %d can never be reached with -triton-max-inflight %d", name, slices.Max(preferred), cfg.pool.MaxInflight)
		}
		in := c.Inputs()
		if wantRagged := name == "models"; in[0].Ragged != wantRagged {
			t.Errorf("%s: allow_ragged_batch on audio = %v, want %v", name, in[0].Ragged, wantRagged)
		}
		if name == "buckets" && (in[2].Name != "audio_length" || in[2].Optional) {
			t.Errorf("%s: bucket mode needs the audio_length input: %+v", name, in[2])
		}
	}
}
