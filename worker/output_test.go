package worker

import (
	"context"
	"errors"
	"flag"
	"io"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// deadlineS3 records whether each DeleteObject had a deadline.
type deadlineS3 struct {
	S3API // the other calls are not made here
	had   []bool
}

func (s *deadlineS3) DeleteObject(ctx context.Context, _ *s3.DeleteObjectInput, _ ...func(*s3.Options)) (*s3.DeleteObjectOutput, error) {
	_, ok := ctx.Deadline()
	s.had = append(s.had, ok)
	return &s3.DeleteObjectOutput{}, nil
}

// A delete keeps its caller's deadline: the claim's release gives its
// delete 10 s, and the output adapter once dropped that (it detached every
// delete from its context, deadline included).
func TestRemoveKeepsTheCallersDeadline(t *testing.T) {
	api := &deadlineS3{}
	o := outputs{s3: api, bucket: "out"}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := o.remove(ctx, "k.claim"); err != nil {
		t.Fatal(err)
	}
	if len(api.had) != 1 || !api.had[0] {
		t.Fatalf("delete deadlines %v, want the caller's", api.had)
	}
}

// answeringS3 answers every HEAD and GET with the S3 error code.
type answeringS3 struct {
	S3API // the other calls are not made here
	code  string
}

func (s answeringS3) HeadObject(context.Context, *s3.HeadObjectInput, ...func(*s3.Options)) (*s3.HeadObjectOutput, error) {
	return nil, &smithy.GenericAPIError{Code: s.code}
}

func (s answeringS3) GetObject(context.Context, *s3.GetObjectInput, ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	return nil, &smithy.GenericAPIError{Code: s.code}
}

// An output key that does not exist is an answer (no transcript, no
// claim); an output bucket that does not exist is an outage, never "not
// there": the HEAD of skipIfDone and the claim's read once took
// NoSuchBucket for an absent key, and the job went on to compute.
func TestOutputMissingBucketIsNotAMissingKey(t *testing.T) {
	ctx := t.Context()
	o := outputs{s3: answeringS3{code: "NoSuchKey"}, bucket: "out"}
	if ok, err := o.exists(ctx, "k.json"); ok || err != nil {
		t.Errorf("exists of a missing key: %v, %v; want false, nil", ok, err)
	}
	if b, err := o.read(ctx, "k.claim", 10); b != nil || err != nil {
		t.Errorf("read of a missing key: %q, %v; want nil, nil", b, err)
	}
	o.s3 = answeringS3{code: "NoSuchBucket"}
	if _, err := o.exists(ctx, "k.json"); !isUnreachable(err) {
		t.Errorf("exists in a missing bucket: %v; want the outage", err)
	}
	if _, err := o.read(ctx, "k.claim", 10); !isUnreachable(err) {
		t.Errorf("read in a missing bucket: %v; want the outage", err)
	}
}

func isUnreachable(err error) bool {
	_, ok := errors.AsType[*unreachableError](err)
	return ok
}

// refusingS3 refuses every PutObject with a plain (not an outage) error.
type refusingS3 struct{ S3API }

func (refusingS3) PutObject(context.Context, *s3.PutObjectInput, ...func(*s3.Options)) (*s3.PutObjectOutput, error) {
	return nil, errors.New("access denied")
}

// runMessage never returns a deleting outcome beside an error: an
// unparseable message whose error record cannot be written is a retry (it
// once returned "invalid" with the write's error, which only the caller's
// switch kept from being counted and deleted).
func TestRunMessageOutcomeIsRetryWithItsError(t *testing.T) {
	var cfg Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-queue-url", "https://sqs.test/q", "-output-bucket", "out", "-input-buckets", "*"}); err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, Deps{Model: "asr", SQS: nil, S3: refusingS3{}, Transcriber: nil, Log: zerolog.New(io.Discard), Metrics: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	outcome, err := w.runMessage(t.Context(), zerolog.New(io.Discard), &delivery{id: "m1", body: "not json", attempt: 1})
	if err == nil || outcome != MessageRetry {
		t.Errorf("unwritable record of an unparseable message: %q, %v; want %q and the write's error", outcome, err, MessageRetry)
	}
	outcome, err = w.runMessage(t.Context(), zerolog.New(io.Discard), &delivery{id: "m2", body: `{"Event":"s3:TestEvent"}`, attempt: 1})
	if err != nil || outcome != MessageIgnored {
		t.Errorf("a test event: %q, %v; want %q, nil", outcome, err, MessageIgnored)
	}
}
