// Command worker measures what one job costs the worker process: the real
// worker binary drains -jobs queued jobs of -clip-seconds recordings from
// the local SQS+S3 emulator into four fake Triton partitions with no
// model latency (real gRPC, dynamic batching), through a proxy that counts
// every SQS and S3 request and every TCP connection the worker opens.
//
// It reads the worker's CPU time (user+sys) and peak RSS (VmHWM) from
// /proc for the worker process alone, so the emulator's cost is not in
// them, and prices the requests at the AWS list prices of us-east-1 (SQS
// standard $0.40 per million requests; S3 Standard PUT/POST/LIST
// $5 per million, GET/HEAD $0.40 per million, DELETE free). The minimum a
// job can cost is one PUT (the transcript), one GET (the audio) and a
// tenth of a ReceiveMessage and of a DeleteMessageBatch. -worker-cpus
// runs the worker on some CPUs only, as on a GPU instance of that many
// vCPUs (its CPU per job grows with the CPUs it may spin on). Last line:
//
//	RESULT jobs=N jobs_per_s=X worker_cpu_ms_per_job=X peak_rss_mib=X usd_per_million_jobs=X ...
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/procstat"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
)

func main() {
	var o options
	flag.IntVar(&o.jobs, "jobs", 10_000, "jobs queued")
	flag.Float64Var(&o.clipSeconds, "clip-seconds", 10, "length of each recording (16 kHz mono 16-bit WAV)")
	flag.IntVar(&o.concurrency, "concurrency", 32, "the worker's -concurrency")
	flag.IntVar(&o.partitions, "partitions", 4, "fake Triton partitions")
	flag.StringVar(&o.workerBin, "worker-bin", "bin/worker", "the worker binary")
	flag.StringVar(&o.extra, "worker-args", "", "further worker flags, space-separated")
	flag.DurationVar(&o.latency, "partition-latency", 0, "each fake partition's latency per request (0: none, to measure the worker alone)")
	flag.BoolVar(&o.bulk, "bulk-queue", false, "half the jobs go to a second queue the worker drains after the first (-lower-queue-urls), as live uploads and a backfill at once")
	flag.StringVar(&o.cpus, "worker-cpus", "", "run the worker on these CPUs only (a list as taskset takes it: \"0-3\" for a g6e.xlarge's 4 vCPUs); empty: on all of this machine's")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench-worker:", err)
		os.Exit(1)
	}
}

type options struct {
	jobs, concurrency, partitions int
	clipSeconds                   float64
	workerBin, extra, cpus        string
	bulk                          bool
	latency                       time.Duration
	ncpu                          int // CPUs the worker may run on
}

// Prices per request, us-east-1 list prices.
const (
	priceSQS       = 0.40 / 1e6
	priceS3Write   = 5.0 / 1e6 // PUT, COPY, POST, LIST
	priceS3Read    = 0.40 / 1e6
	priceS3Delete  = 0
	inBucket       = "bench-in"
	outBucket      = "bench-out"
	transcriptsDir = "transcripts/"
)

