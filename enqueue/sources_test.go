package enqueue

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Several prefixes, fanned out over their sub-prefixes two levels deep,
// with keys directly under each level too: every key once, nothing from
// outside the prefixes; a prefix under another is listed once.
func TestPrefixesFanOutListEachKeyOnce(t *testing.T) {
	w := newWorld(t)
	b, q := w.bucket(), w.queue()
	var in []string
	for _, d := range []string{"2024/", "2025/01/", "2025/02/", "2025/02/x/", "2025/", "loose/"} {
		for i := range 7 {
			in = append(in, fmt.Sprintf("%srec-%d.wav", d, i))
		}
	}
	w.put(b, in...)
	w.put(b, "other/a.wav", "2023/a.wav", "2025/02/folder/")
	for _, depth := range []int{0, 1, 2} {
		t.Run(fmt.Sprint("depth", depth), func(t *testing.T) {
			o := w.opts(q.URL)
			o.Sources = Sources{Bucket: b, Prefixes: []string{"2025/", "2024/", "loose/", "2025/02/"}}
			o.ListDepth, o.ListConcurrency = depth, 3
			sum, err := Run(context.Background(), w.s3, w.sqs, o)
			if err != nil {
				t.Fatal(err)
			}
			if sum.Sent != int64(len(in)) || sum.Listed != int64(len(in))+1 || sum.Filtered != 1 {
				t.Errorf("summary %s; want %d sent and the folder marker filtered", sum, len(in))
			}
			sameJobs(t, w.drain(q.URL), want(b, in...))
		})
	}
}

func TestFiltersSuffixGlobSizeAndTime(t *testing.T) {
	w := newWorld(t)
	b, q := w.bucket(), w.queue()
	w.put(b, "a/x.wav", "a/y.mp3", "a/z.txt", "a/tmp-1.wav", "a/sub/deep.wav")
	w.putBody(b, "a/big.wav", bytes.Repeat([]byte{1}, 5000))
	cases := []struct {
		name string
		f    Filter
		want []string
	}{
		{"suffixes", Filter{Suffixes: []string{".wav", ".mp3"}}, []string{"a/x.wav", "a/y.mp3", "a/tmp-1.wav", "a/sub/deep.wav", "a/big.wav"}},
		{"include base name", Filter{Include: []string{"*.wav"}, Exclude: []string{"tmp-*"}}, []string{"a/x.wav", "a/sub/deep.wav", "a/big.wav"}},
		{"include path", Filter{Include: []string{"a/*.wav"}}, []string{"a/x.wav", "a/tmp-1.wav", "a/big.wav"}},
		{"size", Filter{MinSize: 100}, []string{"a/big.wav"}},
		{"max size", Filter{MaxSize: 100, Suffixes: []string{".wav"}}, []string{"a/x.wav", "a/tmp-1.wav", "a/sub/deep.wav"}},
		{"modified in window", Filter{After: time.Now().Add(-time.Hour), Before: time.Now().Add(time.Hour), Suffixes: []string{".mp3"}}, []string{"a/y.mp3"}},
		{"modified before", Filter{Before: time.Now().Add(-time.Hour)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, src := range []string{"prefix", "keys"} {
				o := w.opts(q.URL)
				o.Filter = c.f
				if src == "prefix" {
					o.Sources = Sources{Bucket: b, Prefixes: []string{"a/"}}
				} else {
					// Keys carry no metadata: size and time come from HeadObject.
					o.Sources = Sources{Bucket: b, Keys: []string{"a/x.wav", "a/y.mp3", "a/z.txt", "a/tmp-1.wav", "a/sub/deep.wav", "a/big.wav"}}
				}
				if _, err := Run(context.Background(), w.s3, w.sqs, o); err != nil {
					t.Fatal(err)
				}
				sameJobs(t, w.drain(q.URL), want(b, c.want...))
			}
		})
	}
}

