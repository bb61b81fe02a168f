// Package chaos runs the real worker binaries against the local SQS+S3
// emulator while it breaks things: workers killed with SIGKILL and
// restarted, inference partitions crashing (once all of them together, as
// an MPS fault takes down every partition of a GPU), S3 and SQS answering
// 500 and 503 SlowDown, slow answers and connection resets from a fault
// proxy, and a SIGTERM drain. It then checks every job's outcome: exactly
// one terminal outcome whose content matches what was expected, nothing
// lost or stranded, and the DLQ holding exactly the jobs designed to
// exhaust their retries.
package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/shm"
	"github.com/fleetscribe/fleetscribe/lab/servers/faultproxy"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
)

// Config sizes a run.
type Config struct {
	Jobs             int           // all jobs; about a tenth are bad inputs of six kinds
	Workers          int           // worker processes on the same queue
	Partitions       int           // Triton Inference Server partitions (pocketsphinx)
	Kills            int           // SIGKILLs of a worker, each restarted
	PartitionCrashes int           // single partitions killed and restarted
	AllDown          time.Duration // once, every partition down together this long
	FaultRate        float64       // share of S3/SQS requests that meet a fault
	MaxReceives      int           // the queue's maxReceiveCount (and the workers' -max-receives)
	Timeout          time.Duration
	Seed             uint64
	WorkerBin        string // the worker binary
	ModelRepo        string // the partitions' model repository (empty: deploy/triton/cpu)
	Dir              string // scratch: clips and logs
	Log              io.Writer
}

// Job kinds and what each must end as.
const (
	KindSpeech      = "speech"      // a transcript with the clip's words
	KindCorrupt     = "corrupt"     // corrupt_audio record
	KindEmpty       = "empty"       // empty_audio record
	KindMissing     = "missing"     // missing_object record
	KindUnsupported = "unsupported" // unsupported_audio record
	KindBadJSON     = "bad_json"    // a record under _invalid-messages
	KindExhaust     = "exhaust"     // every read fails: retries_exhausted record and the DLQ
)

type job struct {
	kind string
	key  string
	clip int    // speech: which clip
	body string // the message body
}

// Report is what a run found.
type Report struct {
	Jobs, Completed, ErrorRecords, Lost, Duplicated, Mismatched, Stranded, Recomputed int
	DLQExpected, DLQActual, Kills, PartitionKills                                     int
	ByKind                                                                            map[string]*KindRow
	Faults                                                                            map[string]int
	Elapsed                                                                           time.Duration
	Problems                                                                          []string // the first few, for the log
}

// KindRow is one line of the table.
type KindRow struct {
	Jobs, OK, Lost, Duplicated, Mismatched int
}

// OK reports a run with nothing lost, duplicated, mismatched or stranded.
func (r *Report) OK() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Mismatched == 0 && r.Stranded == 0 && r.DLQActual == r.DLQExpected &&
		r.Completed+r.ErrorRecords == r.Jobs
}

// ResultLine is the RESULT line.
func (r *Report) ResultLine() string {
	return fmt.Sprintf("RESULT jobs=%d completed=%d error_records=%d lost=%d duplicated=%d mismatched=%d stranded=%d recomputed=%d dlq_expected=%d dlq_actual=%d kills=%d",
		r.Jobs, r.Completed, r.ErrorRecords, r.Lost, r.Duplicated, r.Mismatched, r.Stranded, r.Recomputed, r.DLQExpected, r.DLQActual, r.Kills)
}

