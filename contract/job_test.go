package contract

import (
	"encoding/json"
	"strings"
	"testing"
)

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
		if err == nil {
			t.Errorf("%q: accepted, want it refused as not a job", body)
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

func FuzzParseMessage(f *testing.F) {
	f.Add([]byte(`{"v":1,"bucket":"inbox","key":"k.wav"}`))
	f.Add([]byte(`{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put","s3":{"bucket":{"name":"b"},"object":{"key":"k"}}}]}`))
	f.Add([]byte(`{"Type":"Notification","Message":"{}"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		jobs, err := ParseMessage(body)
		if err != nil {
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

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
