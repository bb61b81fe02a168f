package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
	"github.com/fleetscribe/fleetscribe/worker"
)

// SQSAPI is the SQS call enqueue makes.
type SQSAPI interface {
	SendMessageBatch(ctx context.Context, params *sqs.SendMessageBatchInput, optFns ...func(*sqs.Options)) (*sqs.SendMessageBatchOutput, error)
}

// S3API is the S3 call enqueue makes.
type S3API interface {
	ListObjectsV2(ctx context.Context, params *s3.ListObjectsV2Input, optFns ...func(*s3.Options)) (*s3.ListObjectsV2Output, error)
}

// Options say what to send where.
type Options struct {
	QueueURL string
	Bucket   string
	Prefix   string
	Suffix   string
	Template worker.Job // fields copied into every job
	Attempts int
	DryRun   bool
}

// Stats count what Run did.
type Stats struct {
	Sent, Calls, Retried, Failed int
}

// KeySource calls yield for each key, in order, and stops early when yield
// returns an error.
type KeySource func(ctx context.Context, yield func(key string) error) error

// SliceKeys is a KeySource over fixed keys.
func SliceKeys(keys []string) KeySource {
	return func(_ context.Context, yield func(string) error) error {
		for _, k := range keys {
			if err := yield(k); err != nil {
				return err
			}
		}
		return nil
	}
}

// Enqueuer sends jobs in batches of ten.
type Enqueuer struct {
	SQS   SQSAPI
	S3    S3API
	Opts  Options
	Log   io.Writer
	Sleep func(context.Context, time.Duration) error // nil: a real timer
}

// ListKeys is a KeySource over every object under Opts.Prefix with
// Opts.Suffix, page by page, so archives of any size stream through.
func (e *Enqueuer) ListKeys(ctx context.Context, yield func(string) error) error {
	p := s3.NewListObjectsV2Paginator(e.S3, &s3.ListObjectsV2Input{Bucket: aws.String(e.Opts.Bucket), Prefix: aws.String(e.Opts.Prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("list s3://%s/%s: %w", e.Opts.Bucket, e.Opts.Prefix, err)
		}
		for _, o := range page.Contents {
			k := aws.ToString(o.Key)
			if strings.HasSuffix(k, "/") || !strings.HasSuffix(k, e.Opts.Suffix) {
				continue
			}
			if err := yield(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// Run sends one job per key from src.
func (e *Enqueuer) Run(ctx context.Context, src KeySource) (Stats, error) {
	var (
		st    Stats
		batch []types.SendMessageBatchRequestEntry
	)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		err := e.sendBatch(ctx, batch, &st)
		batch = batch[:0]
		return err
	}
	err := src(ctx, func(key string) error {
		job := e.Opts.Template
		job.V, job.Bucket, job.Key = worker.JobVersion, e.Opts.Bucket, key
		body, err := job.Encode()
		if err != nil {
			return fmt.Errorf("key %q: %w", key, err)
		}
		if e.Opts.DryRun {
			fmt.Fprintln(e.Log, string(body))
			return nil
		}
		batch = append(batch, types.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(len(batch))), MessageBody: aws.String(string(body)),
		})
		if len(batch) == 10 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return st, err
	}
	return st, flush()
}

// sendBatch sends up to ten entries, retrying the entries the queue
// refused (and whole calls that failed) with exponential backoff.
func (e *Enqueuer) sendBatch(ctx context.Context, entries []types.SendMessageBatchRequestEntry, st *Stats) error {
	pending := append([]types.SendMessageBatchRequestEntry(nil), entries...)
	attempts := max(e.Opts.Attempts, 1)
	var lastErr string
	for try := 0; try < attempts && len(pending) > 0; try++ {
		if try > 0 {
			st.Retried += len(pending)
			if err := e.sleep(ctx, backoff.Delay(200*time.Millisecond, 15*time.Second, try)); err != nil {
				return err
			}
		}
		st.Calls++
		out, err := e.SQS.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(e.Opts.QueueURL), Entries: pending})
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			lastErr = err.Error()
			continue
		}
		st.Sent += len(out.Successful)
		failed := map[string]bool{}
		for _, f := range out.Failed {
			failed[aws.ToString(f.Id)] = true
			lastErr = aws.ToString(f.Code) + ": " + aws.ToString(f.Message)
			if f.SenderFault {
				// The entry itself is wrong; resending cannot help.
				st.Failed++
				delete(failed, aws.ToString(f.Id))
				fmt.Fprintf(e.Log, "entry rejected: %s\n", lastErr)
			}
		}
		next := pending[:0]
		for _, p := range pending {
			if failed[aws.ToString(p.Id)] {
				next = append(next, p)
			}
		}
		pending = next
	}
	if len(pending) > 0 {
		st.Failed += len(pending)
		fmt.Fprintf(e.Log, "%d entries not sent after %d attempts: %s\n", len(pending), attempts, lastErr)
	}
	return nil
}

func (e *Enqueuer) sleep(ctx context.Context, d time.Duration) error {
	if e.Sleep != nil {
		return e.Sleep(ctx, d)
	}
	return backoff.Sleep(ctx, d)
}
