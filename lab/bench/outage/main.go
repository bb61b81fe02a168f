// Command outage measures what a dependency outage costs the worker: the
// real worker binary drains a queue of short recordings from the local
// SQS+S3 server, through a proxy that takes a bucket down (404
// NoSuchBucket, 403 AccessDenied, 503 SlowDown) for a while, or with both
// real Triton partitions killed, or answering INTERNAL to every request,
// for a while, or with a fifth of the inputs refusing to be read (403 for
// the object, archived) while their bucket serves the rest; then it counts
// what a user would: receives spent beyond one per message, messages in
// the DLQ, error records, jobs with neither a transcript nor an error
// record, transcriptions computed twice, the most jobs held for a
// dependency at once, the time from the end of the outage to the next
// transcript, and SIGTERM to exit while jobs are held.
//
//	go run ./lab/bench/outage -worker-bin bin/worker [-outages 60s,180s] [-long 15m]
//
// It ends with a RESULT line.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/faultproxy"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

// kinds of outage, by name: a bucket's (the proxy answers every request
// for it so), triton (both partitions killed), triton-failing (both
// serving, answering INTERNAL to every request), objects-refused (no
// outage: a fifth of the inputs refuse to be read the whole run, half 403
// AccessDenied, half archived).
var kinds = map[string]faultproxy.Outage{
	"output-missing":  faultproxy.OutageMissing,
	"output-denied":   faultproxy.OutageDenied,
	"output-failing":  faultproxy.OutageFailing,
	"input-denied":    faultproxy.OutageDenied,
	"triton":          {},
	"triton-failing":  {},
	"objects-refused": {},
}

type row struct {
	kind        string
	outage      time.Duration
	jobs        int
	receives    int // beyond one per message
	dlq, lost   int
	recomputed  int
	resume      time.Duration // from the outage's end to the next transcript
	heldAtStart int           // messages in hand when the outage began
	records     int           // error records written
	heldMax     int           // most jobs waiting for a dependency at once
	sigterm     time.Duration // SIGTERM to exit, sent before the outage ends
}

func main() {
	workerBin := flag.String("worker-bin", "bin/worker", "the worker binary")
	outages := flag.String("outages", "60s,180s", "outage lengths run for every kind")
	long := flag.String("long", "15m", "a longer outage run for output-missing and triton (empty: none)")
	only := flag.String("kinds", "output-missing,output-denied,output-failing,input-denied,triton,triton-failing,objects-refused", "kinds of outage")
	jobs := flag.Int("jobs", 20, "recordings per run")
	flag.Parse()
	bin, err := filepath.Abs(*workerBin)
	if err != nil {
		fail(err)
	}
	type plan struct {
		kind string
		d    time.Duration
	}
	var plans []plan
	for _, k := range strings.Split(*only, ",") {
		if _, ok := kinds[k]; !ok {
			fail(fmt.Errorf("unknown kind %q", k))
		}
		if k == "objects-refused" {
			plans = append(plans, plan{k, 0}) // the whole run
			continue
		}
		for _, s := range strings.Split(*outages, ",") {
			d, err := time.ParseDuration(s)
			if err != nil {
				fail(err)
			}
			plans = append(plans, plan{k, d})
		}
	}
	if *long != "" {
		d, err := time.ParseDuration(*long)
		if err != nil {
			fail(err)
		}
		for _, k := range []string{"output-missing", "triton"} {
			if strings.Contains(*only, k) {
				plans = append(plans, plan{k, d})
			}
		}
	}
	ctx := context.Background()
	b, err := newBench(ctx, bin)
	if err != nil {
		fail(err)
	}
	defer b.close()
	var rows []row
	for i, p := range plans {
		fmt.Fprintf(os.Stderr, "outage: run %d of %d: %s for %s\n", i+1, len(plans), p.kind, p.d)
		r, err := b.run(ctx, i, p.kind, p.d, *jobs)
		if err != nil {
			fail(fmt.Errorf("%s %s: %w", p.kind, p.d, err))
		}
		rows = append(rows, r)
	}
	tw := tabwriter.NewWriter(os.Stdout, 2, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "outage\tfor\tjobs\tin hand at start\textra receives\tDLQ\terror records\tlost\trecomputed\tmost held\ttime to resume\t")
	var receives, dlq, lost, recomputed, records int
	var resume time.Duration
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.1f s\t\n", r.kind, r.outage, r.jobs, r.heldAtStart, r.receives, r.dlq, r.records, r.lost, r.recomputed, r.heldMax, r.resume.Seconds())
		receives, dlq, lost, recomputed, records = receives+r.receives, dlq+r.dlq, lost+r.lost, recomputed+r.recomputed, records+r.records
		resume = max(resume, r.resume)
	}
	_ = tw.Flush()
	// SIGTERM during an outage: a worker holding jobs for a dependency
	// that is down hands them back at once rather than draining.
	sig, err := b.sigtermDuring(ctx, len(plans), *jobs)
	if err != nil {
		fail(fmt.Errorf("sigterm during an outage: %w", err))
	}
	fmt.Printf("SIGTERM during a 5-minute input-bucket outage with jobs held: exited in %.1f s\n", sig.Seconds())
	fmt.Printf("RESULT runs=%d extra_receives=%d dlq=%d lost=%d recomputed=%d error_records=%d max_resume_s=%.1f sigterm_held_s=%.1f\n", len(rows), receives, dlq, lost, recomputed, records, resume.Seconds(), sig.Seconds())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "outage:", err)
	os.Exit(1)
}