// WriteTable prints the outcome per kind of job and the faults injected.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tjobs\texpected outcome\tlost\tduplicated\tmismatched\t")
	for _, k := range []string{KindSpeech, KindCorrupt, KindEmpty, KindMissing, KindUnsupported, KindBadJSON, KindExhaust} {
		if row := r.ByKind[k]; row != nil {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t\n", k, row.Jobs, row.OK, row.Lost, row.Duplicated, row.Mismatched)
		}
	}
	_ = tw.Flush()
	fmt.Fprintf(w, "queues left: %d stranded; DLQ %d (expected %d); transcripts recomputed after kills: %d\n", r.Stranded, r.DLQActual, r.DLQExpected, r.Recomputed)
	fmt.Fprintf(w, "chaos: %d worker SIGKILLs, %d partition kills, faults injected %v\n", r.Kills, r.PartitionKills, r.Faults)
	for _, p := range r.Problems {
		fmt.Fprintln(w, "problem:", p)
	}
}

var sentences = []string{
	"the patient reports mild pain in the left knee",
	"blood pressure was normal at the last visit",
	"please schedule a follow up in two weeks",
	"she has no known allergies to medication",
	"the results came back within the normal range",
	"continue the current dose and review next month",
}

const (
	inBucket   = "chaos-in"
	outBucket  = "chaos-out"
	outPrefix  = "transcripts/"
	model      = "asr"
	exhaustDir = "exhaust/"
)

