// Command longform measures one long recording through the worker with
// one Triton partition and with four: a 60-minute recording (16 kHz WAV,
// speech-like bursts with pauses) cut into chunks at its pauses, sent in
// parallel, batched by each partition's dynamic batcher, and stitched.
// The partitions are the project's KServe v2 server with a latency model
// of a GPU partition (a batch costs a fixed launch time plus a time per
// row, one batch at a time), so the comparison is of the worker's fan-out,
// not of a model. It uploads through the local emulator (in parts: the
// emulator refuses single uploads past about 11 MiB) and times the job
// from its message to its transcript. Last line: RESULT speedup=X ...
package main

import (
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

func main() {
	minutes := flag.Float64("minutes", 60, "length of the recording")
	launch := flag.Duration("batch-fixed", 30*time.Millisecond, "latency model: fixed time of one batch")
	perRow := flag.Duration("per-row", 80*time.Millisecond, "latency model: time per 30 s row of a batch (a quarter of a GPU)")
	var defaults worker.Config
	defaults.RegisterFlags(flag.NewFlagSet("worker", flag.ContinueOnError))
	parallel := flag.Int("chunk-parallelism", defaults.Audio.ChunkParallelism, "the worker's -chunk-parallelism (default: the worker's)")
	flag.Parse()
	if err := run(*minutes, *launch, *perRow, *parallel); err != nil {
		fmt.Fprintln(os.Stderr, "bench-longform:", err)
		os.Exit(1)
	}
}

// gpuModel is a partition's model: a batch takes fixed + perRow for each
// row (scaled by its length against 30 s), one batch at a time. It runs in
// real Triton Inference Server, as model.py's echo engine.
type gpuModel struct{ fixed, perRow time.Duration }

func run(minutes float64, fixed, perRow time.Duration, parallel int) error {
	ctx := context.Background()
	emu, err := localaws.Start(ctx)
	if err != nil {
		return err
	}
	defer emu.Stop()
	sqsc, s3c := emu.Clients()
	wav := recording(minutes)
	fmt.Printf("%.0f-minute recording, %.0f MB; latency model: %v a batch + %v per 30 s row; chunk parallelism %d\n",
		minutes, float64(len(wav))/1e6, fixed, perRow, parallel)
	var times []time.Duration
	var stats []triton.ServerStats
	for i, n := range []int{1, 4} {
		q, err := emu.Provision(ctx, fmt.Sprintf("longform-%d", i), 3, fmt.Sprintf("lf-in-%d", i), fmt.Sprintf("lf-out-%d", i))
		if err != nil {
			return err
		}
		in, out := fmt.Sprintf("lf-in-%d", i), fmt.Sprintf("lf-out-%d", i)
		if err := localaws.Upload(ctx, s3c, in, "call.wav", wav); err != nil {
			return err
		}
		d, bs, err := once(ctx, sqsc, s3c, q.URL, in, out, n, gpuModel{fixed, perRow}, parallel)
		if err != nil {
			return err
		}
		times, stats = append(times, d), append(stats, bs)
		fmt.Printf("  %d partition(s): %.2f s from message to transcript; %d batches, mean %.1f rows\n", n, d.Seconds(), bs.Executions, float64(bs.Rows)/float64(max(bs.Executions, 1)))
	}
	speedup := times[0].Seconds() / times[1].Seconds()
	fmt.Printf("RESULT speedup=%.2f one_partition_s=%.2f four_partitions_s=%.2f minutes=%.0f\n", speedup, times[0].Seconds(), times[1].Seconds(), minutes)
	return nil
}

// once runs one job through a worker with n partitions and returns the
// time from the message to the transcript.
func once(ctx context.Context, sqsc *sqs.Client, s3c *s3.Client, queueURL, in, out string, n int, model gpuModel, parallel int) (time.Duration, triton.ServerStats, error) {
	dir, err := os.MkdirTemp("", "bench-longform-")
	if err != nil {
		return 0, triton.ServerStats{}, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	mcfg := tritonproc.Model("echo").WithMaxBatch(8).WithParameters(tritonproc.EchoDelays(model.fixed, model.perRow))
	mcfg.Batching.QueueTimeout = time.Hour
	if err := tritonproc.WriteRepo(dir, map[string]modelspec.Config{"asr": mcfg}); err != nil {
		return 0, triton.ServerStats{}, err
	}
	var addrs []string
	var servers []*tritonproc.Server
	defer func() {
		for _, s := range servers {
			s.Stop(5 * time.Second)
		}
	}()
	for range n {
		srv, err := tritonproc.Start(ctx, tritonproc.Options{Repo: dir})
		if err != nil {
			return 0, triton.ServerStats{}, err
		}
		servers = append(servers, srv)
		addrs = append(addrs, srv.Addr)
	}
	pool, err := triton.NewPool(triton.PoolConfig{Addrs: addrs, MaxInflight: 48, RequestTimeout: time.Minute, Attempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: time.Second, EjectAfter: 3, HealthInterval: time.Second}, triton.DefaultModelIO(), prometheus.NewRegistry())
	if err != nil {
		return 0, triton.ServerStats{}, err
	}
	defer pool.Close()
	if err := pool.WaitReady(ctx); err != nil {
		return 0, triton.ServerStats{}, err
	}
	cfg := worker.Config{
		Queues:  worker.QueueConfig{URL: queueURL, WaitTime: time.Second, VisibilityTimeout: time.Minute, MaxReceives: 3, RetryBackoff: time.Second, StatsInterval: time.Hour},
		Jobs:    worker.JobConfig{Concurrency: 1, Timeout: 10 * time.Minute, DrainTimeout: time.Minute, MemoryBudget: 4 << 30, ExitWhenIdle: time.Second},
		Inputs:  worker.InputConfig{Buckets: []string{in}, MaxObjectBytes: 1 << 30, MaxAudioSeconds: 4 * 3600},
		Outputs: worker.OutputConfig{Bucket: out, Prefix: "transcripts/"},
		Audio:   worker.AudioConfig{ChunkSeconds: 30, ChunkParallelism: parallel, Timestamps: false},
	}
	reg := prometheus.NewRegistry()
	w, err := worker.New(cfg, worker.Deps{Model: "asr", SQS: sqsc, S3: s3c, Transcriber: pool, Log: zerolog.New(io.Discard), Metrics: reg})
	if err != nil {
		return 0, triton.ServerStats{}, err
	}
	body, _ := contract.Job{Bucket: in, Key: "call.wav"}.Encode()
	start := time.Now()
	if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queueURL), MessageBody: aws.String(string(body))}); err != nil {
		return 0, triton.ServerStats{}, err
	}
	done := make(chan time.Duration, 1)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		for pctx.Err() == nil {
			res, err := s3c.ListObjectsV2(pctx, &s3.ListObjectsV2Input{Bucket: aws.String(out), Prefix: aws.String("transcripts/")})
			if err == nil {
				for _, o := range res.Contents {
					if k := aws.ToString(o.Key); strings.HasSuffix(k, ".json") && !strings.HasSuffix(k, ".error.json") {
						done <- time.Since(start)
						return
					}
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	if err := w.Run(ctx); err != nil {
		return 0, triton.ServerStats{}, err
	}
	if mfs, err := reg.Gather(); err == nil {
		for _, mf := range mfs {
			if mf.GetName() == "fleetscribe_stage_seconds" {
				var parts []string
				for _, m := range mf.GetMetric() {
					parts = append(parts, fmt.Sprintf("%s %.2fs", m.GetLabel()[0].GetValue(), m.GetHistogram().GetSampleSum()))
				}
				fmt.Printf("    stages: %s\n", strings.Join(parts, ", "))
			}
		}
	}
	var stats triton.ServerStats
	for _, a := range addrs {
		c, err := triton.Dial(a, triton.DefaultModelIO())
		if err != nil {
			return 0, stats, err
		}
		st, err := c.Statistics(ctx)
		_ = c.Close()
		if err != nil {
			return 0, stats, err
		}
		stats.Executions += st.Executions
		stats.Rows += st.Rows
	}
	select {
	case d := <-done:
		return d, stats, nil
	case <-time.After(10 * time.Second):
		return 0, stats, fmt.Errorf("no transcript with %d partitions", n)
	}
}

const rate = modelspec.SampleRate

// recording is a 16-bit mono WAV at the model's rate (no resampling) of
// speech-like bursts (2-9 s) with pauses between (0.3-1.2 s), as a long call has.
func recording(minutes float64) []byte {
	n := int(minutes * 60 * rate)
	pcm := make([]byte, 44+2*n)
	copy(pcm, "RIFF")
	binary.LittleEndian.PutUint32(pcm[4:], uint32(36+2*n))
	copy(pcm[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(pcm[16:], 16)
	binary.LittleEndian.PutUint16(pcm[20:], 1)
	binary.LittleEndian.PutUint16(pcm[22:], 1)
	binary.LittleEndian.PutUint32(pcm[24:], rate)
	binary.LittleEndian.PutUint32(pcm[28:], 2*rate)
	binary.LittleEndian.PutUint16(pcm[32:], 2)
	binary.LittleEndian.PutUint16(pcm[34:], 16)
	copy(pcm[36:], "data")
	binary.LittleEndian.PutUint32(pcm[40:], uint32(2*n))
	seed := uint32(1)
	rnd := func() float64 { seed = seed*1664525 + 1013904223; return float64(seed>>8) / float64(1<<24) }
	for i := 0; i < n; {
		burst := int((2 + 7*rnd()) * rate)
		for j := 0; j < burst && i < n; j, i = j+1, i+1 {
			v := 0.3 * math.Sin(2*math.Pi*(200+100*math.Sin(float64(i)/(rate/2)))*float64(i)/rate)
			binary.LittleEndian.PutUint16(pcm[44+2*i:], uint16(int16(v*32767)))
		}
		i += int((0.3 + 0.9*rnd()) * rate) // a pause: zeros
	}
	return pcm
}