func TestFileAndStdinSources(t *testing.T) {
	w := newWorld(t)
	b, b2, q := w.bucket(), w.bucket(), w.queue()
	path := t.TempDir() + "/keys.txt"
	lines := "a.wav\r\n\n  \ns3://" + b2 + "/dir/b c.wav\nspaces in key.wav\n"
	if err := writeFile(path, lines); err != nil {
		t.Fatal(err)
	}
	for _, src := range []Sources{{Bucket: b, File: path}, {Bucket: b, File: "-", Stdin: strings.NewReader(lines)}} {
		o := w.opts(q.URL)
		o.Sources = src
		sum, err := Run(context.Background(), w.s3, w.sqs, o)
		if err != nil || sum.Sent != 3 {
			t.Fatalf("%s: %v", sum, err)
		}
		got := w.drain(q.URL)
		sameJobs(t, got, map[string]int{b + "/a.wav": 1, b2 + "/dir/b c.wav": 1, b + "/spaces in key.wav": 1})
	}
	// A bare key without -bucket is a clear error.
	o := w.opts(q.URL)
	o.Sources = Sources{File: "-", Stdin: strings.NewReader("k.wav\n")}
	if _, err := Run(context.Background(), w.s3, w.sqs, o); err == nil || !strings.Contains(err.Error(), "without a bucket") {
		t.Errorf("err = %v", err)
	}
}

// An S3 Inventory: manifest.json naming gzip CSV data files in another
// bucket, URL-encoded keys (spaces as '+', '%', non-ASCII), the columns
// the fileSchema names, delete markers and older versions left out.
func TestInventorySource(t *testing.T) {
	w := newWorld(t)
	src, inv, q := w.bucket(), w.bucket(), w.queue()
	keys := []string{"calls/a b.wav", "calls/100%.wav", "calls/été+1.wav", "calls/x/y.wav", "calls/z.wav", "notes.txt"}
	schema := "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag"
	var files []map[string]any
	for f, part := range [][]string{keys[:3], keys[3:]} {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		for _, k := range part {
			fmt.Fprintf(zw, "%q,%q,%q,%q,%q,%q,%q,%q\n", src, url.QueryEscape(k), "", "true", "false", "1234", "2025-03-01T10:00:00.000Z", "0123abcd")
		}
		// An older version and a delete marker of keys that must not be sent.
		fmt.Fprintf(zw, "%q,%q,%q,%q,%q,%q,%q,%q\n", src, "calls/old.wav", "v1", "false", "false", "1", "2025-03-01T10:00:00.000Z", "ff")
		fmt.Fprintf(zw, "%q,%q,%q,%q,%q,%q,%q,%q\n", src, "calls/gone.wav", "v2", "true", "true", "", "2025-03-01T10:00:00.000Z", "")
		_ = zw.Close()
		key := fmt.Sprintf("inv/%s/data/%d.csv.gz", src, f)
		w.putBody(inv, key, buf.Bytes())
		files = append(files, map[string]any{"key": key, "size": buf.Len(), "MD5checksum": "x"})
	}
	man, _ := json.Marshal(map[string]any{
		"sourceBucket": src, "destinationBucket": "arn:aws:s3:::" + inv, "version": "2016-11-30",
		"fileFormat": "CSV", "fileSchema": schema, "files": files,
	})
	w.putBody(inv, "inv/"+src+"/2025-03-02T00-00Z/manifest.json", man)

	o := w.opts(q.URL)
	o.Sources = Sources{Inventory: "s3://" + inv + "/inv/" + src + "/2025-03-02T00-00Z/manifest.json"}
	o.Filter = Filter{Suffixes: []string{".wav"}, MinSize: 1000}
	sum, err := Run(context.Background(), w.s3, w.sqs, o)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Sent != 5 || sum.Filtered != 1 {
		t.Errorf("summary %s", sum)
	}
	sameJobs(t, w.drain(q.URL), want(src, keys[:5]...))

	// A Parquet or ORC inventory gets a clear error naming the format.
	bad, _ := json.Marshal(map[string]any{"fileFormat": "Parquet", "fileSchema": "message s3.inventory { }", "files": files})
	w.putBody(inv, "inv/parquet/manifest.json", bad)
	o.Sources = Sources{Inventory: "s3://" + inv + "/inv/parquet/manifest.json"}
	if _, err := Run(context.Background(), w.s3, w.sqs, o); err == nil || !strings.Contains(err.Error(), `"Parquet" is not supported`) {
		t.Errorf("parquet manifest: %v", err)
	}
}