// Run runs the suite.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	logf := func(format string, a ...any) { fmt.Fprintf(cfg.Log, "chaos: "+format+"\n", a...) }
	rng := rand.New(rand.NewPCG(cfg.Seed, 1))
	emu, err := localaws.Start(ctx)
	if err != nil {
		return nil, err
	}
	defer emu.Stop()
	sqsc, s3c := emu.Clients()
	q, err := localaws.CreateQueue(ctx, sqsc, "chaos", cfg.MaxReceives, 10*time.Second)
	if err != nil {
		return nil, err
	}
	for _, b := range []string{inBucket, outBucket} {
		if err := localaws.CreateBucket(ctx, s3c, b); err != nil {
			return nil, err
		}
	}
	proxy, err := faultproxy.NewProxy(emu.Endpoint, cfg.FaultRate, cfg.Seed)
	if err != nil {
		return nil, err
	}
	proxy.Exhaust = "/" + inBucket + "/" + exhaustDir
	plis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	psrv := &http.Server{Handler: proxy, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = psrv.Serve(plis) }()
	defer psrv.Close()
	proxyURL := "http://" + plis.Addr().String()

	// Partitions on fixed ports, so a restarted one comes back where the
	// workers look for it.
	repo := cfg.ModelRepo
	if repo == "" {
		root, err := tritonproc.Root()
		if err != nil {
			return nil, err
		}
		repo = filepath.Join(root, "deploy", "triton", "cpu")
	}
	parts, err := newPartitions(repo, cfg.Dir, cfg.Partitions)
	if err != nil {
		return nil, err
	}
	defer parts.stopAll()
	for i := range parts.addrs {
		if err := parts.start(ctx, i); err != nil {
			return nil, err
		}
	}

	logf("synthesising %d clips and working out what each says", 2*len(sentences))
	clips, expected, err := prepareClips(ctx, cfg.Dir, parts.addrs[0])
	if err != nil {
		return nil, err
	}
	jobs := makeJobs(cfg.Jobs, len(clips), rng)
	if err := upload(ctx, s3c, jobs, clips); err != nil {
		return nil, err
	}

	workers := &workerSet{bin: cfg.WorkerBin, dir: cfg.Dir, env: []string{
		"FLEETSCRIBE_AWS_ENDPOINT=" + proxyURL, "FLEETSCRIBE_QUEUE_URL=" + q.URL, "FLEETSCRIBE_OUTPUT_BUCKET=" + outBucket, "FLEETSCRIBE_INPUT_BUCKETS=" + inBucket,
		"FLEETSCRIBE_TRITON_ADDRS=" + strings.Join(parts.addrs, ","), "FLEETSCRIBE_MAX_RECEIVES=" + strconv.Itoa(cfg.MaxReceives),
		"FLEETSCRIBE_VISIBILITY_TIMEOUT=10s", "FLEETSCRIBE_RETRY_BACKOFF=1s", "FLEETSCRIBE_WAIT_TIME=1s",
		"FLEETSCRIBE_CONCURRENCY=4", "FLEETSCRIBE_DRAIN_TIMEOUT=20s", "FLEETSCRIBE_METRICS_ADDR=",
		"FLEETSCRIBE_TRITON_HEALTH_INTERVAL=1s", "FLEETSCRIBE_TRITON_REQUEST_TIMEOUT=30s", "FLEETSCRIBE_IMDS=off",
		"FLEETSCRIBE_JOB_TIMEOUT=5m",
	}}
	defer workers.stopAll()
	for range cfg.Workers {
		if err := workers.start(ctx); err != nil {
			return nil, err
		}
	}
	logf("sending %d jobs; %d workers, %d partitions, fault rate %.1f%%", len(jobs), cfg.Workers, cfg.Partitions, 100*cfg.FaultRate)
	if err := sendJobs(ctx, sqsc, q.URL, jobs); err != nil {
		return nil, err
	}

	rep := &Report{Jobs: len(jobs), ByKind: map[string]*KindRow{}}
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		schedule(ctx, cfg, rng, workers, parts, rep, func() (int, error) {
			v, f, err := localaws.Depth(ctx, sqsc, q.URL)
			return v + f, err
		}, logf)
	}()
	deadline := time.Now().Add(cfg.Timeout)
	quiet := 0
	for quiet < 3 {
		if time.Now().After(deadline) {
			logf("timeout: the queue did not drain")
			break
		}
		time.Sleep(2 * time.Second)
		select {
		case <-chaosDone:
		default:
			continue // keep going until every planned fault has happened
		}
		v, f, err := localaws.Depth(ctx, sqsc, q.URL)
		if err != nil {
			return nil, err
		}
		if v+f == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	<-chaosDone
	workers.stopAll()
	proxy.SetFaults(false)
	v, f, err := localaws.Depth(ctx, sqsc, q.URL)
	if err != nil {
		return nil, err
	}
	rep.Stranded = v + f
	rep.Faults = proxy.Faults()
	if err := verify(ctx, s3c, sqsc, q, jobs, expected, proxy.Writes(), rep); err != nil {
		return nil, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// schedule injects the process faults at random moments of the run: each
// event fires once a random share (5-85%) of the jobs has left the queue,
// so the faults spread over the run however fast the machine is.
func schedule(ctx context.Context, cfg Config, rng *rand.Rand, ws *workerSet, ps *partitions, rep *Report, remaining func() (int, error), logf func(string, ...any)) {
	type event struct {
		at   float64 // share of jobs done
		kind string
	}
	var evs []event
	add := func(kind string, n int) {
		for range n {
			evs = append(evs, event{0.05 + 0.8*rng.Float64(), kind})
		}
	}
	add("kill", cfg.Kills)
	add("partition", cfg.PartitionCrashes)
	add("sigterm", 1)
	if cfg.AllDown > 0 {
		add("alldown", 1)
	}
	sort.Slice(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	for len(evs) > 0 && ctx.Err() == nil {
		left, err := remaining()
		if err != nil {
			logf("queue depth: %v", err)
		}
		done := 1 - float64(left)/float64(max(cfg.Jobs, 1))
		if err != nil || done < evs[0].at {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		e := evs[0]
		evs = evs[1:]
		switch e.kind {
		case "kill":
			i := rng.IntN(len(ws.procs))
			logf("%.0f%% done: SIGKILL worker %d", 100*done, i)
			ws.kill(i)
			rep.Kills++
			time.Sleep(time.Duration(200+rng.IntN(1500)) * time.Millisecond)
			_ = ws.restart(ctx, i)
		case "partition":
			i := rng.IntN(len(ps.addrs))
			logf("%.0f%% done: partition %d crashes", 100*done, i)
			ps.kill(i)
			rep.PartitionKills++
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
			_ = ps.start(ctx, i)
		case "alldown":
			logf("%.0f%% done: every partition down for %s (an MPS fault)", 100*done, cfg.AllDown)
			for i := range ps.addrs {
				ps.kill(i)
				rep.PartitionKills++
			}
			time.Sleep(cfg.AllDown)
			var wg sync.WaitGroup
			for i := range ps.addrs {
				wg.Go(func() { _ = ps.start(ctx, i) })
			}
			wg.Wait()
		case "sigterm":
			i := rng.IntN(len(ws.procs))
			logf("%.0f%% done: SIGTERM worker %d; it drains and exits", 100*done, i)
			ws.drain(i)
			_ = ws.restart(ctx, i)
		}
	}
}

// makeJobs mixes speech with bad inputs of every kind.
func makeJobs(n, clips int, rng *rand.Rand) []job {
	bad := []string{KindCorrupt, KindEmpty, KindMissing, KindUnsupported, KindBadJSON, KindExhaust}
	var jobs []job
	for i := range n {
		j := job{kind: KindSpeech, clip: i % clips}
		if i%10 == 9 {
			j.kind = bad[(i/10)%len(bad)]
		}
		switch j.kind {
		case KindExhaust:
			j.key = fmt.Sprintf("%s%04d.wav", exhaustDir, i)
		default:
			j.key = fmt.Sprintf("%s/%04d.wav", j.kind, i)
		}
		if j.kind == KindBadJSON {
			j.body = fmt.Sprintf(`{"v": 1, "bucket": %q, "key": %q, "formats": ["nonsense-%d"]`, inBucket, j.key, i) // cut short
		} else {
			b, _ := contract.Job{Bucket: inBucket, Key: j.key}.Encode()
			j.body = string(b)
		}
		jobs = append(jobs, j)
	}
	rng.Shuffle(len(jobs), func(a, b int) { jobs[a], jobs[b] = jobs[b], jobs[a] })
	return jobs
}

// prepareClips synthesises each sentence in two voices and transcribes
// each clip once, directly and without faults, for the expected text.
func prepareClips(ctx context.Context, dir, addr string) ([][]byte, []string, error) {
	client, err := triton.Dial(addr, triton.DefaultModelIO())
	if err != nil {
		return nil, nil, err
	}
	defer client.Close()
	var clips [][]byte
	var texts []string
	for _, voice := range []string{"rms", "slt"} {
		for i, s := range sentences {
			path := filepath.Join(dir, fmt.Sprintf("%s-%d.wav", voice, i))
			ff := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-loglevel", "error", "-y",
				"-f", "lavfi", "-i", fmt.Sprintf("flite=text='%s':voice=%s", s, voice), "-ac", "1", path)
			if out, err := ff.CombinedOutput(); err != nil {
				return nil, nil, fmt.Errorf("ffmpeg: %w: %s", err, out)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, nil, err
			}
			clip, err := audio.Decode(b)
			if err != nil {
				return nil, nil, err
			}
			samples := append([]float32(nil), audio.Resample(clip.Samples, clip.Rate, modelspec.SampleRate)...)
			// Each clip is one chunk, which the workers level (-normalize,
			// on by default) before sending: the reference text is of the
			// same samples.
			_, _ = audio.Normalize(samples) // synthesised speech: finite
			var res triton.Result
			for try := 0; ; try++ {
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				res, err = client.Infer(cctx, triton.Request{Samples: samples, Timestamps: true})
				cancel()
				if err == nil || try == 50 {
					break
				}
				time.Sleep(200 * time.Millisecond) // the partition may still be loading
			}
			if err != nil {
				return nil, nil, fmt.Errorf("expected text of clip %s: %w", path, err)
			}
			clips = append(clips, b)
			texts = append(texts, strings.TrimSpace(res.Text))
		}
	}
	return clips, texts, nil
}

func upload(ctx context.Context, s3c *s3.Client, jobs []job, clips [][]byte) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for _, j := range jobs {
		var body []byte
		switch j.kind {
		case KindSpeech, KindExhaust:
			body = clips[j.clip]
		case KindCorrupt:
			body = append([]byte("RIFF\x24\x00\x00\x00WAVEfmt "), []byte(strings.Repeat("\xff", 40))...)
		case KindEmpty:
			body = audio.EncodeWAV(audio.Clip{Rate: modelspec.SampleRate})
		case KindUnsupported:
			// A WAV of format tag 0x1234: valid, but an encoding neither
			// the Go decoder nor ffmpeg reads.
			body = append([]byte("RIFF\x34\x01\x00\x00WAVEfmt \x14\x00\x00\x00\x34\x12\x01\x00\x40\x1f\x00\x00\xd7\x0f\x00\x00\x00\x01\x04\x00\x02\x00\xf9\x01data\x00\x01\x00\x00"), make([]byte, 256)...)
		default:
			continue // missing and bad JSON have no object
		}
		g.Go(func() error {
			_, err := s3c.PutObject(gctx, &s3.PutObjectInput{Bucket: aws.String(inBucket), Key: aws.String(j.key), Body: strings.NewReader(string(body))})
			return err
		})
	}
	return g.Wait()
}

func sendJobs(ctx context.Context, sqsc *sqs.Client, url string, jobs []job) error {
	for i := 0; i < len(jobs); i += 10 {
		var e []types.SendMessageBatchRequestEntry
		for k, j := range jobs[i:min(i+10, len(jobs))] {
			e = append(e, types.SendMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(k)), MessageBody: aws.String(j.body)})
		}
		out, err := sqsc.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: e})
		if err != nil {
			return err
		}
		if len(out.Failed) > 0 {
			return fmt.Errorf("send: %d entries failed", len(out.Failed))
		}
	}
	return nil
}

