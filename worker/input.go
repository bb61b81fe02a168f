package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
)

// inputs reads recordings from the input buckets: every read of an input
// is here, and every answer S3 gives is turned into the job's error.
type inputs struct {
	s3   S3API
	deps *dependencies // learns from every answer
}

// firstRead is how much of an input the first GET reads: the whole of a
// typical short recording, so one request fetches it, and the header of a
// long one, to learn its format and length before it is admitted.
const firstRead = 1 << 20

// opened is what the first read of an input learned.
type opened struct {
	etag, version string
	size          int64
	head          []byte // the first min(size, firstRead) bytes
}

// open reads the first firstRead bytes of the input and its ETag, version
// and size, in one GET.
func (i inputs) open(ctx context.Context, job contract.Job) (opened, error) {
	obj, err := i.s3.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(job.VersionID),
		Range: aws.String(fmt.Sprintf("bytes=0-%d", firstRead-1)),
	})
	err = i.deps.answer(inputDep(job.Bucket), job.Key, readRequest, err)
	switch {
	case err == nil:
	case s3errs.ObjectNotFound(err):
		return opened{}, Permanentf(contract.ClassMissing, "s3://%s/%s does not exist", job.Bucket, job.Key)
	case archived(err):
		return opened{}, archivedError(job, err)
	case isInvalidRange(err):
		// An empty object has no first byte: its metadata from a HEAD.
		return i.head(ctx, job)
	default:
		return opened{}, fmt.Errorf("get input: %w", err)
	}
	defer func() { _ = obj.Body.Close() }()
	o := opened{etag: strings.Trim(aws.ToString(obj.ETag), `"`), version: aws.ToString(obj.VersionId), size: aws.ToInt64(obj.ContentLength)}
	if cr := aws.ToString(obj.ContentRange); cr != "" {
		_, total, ok := strings.Cut(cr, "/")
		n, err := strconv.ParseInt(total, 10, 64)
		if !ok || err != nil {
			return opened{}, fmt.Errorf("get input: unexpected Content-Range %q", cr)
		}
		o.size = n
	}
	// A server that ignored the range sends everything: read only the head.
	o.head = getBytes(int(min(o.size, firstRead)))
	if _, err := io.ReadFull(obj.Body, o.head); err != nil {
		putBytes(o.head)
		return opened{}, fmt.Errorf("read input: %w", err)
	}
	return o, nil
}

// head learns the input's ETag, version and size from a HEAD.
func (i inputs) head(ctx context.Context, job contract.Job) (opened, error) {
	h, err := i.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(job.VersionID)})
	err = i.deps.answer(inputDep(job.Bucket), job.Key, otherRequest, err)
	switch {
	case s3errs.ObjectNotFound(err):
		return opened{}, Permanentf(contract.ClassMissing, "s3://%s/%s does not exist", job.Bucket, job.Key)
	case err != nil:
		return opened{}, fmt.Errorf("head input: %w", err)
	}
	return opened{etag: strings.Trim(aws.ToString(h.ETag), `"`), version: aws.ToString(h.VersionId), size: aws.ToInt64(h.ContentLength)}, nil
}

// get starts a GET of exactly the object version that was checked, from
// rng on (an HTTP range, or empty for all of it).
func (i inputs) get(ctx context.Context, job contract.Job, in *contract.InputRef, rng string) (*s3.GetObjectOutput, error) {
	get := &s3.GetObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(in.VersionID)}
	if in.VersionID == "" && in.ETag != "" {
		get.IfMatch = aws.String(`"` + in.ETag + `"`)
	}
	if rng != "" {
		get.Range = aws.String(rng)
	}
	obj, err := i.s3.GetObject(ctx, get)
	err = i.deps.answer(inputDep(job.Bucket), job.Key, readRequest, err)
	switch {
	case err == nil:
		return obj, nil
	case s3errs.ObjectNotFound(err):
		return nil, Permanentf(contract.ClassMissing, "s3://%s/%s was deleted while being processed", job.Bucket, job.Key)
	case archived(err):
		return nil, archivedError(job, err)
	case s3errs.PreconditionFailed(err):
		return nil, fmt.Errorf("input changed while being processed: %w", err)
	default:
		return nil, fmt.Errorf("get input: %w", err)
	}
}

// answers tells whether bucket answers without reading any failing object:
// it lists under a failing key, then reads one byte of a key it served
// lately (a key that is gone, empty or archived answers too).
func (i inputs) answers(ctx context.Context, bucket string, failing, served []string) error {
	// The listing needs s3:ListBucket under the input prefixes (the worker
	// policy grants it, so a HEAD of a missing key answers 404): under a
	// failing key, it is inside them.
	var prefix string
	switch {
	case len(failing) > 0:
		prefix = failing[0]
	case len(served) > 0:
		prefix = served[0]
	}
	if _, err := i.s3.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix), MaxKeys: aws.Int32(1)}); err != nil {
		return fmt.Errorf("list s3://%s/%s: %w", bucket, prefix, err)
	}
	// The bucket lists; a key it served before, and is not failing now,
	// still reads (a broken bucket policy or credentials refuse it too).
	var errs []error
	for _, k := range served {
		if slices.Contains(failing, k) {
			continue
		}
		obj, err := i.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(k), Range: aws.String("bytes=0-0")})
		switch {
		case err == nil:
			_ = obj.Body.Close()
			return nil
		case s3errs.ObjectNotFound(err) || isInvalidRange(err) || archived(err):
			return nil // it answers about that key
		}
		errs = append(errs, fmt.Errorf("read s3://%s/%s, read before: %w", bucket, k, err))
	}
	return errors.Join(errs...) // nil: no other key to read
}

// archivedError is the permanent error of an input S3 will not read until
// it is restored, with the restore it needs.
func archivedError(job contract.Job, err error) error {
	class := "an archive storage class"
	if ios, ok := errors.AsType[*types.InvalidObjectState](err); ok && ios.StorageClass != "" {
		class = "storage class " + string(ios.StorageClass)
		if ios.AccessTier != "" {
			class += ", tier " + string(ios.AccessTier)
		}
	}
	return Permanentf(contract.ClassArchived,
		"s3://%s/%s is in %s and cannot be read until restored: restore it (aws s3api restore-object --bucket %s --key %s --restore-request Days=1), then send the job again",
		job.Bucket, job.Key, class, job.Bucket, shellQuote(job.Key))
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func isInvalidRange(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "InvalidRange" || ae.ErrorCode() == "416")
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}
