package localaws

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/fleetscribe/fleetscribe/contract"
)

// ReadOutput reads the worker's output of input key (of inBucket) that
// ends with suffix (".json", ".txt", ".srt", ".vtt"), found in bucket by
// its deterministic prefix under the worker's default "transcripts/". A
// job that ended in an error record has none: that is an error.
func ReadOutput(ctx context.Context, c *s3.Client, bucket, inBucket, key, suffix string) (string, error) {
	out, err := c.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String("transcripts/" + inBucket + "/" + contract.EscapeKey(key) + "/")})
	if err != nil {
		return "", err
	}
	for _, o := range out.Contents {
		k := aws.ToString(o.Key)
		if strings.HasSuffix(k, ".error.json") {
			return "", fmt.Errorf("%s: an error record, no transcript", key)
		}
		if !strings.HasSuffix(k, suffix) {
			continue
		}
		obj, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
		if err != nil {
			return "", err
		}
		defer func() { _ = obj.Body.Close() }()
		b, err := io.ReadAll(obj.Body)
		return string(b), err
	}
	return "", fmt.Errorf("no %s output for %s", suffix, key)
}

// ReadTranscript is ReadOutput of the JSON transcript, decoded.
func ReadTranscript(ctx context.Context, c *s3.Client, bucket, inBucket, key string) (contract.Transcript, error) {
	var t contract.Transcript
	b, err := ReadOutput(ctx, c, bucket, inBucket, key, ".json")
	if err != nil {
		return t, err
	}
	return t, json.Unmarshal([]byte(b), &t)
}

// Upload puts b at key: in one request up to 8 MiB, else in 8 MiB parts
// (the emulator refuses larger single requests), passing part ETags
// without their quotes (the emulator's completion refuses the SDK's
// escaped ones).
func Upload(ctx context.Context, c *s3.Client, bucket, key string, b []byte) error {
	const size = 8 << 20
	if len(b) <= size {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(b)})
		return err
	}
	up, err := c.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		return err
	}
	var parts []s3types.CompletedPart
	for i, off := int32(1), 0; off < len(b); i, off = i+1, off+size {
		end := min(off+size, len(b))
		res, err := c.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
			PartNumber: aws.Int32(i), Body: bytes.NewReader(b[off:end])})
		if err != nil {
			return err
		}
		parts = append(parts, s3types.CompletedPart{PartNumber: aws.Int32(i), ETag: aws.String(strings.Trim(aws.ToString(res.ETag), `"`))})
	}
	_, err = c.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{Bucket: aws.String(bucket), Key: aws.String(key), UploadId: up.UploadId,
		MultipartUpload: &s3types.CompletedMultipartUpload{Parts: parts}})
	return err
}