// verify finds every job's outcome.
func verify(ctx context.Context, s3c *s3.Client, sqsc *sqs.Client, q localaws.Queue, jobs []job, expected []string, writes map[string][]string, rep *Report) error {
	outputs := map[string]bool{}
	p := s3.NewListObjectsV2Paginator(s3c, &s3.ListObjectsV2Input{Bucket: aws.String(outBucket)})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return err
		}
		for _, o := range page.Contents {
			outputs[aws.ToString(o.Key)] = true
		}
	}
	dlq := map[string]int{}
	for empty := 0; empty < 2; {
		out, err := sqsc.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: aws.String(q.DLQURL), MaxNumberOfMessages: 10, VisibilityTimeout: 600})
		if err != nil {
			return err
		}
		if len(out.Messages) == 0 {
			empty++
		}
		for _, m := range out.Messages {
			dlq[aws.ToString(m.Body)]++
			rep.DLQActual++
		}
	}
	invalid := map[string]bool{} // bodies kept in _invalid-messages records
	for k := range outputs {
		if strings.HasPrefix(k, outPrefix+"_invalid-messages/") {
			var rec contract.ErrorRecord
			if getJSON(ctx, s3c, k, &rec) == nil {
				invalid[rec.MessageBody] = true
			}
		}
	}
	problem := func(format string, a ...any) {
		if len(rep.Problems) < 20 {
			rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...))
		}
	}
	for _, j := range jobs {
		row := rep.ByKind[j.kind]
		if row == nil {
			row = &KindRow{}
			rep.ByKind[j.kind] = row
		}
		row.Jobs++
		verdict := judge(ctx, s3c, j, expected, outputs, dlq, invalid, writes, rep)
		switch verdict {
		case "ok":
			row.OK++
		case "lost":
			row.Lost++
			rep.Lost++
			problem("%s %s: no outcome", j.kind, j.key)
		case "duplicated":
			row.Duplicated++
			rep.Duplicated++
			problem("%s %s: two outcomes", j.kind, j.key)
		default:
			row.Mismatched++
			rep.Mismatched++
			problem("%s %s: %s", j.kind, j.key, verdict)
		}
		if j.kind == KindExhaust {
			rep.DLQExpected++
		}
	}
	return nil
}

