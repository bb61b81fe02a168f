package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// A vocabulary's life through the CLI against a local S3: created from a
// file (checked, normalised), listed, shown, attached to jobs by name,
// refused when bad (before anything is written), deleted.
func TestVocabularyCommands(t *testing.T) {
	emu, q := setup(t, 3)
	ctx := context.Background()
	vocab := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(ctx, append([]string{"vocabulary"}, append(args, "-aws-endpoint", emu.Endpoint, "-output-bucket", "out")...), nil, &stdout, &stderr)
		return stdout.String(), err
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "cardiology.txt")
	if err := os.WriteFile(file, []byte("# cardiology consults\nmetoprolol\n\n  atorvastatin  \nDr. Okafor\nmetoprolol\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := vocab("create", "-name", "cardiology", "-from-file", file); err != nil || !strings.Contains(out, "cardiology: 3 phrases in s3://out/vocabularies/cardiology.json") {
		t.Fatalf("create: %q, %v", out, err)
	}
	if out, err := vocab("show", "-name", "cardiology"); err != nil || out != "metoprolol\natorvastatin\nDr. Okafor\n" {
		t.Errorf("show: %q, %v", out, err)
	}
	// An invalid object in the prefix is listed with its problem.
	_, s3c := emu.Clients()
	if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("out"), Key: aws.String("vocabularies/broken.json"), Body: strings.NewReader(`{"name":"broken"}`)}); err != nil {
		t.Fatal(err)
	}
	out, err := vocab("list")
	if err != nil || !strings.Contains(out, "cardiology\t3 phrases\t") || !strings.Contains(out, "broken\tinvalid\t") || !strings.Contains(out, "no phrases") {
		t.Errorf("list: %q, %v", out, err)
	}
	bad := filepath.Join(dir, "bad.txt")
	if err := os.WriteFile(bad, []byte("fine\nmetoprolol <50 mg>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"create", "-name", "bad", "-from-file", bad}, "phrase 2: character U+003C"},
		{[]string{"create", "-name", "../x", "-from-file", file}, "only letters, digits"},
		{[]string{"show", "-name", "nope"}, `vocabulary "nope" does not exist`},
		{[]string{"rename", "-name", "x"}, "give create, list, show or delete"},
	} {
		if _, err := vocab(c.args...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
	if _, err := vocab("show", "-name", "bad"); err == nil {
		t.Error("a refused vocabulary was written")
	}

	// Jobs name it.
	var stdout, stderr bytes.Buffer
	if err := run(ctx, []string{"-aws-endpoint", emu.Endpoint, "-queue-url", "jobs", "-bucket", "archive", "-prefix", "2025/", "-job-vocabulary", "cardiology"}, nil, &stdout, &stderr); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	sqsc, _ := emu.Clients()
	jobs := receiveAll(t, sqsc, q.URL)
	if len(jobs) != 3 {
		t.Fatalf("%d jobs", len(jobs))
	}
	for _, j := range jobs {
		if j.Vocabulary == nil || j.Vocabulary.Name != "cardiology" {
			t.Errorf("job without the vocabulary: %+v", j)
		}
	}
	if err := run(ctx, []string{"-queue-url", "jobs", "-bucket", "archive", "-job-vocabulary", "a b", "k"}, nil, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "-job-vocabulary") {
		t.Errorf("a bad -job-vocabulary: %v", err)
	}

	if out, err := vocab("delete", "-name", "cardiology"); err != nil || !strings.Contains(out, "deleted") {
		t.Errorf("delete: %q, %v", out, err)
	}
	if _, err := vocab("show", "-name", "cardiology"); err == nil {
		t.Error("shown after delete")
	}
}
