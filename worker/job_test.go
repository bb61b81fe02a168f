package worker

import (
	"cmp"
	"flag"
	"fmt"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/contract"
)

var update = flag.Bool("update", false, "rewrite golden files")

// No job's output or error-record key lies under another job's output key
// as under a folder, and no two jobs share a key: neither through the input
// key, nor the bucket, nor a job's own output prefix.
func TestOutputKeysNeverNest(t *testing.T) {
	cfg := Config{Outputs: OutputConfig{Prefix: "transcripts/", Prefixes: []string{"transcripts/"}}}
	a := contract.Job{V: 1, Bucket: "inbox", Key: "x"}
	for _, b := range []contract.Job{
		{V: 1, Bucket: "inbox", Key: "x/asr/unversioned.json/y"},
		{V: 1, Bucket: "inbox", Key: "x/asr/unversioned.error.json/y.wav"},
		{V: 1, Bucket: "inbox", Key: "x/asr/unversioned.claim/y.wav"},
		{V: 1, Bucket: "inbox", Key: "x/asr/unversioned.txt/y.wav"},
	} {
		if err := b.Validate(); err != nil {
			t.Fatalf("%+v: %v", b, err)
		}
		checkNoNesting(t, cfg, a, b)
	}
	// A job's own output prefix cannot name a transcript as a folder.
	if err := contract.CheckOutputPrefix("transcripts/inbox/x/asr/unversioned.json/"); err == nil {
		t.Error("a prefix under a transcript's key accepted")
	}
}

// jobKeys are every key a job can write: its outputs, claim and error
// record, and the key of its error record when S3 refuses that one.
func jobKeys(cfg Config, j contract.Job) []string {
	prefix := cfg.Outputs.Prefix
	if j.OutputPrefix != "" {
		prefix = j.OutputPrefix
	}
	model := j.Model
	if model == "" {
		model = "asr"
	}
	k := contract.KeysFor(prefix, contract.InputRef{Bucket: j.Bucket, Key: j.Key, VersionID: j.VersionID, ETag: j.ETag}, model)
	out := []string{k.JSON, k.Error, k.Claim, contract.UnwritableRecordKey(prefix, k)}
	for _, f := range contract.Formats()[1:] {
		out = append(out, k.Key(f))
	}
	return out
}

func checkNoNesting(t *testing.T, cfg Config, a, b contract.Job) {
	t.Helper()
	ka, kb := jobKeys(cfg, a), jobKeys(cfg, b)
	for _, x := range ka {
		for _, y := range kb {
			if x == y {
				t.Fatalf("jobs %+v and %+v share the key %q", a, b, x)
			}
			if strings.HasPrefix(y, x+"/") || strings.HasPrefix(x, y+"/") {
				t.Fatalf("key %q of one job and %q of another: one lies under the other", x, y)
			}
		}
	}
}

// FuzzOutputKeysNeverNest: for any two messages the parser accepts, with
// the output prefixes a job may choose, no key of one job is another's or
// lies under another's; nor under a message's invalid-message record.
func FuzzOutputKeysNeverNest(f *testing.F) {
	f.Add([]byte(`{"v":1,"bucket":"inbox","key":"x"}`), []byte(`{"v":1,"bucket":"inbox","key":"x/asr/unversioned.json/y"}`), "m1")
	f.Add([]byte(`{"v":1,"bucket":"inbox","key":"x","output_prefix":"transcripts/a/"}`), []byte(`{"v":1,"bucket":"a","key":"k"}`), "m2")
	f.Add([]byte(`{"v":1,"bucket":"inbox","key":"k","model":"m.json"}`), []byte(`{"v":1,"bucket":"inbox","key":"k/m%2Ejson/unversioned.json/z"}`), "x.error.json")
	f.Add([]byte(`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"inbox"},"object":{"key":"a/./b"}}}]}`), []byte(`{"v":1,"bucket":"inbox","key":"a/%2E/b","etag":"e"}`), "")
	cfg := Config{Outputs: OutputConfig{Prefix: "transcripts/", Prefixes: []string{"transcripts/"}}}
	f.Fuzz(func(t *testing.T, m1, m2 []byte, messageID string) {
		var jobs []contract.Job
		for _, m := range [][]byte{m1, m2} {
			js, err := contract.ParseMessage(m)
			if err != nil {
				continue
			}
			for _, j := range js {
				if j.OutputPrefix != "" && (contract.CheckOutputPrefix(j.OutputPrefix) != nil || !cfg.OutputPrefixAllowed(j.OutputPrefix)) {
					continue // the worker refuses it (task.policy) with a record under the worker's prefix
				}
				jobs = append(jobs, j)
			}
		}
		invalid := contract.InvalidMessageKey(cfg.Outputs.Prefix, messageID)
		for i, a := range jobs {
			for _, k := range jobKeys(cfg, a) {
				if k == invalid || strings.HasPrefix(k, invalid+"/") || strings.HasPrefix(invalid, k+"/") {
					t.Fatalf("job %+v key %q against invalid-message record %q", a, k, invalid)
				}
			}
			for _, b := range jobs[i+1:] {
				if sameOutputs(cfg, a, b) {
					continue
				}
				checkNoNesting(t, cfg, a, b)
			}
		}
	})
}

// sameOutputs reports whether two jobs are the same input, model and
// prefix, which share their transcript by design: the same bucket and key,
// and the same version id (or, without one, the same ETag).
func sameOutputs(cfg Config, a, b contract.Job) bool {
	id := func(j contract.Job) [5]string {
		prefix, model := cmp.Or(j.OutputPrefix, cfg.Outputs.Prefix), cmp.Or(j.Model, "asr")
		tag := ""
		switch {
		case j.VersionID != "" && j.VersionID != "null":
			tag = "v" + j.VersionID
		case j.ETag != "":
			tag = "e" + strings.Trim(j.ETag, `"`)
		}
		return [5]string{prefix, j.Bucket, j.Key, model, tag}
	}
	return id(a) == id(b)
}

func TestConfigValidate(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c Config
	c.RegisterFlags(fs)
	if err := c.Validate(); err == nil {
		t.Fatal("defaults without queue and bucket should not validate")
	}
	c.Queues.URL, c.Outputs.Bucket = "q", "b"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "input buckets are required") {
		t.Fatalf("defaults without input buckets: %v, want them required", err)
	}
	c.Inputs.Buckets = []string{"uploads", "calls/2026/"}
	before := fmt.Sprintf("%#v", c)
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with queue and buckets: %v", err)
	}
	if after := fmt.Sprintf("%#v", c); after != before {
		t.Errorf("Validate changed the configuration:\n%s\n%s", before, after)
	}
	if c.Queues.Heartbeat() != c.Queues.VisibilityTimeout/3 {
		t.Errorf("heartbeat interval %v, want a third of %v", c.Queues.Heartbeat(), c.Queues.VisibilityTimeout)
	}
	c.Queues.HeartbeatInterval = c.Queues.VisibilityTimeout
	if err := c.Validate(); err == nil {
		t.Error("heartbeat interval equal to the visibility timeout should not validate")
	}
}