// judge returns "ok", "lost", "duplicated", or what did not match.
func judge(ctx context.Context, s3c *s3.Client, j job, expected []string, outputs map[string]bool, dlq map[string]int, invalid map[string]bool, writes map[string][]string, rep *Report) string {
	if j.kind == KindBadJSON {
		if invalid[j.body] {
			rep.ErrorRecords++
			return "ok"
		}
		return "lost"
	}
	ref := contract.InputRef{Bucket: inBucket, Key: j.key}
	if j.kind != KindMissing && j.kind != KindBadJSON {
		h, err := s3c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(inBucket), Key: aws.String(j.key)})
		if err != nil {
			return "input vanished: " + err.Error()
		}
		ref.ETag = strings.Trim(aws.ToString(h.ETag), `"`)
	}
	keys := contract.KeysFor(outPrefix, ref, model)
	hasT, hasE := outputs[keys.JSON], outputs[keys.Error]
	// A transcript rewritten with other content is a duplicate outcome.
	hashes := writes[outBucket+"/"+keys.JSON]
	for i := 1; i < len(hashes); i++ {
		if hashes[i] != hashes[0] {
			return "duplicated"
		}
	}
	if len(hashes) > 1 {
		rep.Recomputed += len(hashes) - 1
	}
	if hasT && hasE {
		return "duplicated"
	}
	switch j.kind {
	case KindSpeech:
		if !hasT {
			if hasE {
				var rec contract.ErrorRecord
				_ = getJSON(ctx, s3c, keys.Error, &rec)
				return "error record instead of a transcript: " + rec.Class
			}
			return "lost"
		}
		var t contract.Transcript
		if err := getJSON(ctx, s3c, keys.JSON, &t); err != nil {
			return "unreadable transcript"
		}
		if strings.TrimSpace(t.Text) != expected[j.clip] {
			return "transcript text differs from the clip's"
		}
		rep.Completed++
		return "ok"
	default:
		want := map[string]string{
			KindCorrupt: contract.ClassCorruptAudio, KindEmpty: contract.ClassEmptyAudio, KindMissing: contract.ClassMissing,
			KindUnsupported: contract.ClassUnsupported, KindExhaust: contract.ClassExhausted,
		}[j.kind]
		if hasT {
			return "transcript for a bad input"
		}
		if !hasE {
			return "lost"
		}
		var rec contract.ErrorRecord
		if err := getJSON(ctx, s3c, keys.Error, &rec); err != nil {
			return "unreadable error record"
		}
		if rec.Class != want {
			return fmt.Sprintf("error class %s, want %s", rec.Class, want)
		}
		if final := j.kind != KindExhaust; rec.Final != final {
			return fmt.Sprintf("record final=%v", rec.Final)
		}
		if j.kind == KindExhaust && dlq[j.body] != 1 {
			return fmt.Sprintf("in the DLQ %d times", dlq[j.body])
		}
		rep.ErrorRecords++
		return "ok"
	}
}

