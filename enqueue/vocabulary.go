package enqueue

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
)

// VocabularyS3 is what the vocabulary commands ask of S3.
type VocabularyS3 interface {
	S3API
	PutObject(ctx context.Context, params *s3.PutObjectInput, optFns ...func(*s3.Options)) (*s3.PutObjectOutput, error)
	GetObject(ctx context.Context, params *s3.GetObjectInput, optFns ...func(*s3.Options)) (*s3.GetObjectOutput, error)
	DeleteObject(ctx context.Context, params *s3.DeleteObjectInput, optFns ...func(*s3.Options)) (*s3.DeleteObjectOutput, error)
}

// ReadPhrases reads a vocabulary's phrases, one a line (blank lines and
// lines starting with '#' left out), as Transcribe's phrase lists are.
func ReadPhrases(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	return out, sc.Err()
}

// CreateVocabulary checks phrases (contract.CheckPhrases, up to
// contract.MaxPhrases) and writes them as the vocabulary name in the
// worker's output bucket (contract.VocabularyKey), replacing one of that
// name: jobs read within a minute of it get the new phrases. It returns
// the key written.
func CreateVocabulary(ctx context.Context, api VocabularyS3, bucket, name string, phrases []string) (string, error) {
	if err := contract.CheckVocabularyName(name); err != nil {
		return "", err
	}
	if err := contract.CheckPhrases(phrases, contract.MaxPhrases); err != nil {
		return "", err
	}
	body, err := json.MarshalIndent(contract.StoredVocabulary{Name: name, Phrases: contract.NormalizePhrases(phrases)}, "", " ")
	if err != nil {
		return "", err
	}
	if len(body) > contract.MaxVocabularyBytes {
		return "", fmt.Errorf("vocabulary %q is %d bytes, limit %d", name, len(body), contract.MaxVocabularyBytes)
	}
	key := contract.VocabularyKey(name)
	_, err = api.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body), ContentType: aws.String("application/json")})
	if err != nil {
		return "", fmt.Errorf("write s3://%s/%s: %w", bucket, key, err)
	}
	return key, nil
}

// VocabularyInfo is a stored vocabulary as list shows it.
type VocabularyInfo struct {
	Name     string
	Phrases  int // -1: not a valid vocabulary (Problem says why)
	Bytes    int64
	Modified time.Time
	Problem  string
}

// ListVocabularies lists the output bucket's vocabularies, each read and
// checked as a worker would (an invalid one is listed with its problem).
func ListVocabularies(ctx context.Context, api VocabularyS3, bucket string) ([]VocabularyInfo, error) {
	var out []VocabularyInfo
	p := s3.NewListObjectsV2Paginator(api, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(contract.VocabularyPrefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("list s3://%s/%s: %w", bucket, contract.VocabularyPrefix, err)
		}
		for _, o := range page.Contents {
			name, ok := strings.CutSuffix(strings.TrimPrefix(aws.ToString(o.Key), contract.VocabularyPrefix), ".json")
			if !ok || strings.Contains(name, "/") {
				continue
			}
			info := VocabularyInfo{Name: name, Bytes: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified), Phrases: -1}
			if sv, err := GetVocabulary(ctx, api, bucket, name); err != nil {
				info.Problem = err.Error()
			} else {
				info.Phrases = len(sv.Phrases)
			}
			out = append(out, info)
		}
	}
	return out, nil
}

// GetVocabulary reads and checks the vocabulary name.
func GetVocabulary(ctx context.Context, api VocabularyS3, bucket, name string) (contract.StoredVocabulary, error) {
	if err := contract.CheckVocabularyName(name); err != nil {
		return contract.StoredVocabulary{}, err
	}
	key := contract.VocabularyKey(name)
	out, err := api.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		if s3errs.ObjectNotFound(err) {
			return contract.StoredVocabulary{}, fmt.Errorf("vocabulary %q does not exist (s3://%s/%s)", name, bucket, key)
		}
		return contract.StoredVocabulary{}, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	defer func() { _ = out.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(out.Body, contract.MaxVocabularyBytes+1))
	if err != nil {
		return contract.StoredVocabulary{}, fmt.Errorf("read s3://%s/%s: %w", bucket, key, err)
	}
	return contract.ParseStoredVocabulary(name, b)
}

// DeleteVocabulary removes the vocabulary name; jobs that name it after
// that get bad_vocabulary records (a worker may use its copy up to a
// minute longer).
func DeleteVocabulary(ctx context.Context, api VocabularyS3, bucket, name string) error {
	if _, err := GetVocabulary(ctx, api, bucket, name); err != nil {
		return err
	}
	_, err := api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(contract.VocabularyKey(name))})
	return err
}
