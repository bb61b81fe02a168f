package enqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// StatusSQS is the SQS calls Status makes; all of them read only.
type StatusSQS interface {
	GetQueueAttributes(ctx context.Context, params *sqs.GetQueueAttributesInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueAttributesOutput, error)
	GetQueueUrl(ctx context.Context, params *sqs.GetQueueUrlInput, optFns ...func(*sqs.Options)) (*sqs.GetQueueUrlOutput, error)
}

// OldestAge returns the age of the oldest message of the queue named
// name (CloudWatch's ApproximateAgeOfOldestMessage); ok is false where it
// is not known. SQS itself has no read-only way to tell.
type OldestAge func(ctx context.Context, name string) (age time.Duration, ok bool)

// QueueStatus is one queue's state.
type QueueStatus struct {
	Name                       string
	URL                        string
	DLQ                        bool
	Visible, InFlight, Delayed int64
	Oldest                     time.Duration // -1: unknown
	// DrainPerSec is how fast the backlog (visible + in flight + delayed)
	// shrank over the sampling window; negative when it grew.
	DrainPerSec float64
	ETA         time.Duration // -1: not draining
}

// Backlog is every message the queue holds.
func (q QueueStatus) Backlog() int64 { return q.Visible + q.InFlight + q.Delayed }

// Status reads each queue, and its dead-letter queue, twice, window
// apart, to measure the drain rate and the time left.
func Status(ctx context.Context, api StatusSQS, urls []string, window time.Duration, age OldestAge) ([]QueueStatus, error) {
	var all []QueueStatus
	for _, u := range urls {
		q, dlq, err := readQueue(ctx, api, u, false)
		if err != nil {
			return nil, err
		}
		all = append(all, q)
		if dlq != "" {
			d, _, err := readQueue(ctx, api, dlq, true)
			if err != nil {
				return nil, err
			}
			all = append(all, d)
		}
	}
	start := time.Now()
	if window > 0 {
		if err := backoff.Sleep(ctx, window); err != nil {
			return nil, err
		}
	}
	elapsed := time.Since(start).Seconds()
	for i := range all {
		q := &all[i]
		q.ETA = -1
		q.Oldest = -1
		if age != nil {
			if a, ok := age(ctx, q.Name); ok {
				q.Oldest = a
			}
		}
		if window <= 0 {
			continue
		}
		before := q.Backlog()
		now, _, err := readQueue(ctx, api, q.URL, q.DLQ)
		if err != nil {
			return nil, err
		}
		q.Visible, q.InFlight, q.Delayed = now.Visible, now.InFlight, now.Delayed
		q.DrainPerSec = float64(before-q.Backlog()) / elapsed
		if q.DrainPerSec > 0 {
			q.ETA = time.Duration(float64(q.Backlog()) / q.DrainPerSec * float64(time.Second))
		}
	}
	return all, nil
}

func readQueue(ctx context.Context, api StatusSQS, url string, dlq bool) (QueueStatus, string, error) {
	out, err := api.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
	if err != nil {
		return QueueStatus{}, "", fmt.Errorf("read queue %s: %w", url, err)
	}
	a := out.Attributes
	n := func(k types.QueueAttributeName) int64 {
		v, _ := strconv.ParseInt(a[string(k)], 10, 64)
		return v
	}
	q := QueueStatus{
		URL: url, DLQ: dlq, Name: url[strings.LastIndexByte(url, '/')+1:],
		Visible:  n(types.QueueAttributeNameApproximateNumberOfMessages),
		InFlight: n(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible),
		Delayed:  n(types.QueueAttributeNameApproximateNumberOfMessagesDelayed),
	}
	var dlqURL string
	if rp := a[string(types.QueueAttributeNameRedrivePolicy)]; rp != "" && !dlq {
		var p struct {
			Target string `json:"deadLetterTargetArn"`
		}
		if json.Unmarshal([]byte(rp), &p) == nil && p.Target != "" {
			// arn:aws:sqs:region:account:name
			parts := strings.Split(p.Target, ":")
			in := &sqs.GetQueueUrlInput{QueueName: aws.String(parts[len(parts)-1])}
			if len(parts) == 6 && parts[4] != "" {
				in.QueueOwnerAWSAccountId = aws.String(parts[4])
			}
			u, err := api.GetQueueUrl(ctx, in)
			if err != nil {
				return QueueStatus{}, "", fmt.Errorf("find the DLQ of %s: %w", url, err)
			}
			dlqURL = aws.ToString(u.QueueUrl)
		}
	}
	return q, dlqURL, nil
}

// WriteStatus prints queues as a table.
func WriteStatus(w io.Writer, qs []QueueStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tVISIBLE\tIN FLIGHT\tDELAYED\tOLDEST\tDRAIN/S\tETA\t")
	for _, q := range qs {
		name := q.Name
		if q.DLQ {
			name = "  dlq " + name
		}
		oldest, eta := "?", "-"
		if q.Oldest >= 0 {
			oldest = q.Oldest.Round(time.Second).String()
		}
		if q.ETA >= 0 {
			eta = q.ETA.Round(time.Second).String()
		} else if q.Backlog() == 0 {
			eta = "empty"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%.1f\t%s\t\n", name, q.Visible, q.InFlight, q.Delayed, oldest, q.DrainPerSec, eta)
	}
	return tw.Flush()
}