func getJSON(ctx context.Context, s3c *s3.Client, key string, v any) error {
	out, err := s3c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(outBucket), Key: aws.String(key)})
	if err != nil {
		return err
	}
	defer out.Body.Close()
	return json.NewDecoder(out.Body).Decode(v)
}

// partitions are real Triton Inference Server processes serving the CPU
// model repository (pocketsphinx), each on fixed ports so that a restarted
// one comes back where the workers look for it.
type partitions struct {
	repo, dir string
	addrs     []string
	ports     [][3]int // gRPC, HTTP, metrics
	mu        sync.Mutex
	servers   map[int]*tritonproc.Server
}

func newPartitions(repo, dir string, n int) (*partitions, error) {
	p := &partitions{repo: repo, dir: dir, servers: map[int]*tritonproc.Server{}}
	for range n {
		var ports [3]int
		for k := range ports {
			port, err := tritonproc.FreePort()
			if err != nil {
				return nil, err
			}
			ports[k] = port
		}
		p.ports = append(p.ports, ports)
		p.addrs = append(p.addrs, "127.0.0.1:"+strconv.Itoa(ports[0]))
	}
	return p, nil
}

// start runs partition i and waits until it is ready.
func (p *partitions) start(ctx context.Context, i int) error {
	logf, err := os.OpenFile(filepath.Join(p.dir, fmt.Sprintf("partition-%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	s, err := tritonproc.Start(ctx, tritonproc.Options{Repo: p.repo, GRPCPort: p.ports[i][0], HTTPPort: p.ports[i][1],
		MetricsPort: p.ports[i][2], Log: logf, ReadyTimeout: 2 * time.Minute})
	if err != nil {
		_ = logf.Close()
		return err
	}
	p.mu.Lock()
	p.servers[i] = s
	p.mu.Unlock()
	return nil
}

// kill ends partition i with SIGKILL, in whatever batch it is running.
func (p *partitions) kill(i int) {
	p.mu.Lock()
	s := p.servers[i]
	delete(p.servers, i)
	p.mu.Unlock()
	if s != nil {
		s.Kill()
	}
}

func (p *partitions) stopAll() {
	for i := range p.addrs {
		p.kill(i)
	}
}

// workerSet is the worker processes.
type workerSet struct {
	bin, dir string
	env      []string
	mu       sync.Mutex
	procs    []*workerProc
	n        int
}

type workerProc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func (w *workerSet) spawn(ctx context.Context) (*workerProc, error) {
	w.n++
	logf, err := os.Create(filepath.Join(w.dir, fmt.Sprintf("worker-%d.log", w.n)))
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, w.bin)
	cmd.Env = append(os.Environ(), w.env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	wp := &workerProc{cmd: cmd, done: make(chan struct{})}
	go func() {
		// Transcripts are medical data: the worker never logs them, and the
		// log here holds only what it prints.
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			fmt.Fprintln(logf, sc.Text())
		}
		_ = cmd.Wait()
		_ = logf.Close()
		close(wp.done)
	}()
	return wp, nil
}