func run(o options) error {
	ctx := context.Background()
	bin, err := filepath.Abs(o.workerBin)
	if err != nil {
		return err
	}
	cpus, err := parseCPUList(o.cpus)
	if err != nil {
		return err
	}
	o.ncpu = len(cpus)
	if o.ncpu == 0 {
		o.ncpu = runtime.NumCPU()
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("worker binary: %w (make build)", err)
	}
	emu, err := localaws.Start(ctx)
	if err != nil {
		return err
	}
	defer emu.Stop()
	sqsc, s3c := emu.Clients()
	q, err := emu.Provision(ctx, "bench-jobs", 5, inBucket, outBucket)
	if err != nil {
		return err
	}

	var addrs []string
	for range o.partitions {
		s, err := tritontest.Listen("127.0.0.1:0", triton.DefaultModelIO())
		if err != nil {
			return err
		}
		defer s.Close()
		s.SetLatency(o.latency)
		addrs = append(addrs, s.Addr)
	}

	bulkURL := ""
	if o.bulk {
		bq, err := localaws.CreateQueue(ctx, sqsc, "bench-bulk", 5, 30*time.Second)
		if err != nil {
			return err
		}
		bulkURL = bq.URL
	}
	fmt.Printf("preparing %d recordings of %.0f s and %d jobs...\n", o.jobs, o.clipSeconds, o.jobs)
	if err := prepare(ctx, s3c, sqsc, q.URL, bulkURL, o); err != nil {
		return err
	}

	proxy, err := newCountingProxy(emu.Endpoint)
	if err != nil {
		return err
	}
	defer proxy.Close()

	args := []string{
		"-queue-url", q.URL, "-output-bucket", outBucket, "-input-buckets", inBucket, "-aws-endpoint", proxy.URL,
		"-triton-addrs", strings.Join(addrs, ","), "-concurrency", strconv.Itoa(o.concurrency),
		"-metrics-addr", "", "-imds", "off", "-log-level", "warn", "-wait-time", "1s",
	}
	if o.bulk {
		args = append(args, "-lower-queue-urls", bulkURL)
	}
	args = append(args, strings.Fields(o.extra)...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	start := time.Now()
	if err := startOn(cmd, cpus); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid

	// Drained: nothing visible or in flight, and every transcript there.
	var elapsed time.Duration
	var cpu, sys time.Duration
	var hwm, faults int64
	for {
		select {
		case err := <-exited:
			return fmt.Errorf("worker exited early: %v", err)
		case <-time.After(200 * time.Millisecond):
		}
		v, f, err := localaws.Depth(ctx, sqsc, q.URL)
		if err != nil {
			return err
		}
		if bulkURL != "" {
			bv, bf, err := localaws.Depth(ctx, sqsc, bulkURL)
			if err != nil {
				return err
			}
			v, f = v+bv, f+bf
		}
		if v+f == 0 {
			// Read the worker's own counters before anything else runs.
			elapsed = time.Since(start)
			var user time.Duration
			if user, sys, err = procstat.CPU(pid); err != nil {
				return err
			}
			cpu = user + sys
			if hwm, err = procstat.PeakRSS(pid); err != nil {
				return err
			}
			if faults, err = procstat.MinorFaults(pid); err != nil {
				return err
			}
			break
		}
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	<-exited

	written, err := countObjects(ctx, s3c, outBucket, transcriptsDir)
	if err != nil {
		return err
	}
	counts, conns := proxy.Snapshot()
	return report(o, elapsed, cpu, sys, hwm, faults, written, counts, conns)
}

// prepare uploads the recordings (distinct keys, one shared body) and
// queues one job each; with bulkURL, every other job goes to that queue.
func prepare(ctx context.Context, s3c *s3.Client, sqsc *sqs.Client, queueURL, bulkURL string, o options) error {
	n := int(o.clipSeconds * modelspec.SampleRate)
	samples := make([]float32, n)
	for i := range samples {
		// Speech-like: a tone in bursts with pauses between.
		if (i/8000)%3 != 2 {
			samples[i] = 0.3 * float32(math.Sin(2*math.Pi*220*float64(i)/modelspec.SampleRate))
		}
	}
	body := audio.EncodeWAV(audio.Clip{Rate: modelspec.SampleRate, Samples: samples})
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(32)
	for i := range o.jobs {
		g.Go(func() error {
			_, err := s3c.PutObject(gctx, &s3.PutObjectInput{Bucket: aws.String(inBucket), Key: aws.String(key(i)), Body: bytes.NewReader(body)})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("upload: %w", err)
	}
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(16)
	for start := 0; start < o.jobs; start += 10 {
		url := queueURL
		if bulkURL != "" && (start/10)%2 == 1 {
			url = bulkURL
		}
		g.Go(func() error {
			var entries []types.SendMessageBatchRequestEntry
			for i := start; i < min(start+10, o.jobs); i++ {
				b, err := contract.Job{Bucket: inBucket, Key: key(i)}.Encode()
				if err != nil {
					return err
				}
				entries = append(entries, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(b))})
			}
			out, err := sqsc.SendMessageBatch(gctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
			if err == nil && len(out.Failed) > 0 {
				err = fmt.Errorf("%d entries failed", len(out.Failed))
			}
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return fmt.Errorf("enqueue: %w", err)
	}
	return nil
}

func key(i int) string { return fmt.Sprintf("calls/2026/11/30/rec-%06d.wav", i) }

func countObjects(ctx context.Context, c *s3.Client, bucket, prefix string) (int, error) {
	n := 0
	p := s3.NewListObjectsV2Paginator(c, &s3.ListObjectsV2Input{Bucket: aws.String(bucket), Prefix: aws.String(prefix)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, o := range page.Contents {
			if strings.HasSuffix(aws.ToString(o.Key), ".json") && !strings.HasSuffix(aws.ToString(o.Key), ".error.json") {
				n++
			}
		}
	}
	return n, nil
}

// countingProxy forwards to the emulator and counts requests by API call
// and the TCP connections its clients open.
type countingProxy struct {
	URL   string
	srv   *http.Server
	conns atomic.Int64
	mu    sync.Mutex
	calls map[string]int
}

func newCountingProxy(target string) (*countingProxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.Transport = &http.Transport{MaxIdleConnsPerHost: 512, MaxIdleConns: 1024}
	rp.ErrorLog = nil
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &countingProxy{URL: "http://" + lis.Addr().String(), calls: map[string]int{}}
	p.srv = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p.mu.Lock()
			p.calls[callName(r)]++
			p.mu.Unlock()
			rp.ServeHTTP(w, r)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				p.conns.Add(1)
			}
		},
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = p.srv.Serve(lis) }()
	return p, nil
}

func (p *countingProxy) Close() { _ = p.srv.Close() }

func (p *countingProxy) Snapshot() (map[string]int, int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.calls {
		out[k] = v
	}
	return out, p.conns.Load()
}

// callName names a request: "sqs:ReceiveMessage", "s3:GET", "s3:LIST"...
func callName(r *http.Request) string {
	if t := r.Header.Get("X-Amz-Target"); t != "" {
		return "sqs:" + t[strings.LastIndexByte(t, '.')+1:]
	}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)
	if r.Method == http.MethodGet && (len(parts) < 2 || parts[1] == "") {
		return "s3:LIST"
	}
	return "s3:" + r.Method
}

func price(call string) float64 {
	switch {
	case strings.HasPrefix(call, "sqs:"):
		return priceSQS
	case call == "s3:PUT" || call == "s3:POST" || call == "s3:LIST":
		return priceS3Write
	case call == "s3:DELETE":
		return priceS3Delete
	default:
		return priceS3Read
	}
}

func report(o options, elapsed, cpu, sys time.Duration, hwm, faults int64, written int, counts map[string]int, conns int64) error {
	jobs := float64(o.jobs)
	where := fmt.Sprintf("all %d CPUs", o.ncpu)
	if o.cpus != "" {
		where = "CPUs " + o.cpus
	}
	fmt.Printf("\nworker: %d jobs of %.0f s at concurrency %d, %d partitions, on %s\n", o.jobs, o.clipSeconds, o.concurrency, o.partitions, where)
	fmt.Printf("  drained in %.1f s: %.0f jobs/s; transcripts written %d (lost %d)\n", elapsed.Seconds(), jobs/elapsed.Seconds(), written, o.jobs-written)
	fmt.Printf("  worker CPU %.1f s (%.1f s of it in the kernel: sockets): %.3f ms per job; peak RSS %.1f MiB\n", cpu.Seconds(), sys.Seconds(), float64(cpu.Microseconds())/1000/jobs, float64(hwm)/(1<<20))
	fmt.Printf("  page faults %d (%.1f per job: pages first touched, each zeroed by the kernel)\n", faults, float64(faults)/jobs)
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Strings(names)
	usd, sqsReq, s3Req := 0.0, 0, 0
	fmt.Printf("  %-34s %10s %10s %14s\n", "request", "count", "per job", "usd/M jobs")
	for _, k := range names {
		c := counts[k]
		cost := float64(c) * price(k) / jobs * 1e6
		usd += cost
		if strings.HasPrefix(k, "sqs:") {
			sqsReq += c
		} else {
			s3Req += c
		}
		fmt.Printf("  %-34s %10d %10.3f %14.3f\n", k, c, float64(c)/jobs, cost)
	}
	minimum := (priceS3Write + priceS3Read + 2*priceSQS/10) * 1e6
	fmt.Printf("  request cost %.2f usd per million jobs; minimum %.2f (one PUT, one GET, a tenth of a receive and of a batch delete): %.1f%% above\n", usd, minimum, 100*(usd/minimum-1))
	fmt.Printf("  TCP connections opened to SQS/S3: %d (%.1f per 1,000 jobs)\n", conns, float64(conns)*1000/jobs)
	fmt.Printf("RESULT jobs=%d jobs_per_s=%.0f worker_cpu_ms_per_job=%.3f worker_sys_ms_per_job=%.3f peak_rss_mib=%.1f usd_per_million_jobs=%.2f usd_min=%.2f sqs_requests_per_job=%.3f s3_requests_per_job=%.3f conns_per_1000_jobs=%.1f lost=%d worker_cpus=%d\n",
		o.jobs, jobs/elapsed.Seconds(), float64(cpu.Microseconds())/1000/jobs, float64(sys.Microseconds())/1000/jobs, float64(hwm)/(1<<20), usd, minimum,
		float64(sqsReq)/jobs, float64(s3Req)/jobs, float64(conns)*1000/jobs, o.jobs-written, o.ncpu)
	if written != o.jobs {
		return fmt.Errorf("%d transcripts for %d jobs", written, o.jobs)
	}
	return nil
}
