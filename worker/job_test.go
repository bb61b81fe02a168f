package worker

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/triton"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestParseMessageEnvelopes(t *testing.T) {
	s3event := `{"Records":[
	 {"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"inbox"},"object":{"key":"a/b+c%281%29.wav","eTag":"abc","versionId":"v1"}}},
	 {"eventSource":"aws:s3","eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"inbox"},"object":{"key":"gone.wav"}}},
	 {"eventSource":"aws:s3","eventName":"ObjectCreated:CompleteMultipartUpload","s3":{"bucket":{"name":"inbox"},"object":{"key":"big.wav"}}}]}`
	sns := `{"Type":"Notification","MessageId":"1","TopicArn":"arn:aws:sns:x","Message":` + quote(s3event) + `}`
	eb := `{"version":"0","source":"aws.s3","detail-type":"Object Created","detail":{"bucket":{"name":"inbox"},"object":{"key":"x y.wav","etag":"e1","version-id":"v9"}}}`
	cases := []struct {
		name string
		body string
		want []Job
	}{
		{"job", `{"v":1,"bucket":"inbox","key":"k.wav","formats":["srt"],"model":"asr"}`, []Job{{V: 1, Bucket: "inbox", Key: "k.wav", Formats: []string{"srt"}, Model: "asr"}}},
		{"s3 event", s3event, []Job{{V: 1, Bucket: "inbox", Key: "a/b c(1).wav", ETag: "abc", VersionID: "v1"}, {V: 1, Bucket: "inbox", Key: "big.wav"}}},
		{"sns wrapped", sns, []Job{{V: 1, Bucket: "inbox", Key: "a/b c(1).wav", ETag: "abc", VersionID: "v1"}, {V: 1, Bucket: "inbox", Key: "big.wav"}}},
		{"eventbridge", eb, []Job{{V: 1, Bucket: "inbox", Key: "x y.wav", ETag: "e1", VersionID: "v9"}}},
		{"eventbridge delete", strings.Replace(eb, "Object Created", "Object Deleted", 1), nil},
		{"s3 test event", `{"Service":"Amazon S3","Event":"s3:TestEvent","Bucket":"in"}`, nil},
	}
	for _, c := range cases {
		got, err := ParseMessage([]byte(c.body))
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %d jobs, want %d: %+v", c.name, len(got), len(c.want), got)
			continue
		}
		for i := range got {
			if got[i].Key != c.want[i].Key || got[i].Bucket != c.want[i].Bucket || got[i].ETag != c.want[i].ETag ||
				got[i].VersionID != c.want[i].VersionID || got[i].Model != c.want[i].Model || len(got[i].Formats) != len(c.want[i].Formats) {
				t.Errorf("%s: job %d = %+v, want %+v", c.name, i, got[i], c.want[i])
			}
		}
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestParseMessageRejects(t *testing.T) {
	for _, body := range []string{
		``, `not json`, `[]`, `{}`, `{"hello":"world"}`,
		`{"v":2,"bucket":"inbox","key":"k"}`,
		`{"v":1,"bucket":"inbox"}`,
		`{"v":1,"bucket":"inbox","key":"k","formats":["docx"]}`,
		`{"v":1,"bucket":"inbox","key":"k","extra":true}`,
		// Keys no S3 object can have: a NUL, not UTF-8, over 1,024 bytes.
		`{"v":1,"bucket":"inbox","key":"a\u0000b.wav"}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"inbox"},"object":{"key":"a%00b.wav"}}}]}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"inbox"},"object":{"key":"%FF%FE.wav"}}}]}`,
		`{"v":1,"bucket":"inbox","key":"` + strings.Repeat("k", 1025) + `"}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"inbox"},"object":{"key":"%zz"}}}]}`,
		`{"Type":"Notification","Message":"{\"Type\":\"Notification\",\"Message\":\"{\\\"Type\\\":\\\"Notification\\\",\\\"Message\\\":\\\"{}\\\"}\"}"}`,
		// Buckets S3 cannot have: a '/' or ".." would reach into another
		// input's output tree; upper case, too short, reserved forms.
		`{"v":1,"bucket":"inbox/x/asr/unversioned.json","key":"k.wav"}`,
		`{"v":1,"bucket":"../transcripts","key":"k.wav"}`,
		`{"v":1,"bucket":"Inbox","key":"k.wav"}`,
		`{"v":1,"bucket":"in","key":"k.wav"}`,
		`{"v":1,"bucket":"in_box","key":"k.wav"}`,
		`{"v":1,"bucket":"in..box","key":"k.wav"}`,
		`{"v":1,"bucket":"-inbox","key":"k.wav"}`,
		`{"v":1,"bucket":"192.168.5.4","key":"k.wav"}`,
		`{"v":1,"bucket":"xn--inbox","key":"k.wav"}`,
		`{"v":1,"bucket":"inbox-s3alias","key":"k.wav"}`,
		`{"v":1,"bucket":"` + strings.Repeat("b", 64) + `","key":"k.wav"}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"a/b"},"object":{"key":"k.wav"}}}]}`,
		`{"version":"0","source":"aws.s3","detail-type":"Object Created","detail":{"bucket":{"name":"UPLOADS"},"object":{"key":"k.wav"}}}`,
		// Legal, but a segment of output keys ending like an output file.
		`{"v":1,"bucket":"unversioned.json","key":"k.wav"}`,
	} {
		_, err := ParseMessage([]byte(body))
		if ErrorClass(err) != ClassBadMessage {
			t.Errorf("%q: got %v, want a bad_message error", body, err)
		}
	}
}