func (w *workerSet) start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, err := w.spawn(ctx)
	if err != nil {
		return err
	}
	w.procs = append(w.procs, p)
	return nil
}

func (w *workerSet) restart(ctx context.Context, i int) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, err := w.spawn(ctx)
	if err != nil {
		return err
	}
	w.procs[i] = p
	return nil
}

func (w *workerSet) kill(i int) {
	w.mu.Lock()
	p := w.procs[i]
	w.mu.Unlock()
	_ = p.cmd.Process.Kill()
	<-p.done
	removeRegions(p.cmd.Process.Pid)
}

// removeRegions removes the shared memory regions of a killed worker,
// which it could not remove itself (each run would otherwise leave some
// in the host's /dev/shm).
func removeRegions(pid int) {
	left, _ := filepath.Glob(filepath.Join(shm.Dir, triton.SharedMemoryPrefix(pid)+"*"))
	for _, f := range left {
		_ = os.Remove(f)
	}
}

// drain sends SIGTERM and waits for the worker to finish its jobs and exit.
func (w *workerSet) drain(i int) {
	w.mu.Lock()
	p := w.procs[i]
	w.mu.Unlock()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
}

func (w *workerSet) stopAll() {
	w.mu.Lock()
	procs := append([]*workerProc(nil), w.procs...)
	w.mu.Unlock()
	for _, p := range procs {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
			removeRegions(p.cmd.Process.Pid)
		}
	}
}

// ErrNotClean is returned by callers when a report is not clean.
var ErrNotClean = errors.New("chaos run lost, duplicated, mismatched or stranded jobs")
