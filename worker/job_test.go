package worker

import (
	"bytes"
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
	 {"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"in"},"object":{"key":"a/b+c%281%29.wav","eTag":"abc","versionId":"v1"}}},
	 {"eventSource":"aws:s3","eventName":"ObjectRemoved:Delete","s3":{"bucket":{"name":"in"},"object":{"key":"gone.wav"}}},
	 {"eventSource":"aws:s3","eventName":"ObjectCreated:CompleteMultipartUpload","s3":{"bucket":{"name":"in"},"object":{"key":"big.wav"}}}]}`
	sns := `{"Type":"Notification","MessageId":"1","TopicArn":"arn:aws:sns:x","Message":` + quote(s3event) + `}`
	eb := `{"version":"0","source":"aws.s3","detail-type":"Object Created","detail":{"bucket":{"name":"in"},"object":{"key":"x y.wav","etag":"e1","version-id":"v9"}}}`
	cases := []struct {
		name string
		body string
		want []Job
	}{
		{"job", `{"v":1,"bucket":"in","key":"k.wav","formats":["srt"],"model":"asr"}`, []Job{{V: 1, Bucket: "in", Key: "k.wav", Formats: []string{"srt"}, Model: "asr"}}},
		{"s3 event", s3event, []Job{{V: 1, Bucket: "in", Key: "a/b c(1).wav", ETag: "abc", VersionID: "v1"}, {V: 1, Bucket: "in", Key: "big.wav"}}},
		{"sns wrapped", sns, []Job{{V: 1, Bucket: "in", Key: "a/b c(1).wav", ETag: "abc", VersionID: "v1"}, {V: 1, Bucket: "in", Key: "big.wav"}}},
		{"eventbridge", eb, []Job{{V: 1, Bucket: "in", Key: "x y.wav", ETag: "e1", VersionID: "v9"}}},
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
		`{"v":2,"bucket":"in","key":"k"}`,
		`{"v":1,"bucket":"in"}`,
		`{"v":1,"bucket":"in","key":"k","formats":["docx"]}`,
		`{"v":1,"bucket":"in","key":"k","extra":true}`,
		// Keys no S3 object can have: a NUL, not UTF-8, over 1,024 bytes.
		`{"v":1,"bucket":"in","key":"a\u0000b.wav"}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"in"},"object":{"key":"a%00b.wav"}}}]}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"in"},"object":{"key":"%FF%FE.wav"}}}]}`,
		`{"v":1,"bucket":"in","key":"` + strings.Repeat("k", 1025) + `"}`,
		`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"in"},"object":{"key":"%zz"}}}]}`,
		`{"Type":"Notification","Message":"{\"Type\":\"Notification\",\"Message\":\"{\\\"Type\\\":\\\"Notification\\\",\\\"Message\\\":\\\"{}\\\"}\"}"}`,
	} {
		_, err := ParseMessage([]byte(body))
		if ErrorClass(err) != ClassBadMessage {
			t.Errorf("%q: got %v, want a bad_message error", body, err)
		}
	}
}

func FuzzParseMessage(f *testing.F) {
	f.Add([]byte(`{"v":1,"bucket":"in","key":"k.wav"}`))
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
	b, err := Job{Bucket: "in", Key: "k", Formats: []string{"vtt"}, Priority: 2}.Encode()
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := ParseMessage(b)
	if err != nil || len(jobs) != 1 || jobs[0].V != JobVersion || jobs[0].Priority != 2 {
		t.Fatalf("%s → %+v, %v", b, jobs, err)
	}
	if _, err := (Job{Bucket: "in"}).Encode(); err == nil {
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
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with queue and bucket: %v", err)
	}
	if c.HeartbeatInterval != c.VisibilityTimeout/3 {
		t.Errorf("heartbeat interval %v, want a third of %v", c.HeartbeatInterval, c.VisibilityTimeout)
	}
	c.HeartbeatInterval = c.VisibilityTimeout
	if err := c.Validate(); err == nil {
		t.Error("heartbeat interval equal to the visibility timeout should not validate")
	}
}