// bench is the servers every run shares.
type bench struct {
	bin, dir string
	emu      *localaws.Server
	sqs      *sqs.Client
	s3       *s3.Client
	proxy    *faultproxy.Proxy
	proxyURL string
	psrv     *http.Server
	repo     string
	failFile string // exists: the echo model fails every request
	dlq      string // the DLQ of the run in progress
	ports    [][3]int
	servers  []*tritonproc.Server
}

func newBench(ctx context.Context, bin string) (*bench, error) {
	dir, err := os.MkdirTemp("", "fleetscribe-outage-")
	if err != nil {
		return nil, err
	}
	b := &bench{bin: bin, dir: dir}
	if b.emu, err = localaws.Start(ctx); err != nil {
		return nil, err
	}
	b.sqs, b.s3 = b.emu.Clients()
	if b.proxy, err = faultproxy.NewProxy(b.emu.Endpoint, 0, 1); err != nil {
		return nil, err
	}
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.psrv = &http.Server{Handler: b.proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = b.psrv.Serve(lis) }()
	b.proxyURL = "http://" + lis.Addr().String()
	// Two partitions of the echo engine with a GPU's batch time, on fixed
	// ports so that restarted ones come back where the worker looks.
	b.repo = filepath.Join(dir, "repo")
	// While failFile exists the partitions answer INTERNAL to everything.
	b.failFile = filepath.Join(dir, "fail")
	params := tritonproc.EchoDelays(50*time.Millisecond, 20*time.Millisecond)
	params["fail_file"] = b.failFile
	if err := tritonproc.WriteRepo(b.repo, map[string]modelspec.Config{"asr": tritonproc.Model("echo").WithParameters(params)}); err != nil {
		return nil, err
	}
	for range 2 {
		var ports [3]int
		for k := range ports {
			if ports[k], err = tritonproc.FreePort(); err != nil {
				return nil, err
			}
		}
		b.ports = append(b.ports, ports)
	}
	return b, b.startPartitions(ctx)
}

func (b *bench) startPartitions(ctx context.Context) error {
	b.servers = nil
	for _, p := range b.ports {
		s, err := tritonproc.Start(ctx, tritonproc.Options{Repo: b.repo, GRPCPort: p[0], HTTPPort: p[1], MetricsPort: p[2]})
		if err != nil {
			return err
		}
		b.servers = append(b.servers, s)
	}
	return nil
}

func (b *bench) killPartitions() {
	for _, s := range b.servers {
		s.Kill()
	}
	b.servers = nil
}

func (b *bench) close() {
	b.killPartitions()
	_ = b.psrv.Close()
	b.emu.Stop()
	_ = os.RemoveAll(b.dir)
}

func (b *bench) addrs() string {
	var a []string
	for _, p := range b.ports {
		a = append(a, "127.0.0.1:"+strconv.Itoa(p[0]))
	}
	return strings.Join(a, ",")
}

