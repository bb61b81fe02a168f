package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
	"github.com/fleetscribe/fleetscribe/subtitle"
)

// outputs is the output bucket: every request the worker makes to it
// (transcripts, error records, claims) is here.
type outputs struct {
	s3     S3API
	bucket string
	deps   *dependencies  // learns from every answer
	marks  subtitle.Marks // the words TXT, SRT and VTT mark
}

// exists reports whether key exists, with one HEAD.
func (o outputs) exists(ctx context.Context, key string) (bool, error) {
	_, err := o.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(o.bucket), Key: aws.String(key)})
	err = o.deps.answer(depOutput, key, otherRequest, err)
	switch {
	case err == nil:
		return true, nil
	case s3errs.ObjectNotFound(err):
		return false, nil
	default:
		return false, err
	}
}

// transcript writes the extra formats first and the JSON transcript last:
// the JSON's existence means the job is complete.
func (o outputs) transcript(ctx context.Context, keys contract.OutputKeys, formats []string, t contract.Transcript) error {
	for _, f := range formats {
		var body []byte
		var ctype string
		switch f {
		case contract.FormatJSON:
			continue
		case contract.FormatTXT:
			body, ctype = subtitle.RenderTXTMarked(t, o.marks), "text/plain; charset=utf-8"
		case contract.FormatSRT:
			body, ctype = subtitle.RenderSRTMarked(t, o.marks), "application/x-subrip"
		case contract.FormatVTT:
			body, ctype = subtitle.RenderVTTMarked(t, o.marks), "text/vtt"
		}
		if err := o.put(ctx, keys.Key(f), body, ctype, "", nil); err != nil {
			return err
		}
	}
	return o.putJSON(ctx, keys.JSON, t, "", nil)
}

// errorRecord writes rec at key, even after ctx is cancelled. A final
// record carries metadata so a redelivery can skip the job with one HEAD.
func (o outputs) errorRecord(ctx context.Context, key string, rec contract.ErrorRecord) error {
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	meta := map[string]string{contract.MetaFinal: strconv.FormatBool(rec.Final)}
	if err := o.putJSON(wctx, key, rec, contract.ErrorRecordTag, meta); err != nil {
		return fmt.Errorf("write error record: %w", err)
	}
	return nil
}

// remove deletes key. Deleting what may not be there: a DELETE is free, a
// HEAD to look first is not.
func (o outputs) remove(ctx context.Context, key string) error {
	_, err := o.s3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(o.bucket), Key: aws.String(key)})
	return o.deps.answer(depOutput, key, otherRequest, err)
}

// writeCheck is the key under the output prefix that probes whether the
// worker can write its outputs: a small object, overwritten by each probe.
// Output keys start with a bucket name, never with '_'.
const writeCheck = "_write-check"

// checkWrites writes the write check: the output bucket takes the worker's
// writes. At start, and while the bucket is down.
func (o outputs) checkWrites(ctx context.Context, prefix string) error {
	body := []byte(`{"written_by":"fleetscribe worker","purpose":"checks that the output prefix can be written"}`)
	err := o.put(ctx, prefix+writeCheck, body, "application/json", "", nil)
	if err != nil {
		return fmt.Errorf("write check: %w", err)
	}
	return nil
}

// putClaim writes a claim's body at key; ifAbsent makes the write
// conditional (If-None-Match: *), failing with 412 where one exists.
func (o outputs) putClaim(ctx context.Context, key string, body []byte, ifAbsent bool) error {
	in := &s3.PutObjectInput{
		Bucket: aws.String(o.bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentType: aws.String("application/json"), ContentLength: aws.Int64(int64(len(body))),
	}
	if ifAbsent {
		in.IfNoneMatch = aws.String("*")
	}
	_, err := o.s3.PutObject(ctx, in)
	return o.deps.answer(depOutput, key, otherRequest, err)
}

// read returns at most limit bytes of key, or nil when there is none.
func (o outputs) read(ctx context.Context, key string, limit int64) ([]byte, error) {
	out, err := o.s3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(o.bucket), Key: aws.String(key)})
	if err = o.deps.answer(depOutput, key, otherRequest, err); err != nil {
		if s3errs.ObjectNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	defer func() { _ = out.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(out.Body, limit))
	if b == nil {
		b = []byte{}
	}
	return b, err
}

func (o outputs) putJSON(ctx context.Context, key string, v any, tagging string, meta map[string]string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return o.put(ctx, key, b, "application/json", tagging, meta)
}

// put writes one output object; tagging ("k=v", or empty) becomes its
// tags. S3 refusing the object itself (key too long, invalid argument) is
// a permanent output_rejected error: retrying cannot help.
func (o outputs) put(ctx context.Context, key string, body []byte, ctype, tagging string, meta map[string]string) error {
	_, err := o.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(o.bucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentType: aws.String(ctype), ContentLength: aws.Int64(int64(len(body))),
		Tagging: optional(tagging), Metadata: meta,
	})
	if err = o.deps.answer(depOutput, key, otherRequest, err); err != nil {
		err = fmt.Errorf("put s3://%s/%s: %w", o.bucket, key, err)
		if outputRejected(err) {
			return Permanent(contract.ClassOutputRejected, err)
		}
		return err
	}
	return nil
}

// outputRejected reports S3 refusing an object for what it is.
func outputRejected(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "KeyTooLongError", "InvalidArgument", "InvalidRequest", "EntityTooLarge", "InvalidTag", "MetadataTooLarge":
		return true
	}
	return false
}