// Skip-if-done finds exactly the inputs whose transcript exists, under
// the keys the worker itself derives (KeysFor): keys with spaces, '%',
// dot segments, doubled slashes and keys long enough to be hashed, for
// the job's own output prefix and model. Both check modes agree.
func TestSkipDoneAgreesWithWorkerKeys(t *testing.T) {
	w := newWorld(t)
	b, out, q := w.bucket(), w.bucket(), w.queue()
	long := "deep/" + strings.Repeat("x", 990) + ".wav"
	var all []string
	for i := range 60 {
		all = append(all, fmt.Sprintf("deep/%03d.wav", i))
	}
	all = append(all, "deep/a b.wav", "deep/100%.wav", "deep/./dot.wav", "deep//double.wav", long, "deep/é.wav")
	w.put(b, all...)
	var done, todo []string
	for i, k := range all {
		if i%3 == 0 || k == long || k == "deep/100%.wav" || k == "deep//double.wav" {
			done = append(done, k)
		} else {
			todo = append(todo, k)
		}
	}
	w.markDone(out, "custom/", "asr-v2", b, done...)
	// Transcripts of another model, and of the default prefix, do not count.
	w.markDone(out, "custom/", "asr", b, todo...)
	w.markDone(out, "transcripts/", "asr-v2", b, todo...)
	for _, mode := range []string{CheckList, CheckHead} {
		t.Run(mode, func(t *testing.T) {
			for _, src := range []string{"prefix", "keys"} {
				o := w.opts(q.URL)
				o.Sources = Sources{Bucket: b, Prefixes: []string{"deep/"}}
				if src == "keys" {
					o.Sources = Sources{Bucket: b, Keys: all}
				}
				o.SkipDone, o.OutputBucket, o.CheckMode = true, out, mode
				o.Job.OutputPrefix, o.Job.Model = "custom/", "asr-v2"
				sum, err := Run(context.Background(), w.s3, w.sqs, o)
				if err != nil {
					t.Fatal(err)
				}
				if sum.SkippedDone != int64(len(done)) || sum.Sent != int64(len(todo)) {
					t.Errorf("%s: %s; want %d skipped, %d sent", src, sum, len(done), len(todo))
				}
				sameJobs(t, w.drain(q.URL), want(b, todo...))
			}
		})
	}
}

func writeFile(path, s string) error {
	return os.WriteFile(path, []byte(s), 0o600)
}

// listCalls counts ListObjectsV2 calls on the output bucket.
type countingS3 struct {
	S3API
	lists, heads int
}

func (c *countingS3) ListObjectsV2(ctx context.Context, in *s3.ListObjectsV2Input, o ...func(*s3.Options)) (*s3.ListObjectsV2Output, error) {
	c.lists++
	return c.S3API.ListObjectsV2(ctx, in, o...)
}

func (c *countingS3) HeadObject(ctx context.Context, in *s3.HeadObjectInput, o ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	c.heads++
	return c.S3API.HeadObject(ctx, in, o...)
}

// The list check costs about one call per thousand outputs, not one per key.
func TestListCheckCallCount(t *testing.T) {
	w := newWorld(t)
	b, out, q := w.bucket(), w.bucket(), w.queue()
	var all []string
	for i := range 3000 {
		all = append(all, fmt.Sprintf("p/%05d.wav", i))
	}
	w.put(b, all...)
	w.markDone(out, "transcripts/", "asr", b, all[:1000]...)
	c := &countingS3{S3API: w.s3}
	o := w.opts(q.URL)
	o.Sources = Sources{Bucket: b, Prefixes: []string{"p/"}}
	o.SkipDone, o.OutputBucket, o.ListDepth = true, out, 0
	sum, err := Run(context.Background(), c, w.sqs, o)
	if err != nil || sum.SkippedDone != 1000 || sum.Sent != 2000 {
		t.Fatalf("%s: %v", sum, err)
	}
	if c.heads != 0 || c.lists > 3+3+2 {
		t.Errorf("%d HeadObject and %d ListObjectsV2 calls for 3 pages of input and 1000 outputs", c.heads, c.lists)
	}
	w.drain(q.URL)
}