// run is one outage of kind, lasting d, while the worker drains n jobs.
func (b *bench) run(ctx context.Context, i int, kind string, d time.Duration, n int) (row, error) {
	r := row{kind: kind, outage: d, jobs: n}
	in, out := fmt.Sprintf("in-%d", i), fmt.Sprintf("out-%d", i)
	q, err := b.emu.Provision(ctx, fmt.Sprintf("q-%d", i), 3, in, out)
	if err != nil {
		return r, err
	}
	if err := b.upload(ctx, q.URL, in, n); err != nil {
		return r, err
	}
	if kind == "objects-refused" {
		for j := 2; j < n; j += 5 {
			ref := faultproxy.RefusalAccessDenied
			if (j/5)%2 == 1 {
				ref = faultproxy.RefusalArchived
			}
			b.proxy.RefuseObject(in, recording(j), ref)
		}
	}
	wk, err := b.startWorker(ctx, i, q.URL, in, out)
	if err != nil {
		return r, err
	}
	stop := wk.stop
	metrics := wk.metrics
	heldMax := make(chan int, 1)
	watching, stopWatching := context.WithCancel(ctx)
	go func() { heldMax <- watchHeld(watching, metrics) }()
	defer stopWatching()

	if kind == "objects-refused" {
		// No outage: the refusals last the whole run.
		b.dlq = q.DLQURL
		if err := b.waitDone(ctx, out, in, n, 10*time.Minute); err != nil {
			stop()
			return r, err
		}
		return b.finish(ctx, r, wk, q.DLQURL, out, in, n, stopWatching, heldMax)
	}
	// The outage starts once a quarter of the jobs are done, so that jobs
	// are in hand, some mid-way, and more wait in the queue.
	b.dlq = q.DLQURL
	if err := b.waitDone(ctx, out, in, n/4, 5*time.Minute); err != nil {
		stop()
		return r, err
	}
	_, r.heldAtStart, _ = localaws.Depth(ctx, b.sqs, q.URL)
	switch kind {
	case "triton":
		b.killPartitions()
	case "triton-failing":
		if err := os.WriteFile(b.failFile, nil, 0o600); err != nil {
			stop()
			return r, err
		}
	case "input-denied":
		b.proxy.SetOutage(in, kinds[kind])
	default:
		b.proxy.SetOutage(out, kinds[kind])
	}
	time.Sleep(d)
	doneAtEnd, _ := b.done(ctx, out, in)
	switch kind {
	case "triton":
		if err := b.startPartitions(ctx); err != nil {
			stop()
			return r, err
		}
	case "triton-failing":
		if err := os.Remove(b.failFile); err != nil {
			stop()
			return r, err
		}
	case "input-denied":
		b.proxy.SetOutage(in, faultproxy.Outage{})
	default:
		b.proxy.SetOutage(out, faultproxy.Outage{})
	}
	ended := time.Now()
	if doneAtEnd < n {
		if err := b.waitDone(ctx, out, in, doneAtEnd+1, 10*time.Minute); err != nil {
			stop()
			return r, err
		}
		r.resume = time.Since(ended)
	}
	if err := b.waitDone(ctx, out, in, n, 10*time.Minute); err != nil {
		stop()
		return r, err
	}
	return b.finish(ctx, r, wk, q.DLQURL, out, in, n, stopWatching, heldMax)
}

// finish counts what a run cost, once its jobs are done, and stops its
// worker.
func (b *bench) finish(ctx context.Context, r row, wk *workerProc, dlqURL, out, in string, n int, stopWatching func(), heldMax chan int) (row, error) {
	received, chunks, err := scrape(wk.metrics)
	wk.stop()
	stopWatching()
	r.heldMax = <-heldMax
	if err != nil {
		return r, err
	}
	// Each recording is one chunk: every chunk past one per transcript
	// written was computed again (or computed and then lost, by a worker
	// that dead-lettered the job after computing it).
	transcripts, err := b.transcripts(ctx, out, in)
	if err != nil {
		return r, err
	}
	r.receives, r.recomputed = int(received)-n, max(0, int(chunks)-transcripts)
	attrs, err := b.sqs.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: aws.String(dlqURL),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}})
	if err != nil {
		return r, err
	}
	for _, v := range attrs.Attributes {
		x, _ := strconv.Atoi(v)
		r.dlq += x
	}
	if r.records, err = b.count(ctx, out, in, func(k string) bool { return strings.HasSuffix(k, ".error.json") }); err != nil {
		return r, err
	}
	done, err := b.outputs(ctx, out, in)
	r.lost = max(0, n-done-r.dlq) // a DLQ message may have its record too
	return r, err
}

