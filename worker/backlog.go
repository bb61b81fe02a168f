package worker

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// watchBacklog samples the depth of every queue the worker drains, and of
// each one's dead-letter queue, into gauges, so dashboards and alerts see
// the backlog and a growing DLQ without CloudWatch. One GetQueueAttributes
// per queue and DLQ per interval.
func (w *Worker) watchBacklog(ctx context.Context) {
	if w.cfg.Queues.StatsInterval <= 0 {
		return
	}
	t := time.NewTicker(w.cfg.Queues.StatsInterval)
	defer t.Stop()
	dlqs := map[string]string{} // queue URL → its DLQ's URL, once known
	for {
		for _, q := range w.queues {
			w.sampleQueue(ctx, q.url, dlqs)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) sampleQueue(ctx context.Context, url string, dlqs map[string]string) {
	name := queueName(url)
	out, err := w.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed, types.QueueAttributeNameRedrivePolicy,
	}})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Debug().Err(err).Str("queue", name).Msg("queue depth")
		}
		return
	}
	a := out.Attributes
	set := func(queue, state, v string) {
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			w.m.queueMessages.WithLabelValues(queue, state).Set(n)
		}
	}
	set(name, "visible", a[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	set(name, "inflight", a[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	set(name, "delayed", a[string(types.QueueAttributeNameApproximateNumberOfMessagesDelayed)])
	if _, ok := dlqs[url]; !ok {
		dlqs[url] = dlqURL(url, a[string(types.QueueAttributeNameRedrivePolicy)])
	}
	if d := dlqs[url]; d != "" {
		dout, err := w.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(d), AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages,
		}})
		if err == nil {
			if n, err := strconv.ParseFloat(dout.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)], 64); err == nil {
				w.m.dlqMessages.WithLabelValues(name).Set(n)
			}
		}
	}
}

// queueName is the last segment of a queue URL.
func queueName(url string) string { return url[strings.LastIndexByte(url, '/')+1:] }

// dlqURL derives the URL of the DLQ a redrive policy names: SQS keeps a
// DLQ in its source queue's account and region, so only the name differs.
func dlqURL(queueURL, policy string) string {
	var p struct {
		Target string `json:"deadLetterTargetArn"`
	}
	if policy == "" || json.Unmarshal([]byte(policy), &p) != nil || p.Target == "" {
		return ""
	}
	return queueURL[:strings.LastIndexByte(queueURL, '/')+1] + p.Target[strings.LastIndexByte(p.Target, ':')+1:]
}
