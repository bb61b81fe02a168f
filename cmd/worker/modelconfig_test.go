package main

import (
	"flag"
	"os"
	"regexp"
	"slices"
	"strconv"
	"testing"
)

// The shipped Triton configurations batch what the worker sends and let
// the worker's in-flight default reach every preferred batch size.
func TestShippedModelConfigsBatch(t *testing.T) {
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.registerFlags(fs)
	for _, c := range []struct {
		path       string
		wantRagged bool
	}{
		{"../../deploy/triton/models/asr/config.pbtxt", true},
		{"../../deploy/triton/variants/asr-buckets.pbtxt", false},
	} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		src := regexp.MustCompile(`(?m)#.*$`).ReplaceAllString(string(b), "")
		maxBatch := atoi(t, regexp.MustCompile(`max_batch_size:\s*(\d+)`).FindStringSubmatch(src))
		var preferred []int
		if m := regexp.MustCompile(`preferred_batch_size:\s*\[([^\]]*)\]`).FindStringSubmatch(src); m != nil {
			for _, s := range regexp.MustCompile(`\d+`).FindAllString(m[1], -1) {
				n, _ := strconv.Atoi(s)
				preferred = append(preferred, n)
			}
		}
		if len(preferred) == 0 || slices.Max(preferred) > maxBatch {
			t.Errorf("%s: preferred sizes %v against max_batch_size %d", c.path, preferred, maxBatch)
		}
		if slices.Max(preferred) > cfg.pool.MaxInflight {
			t.Errorf("%s: preferred size %d can never be reached with -triton-max-inflight %d", c.path, slices.Max(preferred), cfg.pool.MaxInflight)
		}
		audio := regexp.MustCompile(`(?s)name:\s*"audio"[^}]*}`).FindString(src)
		ragged := regexp.MustCompile(`allow_ragged_batch:\s*true`).MatchString(audio)
		if ragged != c.wantRagged {
			t.Errorf("%s: allow_ragged_batch on audio = %v, want %v", c.path, ragged, c.wantRagged)
		}
		if !c.wantRagged && !regexp.MustCompile(`name:\s*"audio_length"`).MatchString(src) {
			t.Errorf("%s: bucket mode needs the audio_length input", c.path)
		}
	}
}

func atoi(t *testing.T, m []string) int {
	t.Helper()
	if m == nil {
		t.Fatal("field not found")
	}
	n, err := strconv.Atoi(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return n
}