// workerProc is a worker binary running for one run.
type workerProc struct {
	metrics string // its metrics address
	exited  chan error
	cmd     *exec.Cmd
}

// stop sends SIGTERM and waits for the exit.
func (w *workerProc) stop() {
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	<-w.exited
}

// startWorker starts the worker binary on queue q, reading in and writing
// out through the proxy, with its log in the bench's folder.
func (b *bench) startWorker(ctx context.Context, i int, q, in, out string) (*workerProc, error) {
	metricsPort, err := tritonproc.FreePort()
	if err != nil {
		return nil, err
	}
	w := &workerProc{metrics: "127.0.0.1:" + strconv.Itoa(metricsPort), exited: make(chan error, 1)}
	w.cmd = exec.CommandContext(ctx, b.bin)
	w.cmd.Env = append(os.Environ(), "FLEETSCRIBE_AWS_ENDPOINT="+b.proxyURL, "FLEETSCRIBE_QUEUE_URL="+q,
		"FLEETSCRIBE_OUTPUT_BUCKET="+out, "FLEETSCRIBE_INPUT_BUCKETS="+in, "FLEETSCRIBE_TRITON_ADDRS="+b.addrs(),
		"FLEETSCRIBE_MAX_RECEIVES=3", "FLEETSCRIBE_VISIBILITY_TIMEOUT=30s", "FLEETSCRIBE_RETRY_BACKOFF=5s", "FLEETSCRIBE_WAIT_TIME=1s",
		"FLEETSCRIBE_CONCURRENCY=8", "FLEETSCRIBE_METRICS_ADDR="+w.metrics, "FLEETSCRIBE_TRITON_HEALTH_INTERVAL=1s",
		"FLEETSCRIBE_IMDS=off", "FLEETSCRIBE_CLAIM_MIN_AUDIO=1h")
	logf, err := os.Create(filepath.Join(b.dir, fmt.Sprintf("worker-%d.log", i)))
	if err != nil {
		return nil, err
	}
	w.cmd.Stderr = logf
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := w.cmd.Start(); err != nil {
		_ = logf.Close()
		return nil, err
	}
	go func() { w.exited <- w.cmd.Wait(); _ = logf.Close() }()
	return w, nil
}