func TestCheckBucketName(t *testing.T) {
	for _, ok := range []string{"abc", "inbox", "my.bucket-1", "a1b", strings.Repeat("b", 63), "192.168.5", "1.2.3.4.5"} {
		if err := CheckBucketName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "ab", "Abc", "a_b", "a b", "a..b", ".abc", "abc.", "abc-", "10.0.0.1", "sthree-x",
		"amzn-s3-demo-x", "x--ol-s3", "x.mrap", "x--x-s3", "x--table-s3", "a/b", "ab\x00c", "ünïcode"} {
		if err := CheckBucketName(bad); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

// No job's output or error-record key lies under another job's output key
// as under a folder, and no two jobs share a key: neither through the input
// key, nor the bucket, nor a job's own output prefix.
func TestOutputKeysNeverNest(t *testing.T) {
	cfg := Config{OutputPrefix: "transcripts/", OutputPrefixes: []string{"transcripts/"}}
	a := Job{V: 1, Bucket: "inbox", Key: "x"}
	for _, b := range []Job{
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
	if err := CheckOutputPrefix("transcripts/inbox/x/asr/unversioned.json/"); err == nil {
		t.Error("a prefix under a transcript's key accepted")
	}
}

// jobKeys are every key a job can write: its outputs, claim and error
// record, and the key of its error record when S3 refuses that one.
func jobKeys(cfg Config, j Job) []string {
	prefix := cfg.OutputPrefix
	if j.OutputPrefix != "" {
		prefix = j.OutputPrefix
	}
	model := j.Model
	if model == "" {
		model = "asr"
	}
	k := KeysFor(prefix, InputRef{Bucket: j.Bucket, Key: j.Key, VersionID: j.VersionID, ETag: j.ETag}, model)
	out := []string{k.JSON, k.Error, k.Claim, UnwritableRecordKey(prefix, k)}
	for _, f := range knownFormats[1:] {
		out = append(out, k.Key(f))
	}
	return out
}

func checkNoNesting(t *testing.T, cfg Config, a, b Job) {
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
	cfg := Config{OutputPrefix: "transcripts/", OutputPrefixes: []string{"transcripts/"}}
	f.Fuzz(func(t *testing.T, m1, m2 []byte, messageID string) {
		var jobs []Job
		for _, m := range [][]byte{m1, m2} {
			js, err := ParseMessage(m)
			if err != nil {
				continue
			}
			for _, j := range js {
				if j.OutputPrefix != "" && (CheckOutputPrefix(j.OutputPrefix) != nil || !cfg.OutputPrefixAllowed(j.OutputPrefix)) {
					continue // the worker refuses it (admitJob) with a record under the worker's prefix
				}
				jobs = append(jobs, j)
			}
		}
		invalid := InvalidMessageKey(cfg.OutputPrefix, messageID)
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
func sameOutputs(cfg Config, a, b Job) bool {
	id := func(j Job) [5]string {
		prefix, model := cmp.Or(j.OutputPrefix, cfg.OutputPrefix), cmp.Or(j.Model, "asr")
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

func FuzzParseMessage(f *testing.F) {
	f.Add([]byte(`{"v":1,"bucket":"inbox","key":"k.wav"}`))
	f.Add([]byte(`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`))
	f.Add([]byte(`{"Type":"Notification","Message":"{}"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		jobs, err := ParseMessage(body)
		if err != nil {
			if ErrorClass(err) != ClassBadMessage {
				t.Fatalf("error without bad_message class: %v", err)
			}
			return
		}
		for _, j := range jobs {
			if err := j.Validate(); err != nil {
				t.Fatalf("parsed an invalid job %+v: %v", j, err)
			}
		}
	})
}

func TestJobEncodeRoundTrip(t *testing.T) {
	b, err := Job{Bucket: "inbox", Key: "k", Formats: []string{"vtt"}, Priority: 2}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ParseMessage(b)
	if err != nil || len(jobs) != 1 || jobs[0].V != JobVersion || jobs[0].Priority != 2 {
		t.Fatalf("%s → %+v, %v", b, jobs, err)
	}
	if _, err := (Job{Bucket: "inbox"}).Encode(); err == nil {
		t.Error("encoding a job without key should fail")
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n%s", name, got)
	}
}

func TestSubtitleGolden(t *testing.T) {
	words := []triton.Word{
		{Word: "the", Start: 0.31, End: 0.45}, {Word: "patient", Start: 0.45, End: 0.9},
		{Word: "is", Start: 0.9, End: 1.0}, {Word: "stable", Start: 1.0, End: 1.5},
		// a long pause starts a new cue
		{Word: "follow", Start: 3.2, End: 3.5}, {Word: "up", Start: 3.5, End: 3.7},
		{Word: "in", Start: 3.7, End: 3.8}, {Word: "two", Start: 3.8, End: 4.0}, {Word: "weeks", Start: 4.0, End: 4.4},
		{Word: "later", Start: 3661.0, End: 3661.5}, // past an hour
	}
	tr := Transcript{Text: "the patient is stable follow up in two weeks later", Words: words, Segments: BuildSegments(words)}
	if len(tr.Segments) != 3 {
		t.Fatalf("%d segments, want 3: %+v", len(tr.Segments), tr.Segments)
	}
	golden(t, "transcript.srt", RenderSRT(tr))
	golden(t, "transcript.vtt", RenderVTT(tr))
	golden(t, "transcript.txt", RenderTXT(tr))
}

func TestConfigValidate(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	var c Config
	c.RegisterFlags(fs)
	if err := c.Validate(); err == nil {
		t.Fatal("defaults without queue and bucket should not validate")
	}
	c.QueueURL, c.OutputBucket = "q", "b"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "input buckets are required") {
		t.Fatalf("defaults without input buckets: %v, want them required", err)
	}
	c.InputBuckets = []string{"uploads", "calls/2026/"}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with queue and buckets: %v", err)
	}
	if c.HeartbeatInterval != c.VisibilityTimeout/3 {
		t.Errorf("heartbeat interval %v, want a third of %v", c.HeartbeatInterval, c.VisibilityTimeout)
	}
	c.HeartbeatInterval = c.VisibilityTimeout
	if err := c.Validate(); err == nil {
		t.Error("heartbeat interval equal to the visibility timeout should not validate")
	}
}
