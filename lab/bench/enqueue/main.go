// Command enqueue measures enqueue at archive scale against the local
// SQS+S3 emulator: it fills a bucket with -keys recordings under -folders
// prefixes, writes transcripts for -done of them where the worker would,
// then runs, each from the same state:
//
//   - listing alone (a dry run: parallel listing over sub-prefixes);
//   - listing with the skip check, once per check mode (list, head);
//   - the whole run: list, skip-check and send to the queue;
//   - a naive serial loop as a throwaway script would do it (list a page,
//     HeadObject each transcript key, SendMessage one by one) over the
//     first -naive-keys keys;
//   - the emulator's own ceiling: SendMessageBatch of ready bodies from
//     as many goroutines as enqueue uses.
//
// It prints keys per second for each, the peak Go heap of the whole run,
// and ends with a RESULT line.
package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/enqueue"
	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
)

func main() {
	keys := flag.Int("keys", 100_000, "recordings in the archive")
	folders := flag.Int("folders", 100, "sub-prefixes they are spread over (days, say)")
	doneFrac := flag.Float64("done", 0.25, "fraction already transcribed")
	naiveKeys := flag.Int("naive-keys", 5_000, "keys the naive serial loop runs over")
	flag.Parse()
	if err := run(*keys, *folders, *doneFrac, *naiveKeys); err != nil {
		fmt.Fprintln(os.Stderr, "bench-enqueue:", err)
		os.Exit(1)
	}
}

const (
	inBucket  = "archive"
	outBucket = "transcripts"
	model     = "asr"
	prefix    = "transcripts/"
	body      = "RIFF....WAVE"
	conns     = 64
)

func run(nKeys, folders int, doneFrac float64, naiveKeys int) error {
	ctx := context.Background()
	emu, err := localaws.Start(ctx)
	if err != nil {
		return err
	}
	defer emu.Stop()
	cfg := aws.Config{
		Region: "us-east-1", Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
		HTTPClient: awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) { t.MaxIdleConnsPerHost = conns }),
	}
	sqsc, s3c, _ := awsconf.Local(cfg, emu.Endpoint)
	q, err := emu.Provision(ctx, "bulk", 5, inBucket, outBucket)
	if err != nil {
		return err
	}

	fmt.Printf("filling the archive: %d keys in %d folders, %.0f%% transcribed\n", nKeys, folders, 100*doneFrac)
	t0 := time.Now()
	sum := md5.Sum([]byte(body))
	etag := hex.EncodeToString(sum[:])
	all := make([]string, nKeys)
	for i := range all {
		all[i] = fmt.Sprintf("calls/2025-%03d/rec-%07d.wav", i%folders, i)
	}
	// The same share of every folder is done, spread through it.
	var doneKeys []string
	for i, k := range all {
		// The n-th file of its folder is done when n*frac crosses an integer.
		if n := float64(i / folders); int((n+1)*doneFrac) != int(n*doneFrac) {
			doneKeys = append(doneKeys, k)
		}
	}
	done := len(doneKeys)
	if err := parallel(ctx, nKeys+done, func(i int) error {
		if i < nKeys {
			_, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(inBucket), Key: aws.String(all[i]), Body: strings.NewReader(body)})
			return err
		}
		k := doneKeys[i-nKeys]
		out := contract.KeysFor(prefix, contract.InputRef{Bucket: inBucket, Key: k, ETag: etag}, model).JSON
		_, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(outBucket), Key: aws.String(out), Body: strings.NewReader("{}")})
		return err
	}); err != nil {
		return err
	}
	h, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(inBucket), Key: aws.String(all[0])})
	if err != nil || strings.Trim(aws.ToString(h.ETag), `"`) != etag {
		return fmt.Errorf("emulator ETag %v is not the MD5 of the body (%v)", aws.ToString(h.ETag), err)
	}
	fmt.Printf("  %d objects in %.1f s\n\n", nKeys+done, time.Since(t0).Seconds())

	base := enqueue.Defaults()
	base.QueueURL = q.URL
	base.Sources = enqueue.Sources{Bucket: inBucket, Prefixes: []string{"calls/"}}
	base.OutputBucket, base.WorkerOutputPrefix, base.WorkerModel = outBucket, prefix, model
	base.ListConcurrency, base.CheckConcurrency, base.SendConcurrency = 16, 32, 16

	type result struct {
		name     string
		sum      enqueue.Summary
		keysPerS float64
	}
	measure := func(name string, o enqueue.Options) (result, error) {
		_, _ = sqsc.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(q.URL)})
		runtime.GC()
		s, err := enqueue.Run(ctx, s3c, sqsc, o)
		if err != nil {
			return result{}, fmt.Errorf("%s: %w", name, err)
		}
		r := result{name: name, sum: s, keysPerS: float64(s.Listed) / s.Elapsed.Seconds()}
		fmt.Printf("  %-34s %8.0f keys/s  (%s)\n", name, r.keysPerS, s)
		return r, nil
	}

	fmt.Println("enqueue (parallel listing over sub-prefixes, 16 lists, 32 checks, 16 sends in flight):")
	o := base
	o.DryRun = true
	list, err := measure("list only (dry run)", o)
	if err != nil {
		return err
	}
	o.SkipDone, o.CheckMode = true, enqueue.CheckList
	checkList, err := measure("list + skip check, list mode", o)
	if err != nil {
		return err
	}
	o.CheckMode = enqueue.CheckHead
	checkHead, err := measure("list + skip check, head mode", o)
	if err != nil {
		return err
	}
	o = base
	o.SkipDone, o.CheckMode = true, enqueue.CheckList
	var peak atomic.Uint64
	stop := sampleHeap(&peak)
	full, err := measure("list + skip check + send", o)
	stop()
	if err != nil {
		return err
	}
	sendPerS := float64(full.sum.Sent) / full.sum.Elapsed.Seconds()
	if full.sum.SkippedDone != int64(done) || full.sum.Sent != int64(nKeys-done) {
		return fmt.Errorf("full run skipped %d and sent %d; want %d and %d", full.sum.SkippedDone, full.sum.Sent, done, nKeys-done)
	}
	depth, _, err := localaws.Depth(ctx, sqsc, q.URL)
	if err != nil || depth != nKeys-done {
		return fmt.Errorf("queue holds %d messages, want %d (%v)", depth, nKeys-done, err)
	}

	fmt.Println()
	naive, naiveSent, err := naiveLoop(ctx, s3c, sqsc, q.URL, naiveKeys)
	if err != nil {
		return err
	}
	fmt.Printf("  %-34s %8.0f keys/s  (%d keys, %d sent, one call at a time)\n", "naive serial loop", naive, naiveKeys, naiveSent)
	ceiling, err := emulatorCeiling(ctx, sqsc, q.URL, 50_000)
	if err != nil {
		return err
	}
	fmt.Printf("  %-34s %8.0f msg/s  (SendMessageBatch of ready bodies, %d goroutines)\n\n", "emulator ceiling", ceiling, 16)

	speedup := full.keysPerS / naive
	fmt.Printf("whole run %.0f keys/s = %.1f× the naive loop; sends %.0f msg/s = %.0f%% of the emulator's ceiling; peak Go heap %.1f MiB\n",
		full.keysPerS, speedup, sendPerS, 100*sendPerS/ceiling, float64(peak.Load())/(1<<20))
	fmt.Printf("skip check: list mode %.0f keys/s, head mode %.0f keys/s (%.1f×): list is the default\n",
		checkList.keysPerS, checkHead.keysPerS, checkList.keysPerS/checkHead.keysPerS)
	fmt.Printf("RESULT keys=%d skipped=%d list_keys_per_s=%.0f check_keys_per_s=%.0f check_head_keys_per_s=%.0f send_keys_per_s=%.0f keys_per_s=%.0f naive_keys_per_s=%.0f speedup_vs_naive=%.1f emulator_ceiling_msg_per_s=%.0f peak_heap_mib=%.1f\n",
		nKeys, full.sum.SkippedDone, list.keysPerS, checkList.keysPerS, checkHead.keysPerS, sendPerS, full.keysPerS, naive, speedup, ceiling, float64(peak.Load())/(1<<20))
	return nil
}