// watchHeld returns the most jobs the worker held waiting for a
// dependency at once, sampled every 100 ms until ctx ends.
func watchHeld(ctx context.Context, metrics string) int {
	most := 0
	for ctx.Err() == nil {
		if v, err := gauge(metrics, "fleetscribe_jobs_waiting_for_dependency"); err == nil {
			most = max(most, int(v))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return most
}

// sigtermDuring measures SIGTERM to exit of a worker whose jobs all wait
// for an input bucket that is down (403 for every request, listings too).
func (b *bench) sigtermDuring(ctx context.Context, i, n int) (time.Duration, error) {
	in, out := fmt.Sprintf("in-%d", i), fmt.Sprintf("out-%d", i)
	q, err := b.emu.Provision(ctx, fmt.Sprintf("q-%d", i), 3, in, out)
	if err != nil {
		return 0, err
	}
	if err := b.upload(ctx, q.URL, in, n); err != nil {
		return 0, err
	}
	b.proxy.SetOutage(in, faultproxy.OutageDenied)
	defer b.proxy.SetOutage(in, faultproxy.Outage{})
	wk, err := b.startWorker(ctx, i, q.URL, in, out)
	if err != nil {
		return 0, err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if v, err := gauge(wk.metrics, "fleetscribe_jobs_waiting_for_dependency"); err == nil && v >= 1 {
			break
		}
		if time.Now().After(deadline) {
			wk.stop()
			return 0, errors.New("no job held after 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	wk.stop()
	return time.Since(start), nil
}

// recording is the key of the j-th recording of a run.
func recording(j int) string { return fmt.Sprintf("r%03d.wav", j) }

// upload puts n recordings in bucket in and a job for each on queue q.
// Each is a tone of its own, as users' recordings differ: copies of one
// clip would make every failed chunk the pool's own canary.
func (b *bench) upload(ctx context.Context, q, in string, n int) error {
	for j := range n {
		clip := wav(5*modelspec.SampleRate, 220+10*float64(j))
		if _, err := b.s3.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(in), Key: aws.String(recording(j)), Body: strings.NewReader(string(clip))}); err != nil {
			return err
		}
		body, _ := contract.Job{Bucket: in, Key: recording(j)}.Encode()
		if _, err := b.sqs.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(q), MessageBody: aws.String(string(body))}); err != nil {
			return err
		}
	}
	return nil
}

// done counts the jobs that reached an end: a transcript or an error
// record, or their message in the DLQ (a worker that spends its receives
// on an outage puts messages there, without a record if it could not
// write one).
func (b *bench) done(ctx context.Context, out, in string) (int, error) {
	n, err := b.outputs(ctx, out, in)
	if err != nil {
		return 0, err
	}
	v, f, err := localaws.Depth(ctx, b.sqs, b.dlq)
	return n + v + f, err
}

// transcripts counts the jobs with a transcript.
func (b *bench) transcripts(ctx context.Context, out, in string) (int, error) {
	return b.count(ctx, out, in, func(k string) bool { return strings.HasSuffix(k, ".json") && !strings.HasSuffix(k, ".error.json") })
}

// outputs counts the jobs with a transcript or an error record.
func (b *bench) outputs(ctx context.Context, out, in string) (int, error) {
	return b.count(ctx, out, in, func(k string) bool { return strings.HasSuffix(k, ".json") })
}

func (b *bench) count(ctx context.Context, out, in string, keep func(string) bool) (int, error) {
	var n int
	p := s3.NewListObjectsV2Paginator(b.s3, &s3.ListObjectsV2Input{Bucket: aws.String(out), Prefix: aws.String("transcripts/" + in + "/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return 0, err
		}
		for _, o := range page.Contents {
			if keep(aws.ToString(o.Key)) {
				n++
			}
		}
	}
	return n, nil
}

func (b *bench) waitDone(ctx context.Context, out, in string, want int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		n, err := b.done(ctx, out, in)
		if err != nil {
			return err
		}
		if n >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d jobs done after %s", n, want, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// gauge reads one unlabelled metric of the worker's.
func gauge(addr, name string) (float64, error) {
	resp, err := http.Get("http://" + addr + "/metrics") //nolint:noctx // a local scrape
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(v, 64)
		}
	}
	return 0, fmt.Errorf("%s: not in the worker's metrics", name)
}

// scrape reads the worker's messages received and its chunks transcribed
// (successful inference requests).
func scrape(addr string) (received, chunks float64, err error) {
	resp, err := http.Get("http://" + addr + "/metrics") //nolint:noctx // a local scrape
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		v, _ := strconv.ParseFloat(value, 64)
		switch {
		case name == "fleetscribe_messages_received_total":
			received = v
		case strings.HasPrefix(name, "fleetscribe_triton_requests_total{") && strings.Contains(name, `outcome="ok"`):
			chunks += v
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return 0, 0, err
	}
	return received, chunks, nil
}

// wav is n samples of a tone of hz, mono 16-bit at the model's rate.
func wav(n int, hz float64) []byte {
	b := make([]byte, 44+2*n)
	copy(b, "RIFF")
	le32(b[4:], uint32(36+2*n))
	copy(b[8:], "WAVEfmt ")
	le32(b[16:], 16)
	b[20], b[22] = 1, 1
	le32(b[24:], modelspec.SampleRate)
	le32(b[28:], 2*modelspec.SampleRate)
	b[32], b[34] = 2, 16
	copy(b[36:], "data")
	le32(b[40:], uint32(2*n))
	for i := range n {
		v := int16(8000 * sinApprox(float64(i)*hz/modelspec.SampleRate))
		b[44+2*i], b[45+2*i] = byte(v), byte(uint16(v)>>8)
	}
	return b
}

func le32(b []byte, v uint32) { b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24) }

// sinApprox is a triangle wave of period 1 in [-1, 1]: any tone will do.
func sinApprox(x float64) float64 {
	f := x - float64(int(x))
	if f < 0.5 {
		return 4*f - 1
	}
	return 3 - 4*f
}
