package flagenv

import (
	"flag"
	"io"
	"testing"
	"time"
)

func TestApplyEnvThenFlagsWin(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	q := fs.String("queue-url", "", "")
	d := fs.Duration("job-timeout", time.Minute, "")
	env := map[string]string{"FS_QUEUE_URL": "from-env", "FS_JOB_TIMEOUT": "5s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := Apply(fs, "FS", lookup); err != nil {
		t.Fatal(err)
	}
	if *q != "from-env" || *d != 5*time.Second {
		t.Fatalf("env not applied: %q %v", *q, *d)
	}
	if err := fs.Parse([]string{"-queue-url", "from-flag"}); err != nil {
		t.Fatal(err)
	}
	if *q != "from-flag" {
		t.Fatalf("flag should win over env, got %q", *q)
	}
}

func TestApplyBadValue(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Int("concurrency", 1, "")
	err := Apply(fs, "FS", func(k string) (string, bool) { return "many", k == "FS_CONCURRENCY" })
	if err == nil {
		t.Fatal("want error for a non-integer value")
	}
}
