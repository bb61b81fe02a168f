package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

// parsed is the configuration of the worker's flags with args (and the two
// the worker cannot start without).
func parsed(t *testing.T, args ...string) config {
	t.Helper()
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.registerFlags(fs)
	base := []string{"-queue-url", "https://sqs.test/q", "-output-bucket", "out", "-input-buckets", "*", "-triton-addrs", "127.0.0.1:8001"}
	if err := fs.Parse(append(base, args...)); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// What spans sections is checked with the sections: a chunk longer than
// the model's largest bucket, no GPU, an unknown log level.
func TestConfigValidate(t *testing.T) {
	defaults := parsed(t)
	if _, err := defaults.validate(); err != nil {
		t.Fatalf("the defaults: %v", err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-model-buckets", "20", "-chunk-seconds", "30"}, "longer than the largest bucket"},
		{[]string{"-gpus", "0"}, "-gpus must be at least 1"},
		{[]string{"-log-level", "loud"}, "log level"},
		{[]string{"-visibility-timeout", "1s"}, "visibility timeout"},
	} {
		cfg := parsed(t, c.args...)
		if _, err := cfg.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error saying %q", c.args, err, c.want)
		}
	}
}

// derive sets what follows from the rest, and keeps what was given.
func TestConfigDerive(t *testing.T) {
	cfg := parsed(t, "-concurrency", "10", "-chunk-seconds", "20")
	cfg.derive(8 << 30)
	if cfg.aws.IdleConnsPerHost != 36 || cfg.pool.ChunkSamples != 20*16000 || cfg.pool.SharedMemoryBudget != 2<<30 {
		t.Errorf("derived: idle conns %d, chunk samples %d, shared memory budget %d; want 36, 320000, 2 GiB",
			cfg.aws.IdleConnsPerHost, cfg.pool.ChunkSamples, cfg.pool.SharedMemoryBudget)
	}
	cfg = parsed(t, "-triton-shared-memory-budget", "1048576")
	cfg.derive(8 << 30)
	if cfg.pool.SharedMemoryBudget != 1<<20 {
		t.Errorf("a given budget became %d", cfg.pool.SharedMemoryBudget)
	}
}
