package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	dto "github.com/prometheus/client_model/go"
)

// A run leaves each pipeline stage timed once per job, and the depth of
// the queue and of its DLQ (sampled from SQS) in gauges.
func TestMetricsTimeStagesAndSampleQueueDepths(t *testing.T) {
	e := newEnv(t, 1, 3)
	for i := range 3 {
		key := fmt.Sprintf("stage-%d.wav", i)
		e.put(key, tone(16000, 16000))
		e.sendJob(key)
	}
	for range 2 {
		if _, err := e.sqs.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: aws.String(e.queue.DLQURL), MessageBody: aws.String("{}")}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.config()
	cfg.Queues.StatsInterval = 20 * time.Millisecond
	e.run(cfg, nil)

	families := map[string]*dto.MetricFamily{}
	mfs, err := e.wreg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		families[mf.GetName()] = mf
	}
	stages := map[string]uint64{}
	for _, m := range families["fleetscribe_stage_seconds"].GetMetric() {
		stages[m.GetLabel()[0].GetValue()] = m.GetHistogram().GetSampleCount()
	}
	for _, s := range []string{"fetch", "decode", "resample", "infer", "upload"} {
		if stages[s] != 3 {
			t.Errorf("stage %s timed %d times, want 3 (%v)", s, stages[s], stages)
		}
	}
	name := queueNameOf(e.queue.URL)
	var dlq float64 = -1
	for _, m := range families["fleetscribe_dlq_messages"].GetMetric() {
		if m.GetLabel()[0].GetValue() == name {
			dlq = m.GetGauge().GetValue()
		}
	}
	if dlq != 2 {
		t.Errorf("fleetscribe_dlq_messages{queue=%q} = %v, want 2", name, dlq)
	}
	states := map[string]bool{}
	for _, m := range families["fleetscribe_queue_messages"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "state" {
				states[l.GetValue()] = true
			}
		}
	}
	if !states["visible"] || !states["inflight"] || !states["delayed"] {
		t.Errorf("queue depth states %v", states)
	}
}

func queueNameOf(url string) string {
	for i := len(url) - 1; i >= 0; i-- {
		if url[i] == '/' {
			return url[i+1:]
		}
	}
	return url
}