// naiveLoop is the script people write first: list a page, HeadObject
// each transcript key, SendMessage each input not done, one at a time.
func naiveLoop(ctx context.Context, s3c *s3.Client, sqsc *sqs.Client, queue string, limit int) (float64, int, error) {
	start := time.Now()
	n, sent := 0, 0
	p := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String(inBucket), Prefix: aws.String("calls/")})
	for p.HasMorePages() && n < limit {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, 0, err
		}
		for _, obj := range page.Contents {
			if n == limit {
				break
			}
			n++
			k := aws.ToString(obj.Key)
			out := contract.KeysFor(prefix, contract.InputRef{Bucket: inBucket, Key: k, ETag: strings.Trim(aws.ToString(obj.ETag), `"`)}, model).JSON
			if _, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(outBucket), Key: aws.String(out)}); err == nil {
				continue
			}
			b, _ := contract.Job{Bucket: inBucket, Key: k}.Encode()
			if _, err := sqsc.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(queue), MessageBody: aws.String(string(b))}); err != nil {
				return 0, 0, err
			}
			sent++
		}
	}
	return float64(n) / time.Since(start).Seconds(), sent, nil
}

// emulatorCeiling sends n ready job bodies in batches of ten from 16
// goroutines: the most any sender could get from the emulator.
func emulatorCeiling(ctx context.Context, sqsc *sqs.Client, queue string, n int) (float64, error) {
	_, _ = sqsc.PurgeQueue(ctx, &sqs.PurgeQueueInput{QueueUrl: aws.String(queue)})
	b, _ := contract.Job{Bucket: inBucket, Key: "calls/2025-000/rec-0000000.wav"}.Encode()
	start := time.Now()
	var g errgroup.Group
	g.SetLimit(16)
	for i := 0; i < n; i += 10 {
		g.Go(func() error {
			e := make([]types.SendMessageBatchRequestEntry, 10)
			for j := range e {
				e[j] = types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint(j)), MessageBody: aws.String(string(b))}
			}
			_, err := sqsc.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(queue), Entries: e})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return 0, err
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func parallel(ctx context.Context, n int, fn func(int) error) error {
	g, _ := errgroup.WithContext(ctx)
	g.SetLimit(conns)
	for i := range n {
		g.Go(func() error { return fn(i) })
	}
	return g.Wait()
}

// sampleHeap records the peak in-use heap every 20 ms until stopped.
func sampleHeap(peak *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}
