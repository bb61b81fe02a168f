package flagenv

import (
	"flag"
	"io"
	"strings"
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

func TestSectionsUsageAndReference(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var out strings.Builder
	fs.SetOutput(&out)
	l := Register(fs,
		Section{"Queues", func(fs *flag.FlagSet) {
			fs.String("queue-url", "", "queue to drain\nThe rationale, for the reference only.")
			fs.Int("concurrency", 8, "jobs at once")
		}},
		Section{"Outputs", func(fs *flag.FlagSet) { fs.String("output-bucket", "", "bucket | of outputs") }},
	)
	Usage(fs, "FS", "x: a command", l)()
	want := "x: a command\n\nFlags (each also read from the environment variable shown):\n\nQueues:\n" +
		"  -concurrency  [FS_CONCURRENCY]\n      jobs at once (default 8)\n" +
		"  -queue-url  [FS_QUEUE_URL]\n      queue to drain\n" +
		"\nOutputs:\n  -output-bucket  [FS_OUTPUT_BUCKET]\n      bucket | of outputs\n"
	if out.String() != want {
		t.Errorf("usage:\n%s\nwant:\n%s", out.String(), want)
	}
	ref := Reference(fs, "FS", l)
	for _, s := range []string{"## Queues", "| `-queue-url` | `FS_QUEUE_URL` |  | queue to drain. The rationale, for the reference only. |",
		"| `-concurrency` | `FS_CONCURRENCY` | `8` | jobs at once |", "## Outputs", `bucket \| of outputs`} {
		if !strings.Contains(ref, s) {
			t.Errorf("reference lacks %q:\n%s", s, ref)
		}
	}
}
