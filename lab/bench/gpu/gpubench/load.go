package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/procstat"
	"github.com/fleetscribe/fleetscribe/lab/kit/synth"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

const rate = modelspec.SampleRate

// Columns of the results CSV.
var columns = []string{"arrangement", "kind", "decoder", "workload", "concurrency", "completed", "seconds", "req_per_s",
	"audio_s_per_s", "p50_ms", "p95_ms", "p99_ms", "mean_batch", "gpu_util", "errors", "overloaded", "queue_ms", "input_ms",
	"infer_ms", "output_ms", "encoder", "ready_s", "compile_cache"}

// legacyColumns are the columns of results written before the encoder was
// compiled: every one of them ran eagerly.
var legacyColumns = columns[:20]

// loadConfig is one workload against one arrangement's partitions.
type loadConfig struct {
	addrs        []string
	mix          bool     // recordings of the realistic length mix, chunked as the worker does; else fixed clips
	clipSeconds  float64  // fixed clips
	chunkSeconds float64  // the worker's -chunk-seconds (mix)
	chunkPar     int      // the worker's -chunk-parallelism (mix)
	inflight     int      // the worker's -triton-max-inflight (mix): chunks past it wait in the pool, as the worker's do
	quietest     bool     // the mix chunked by splitQuietest (workload mix-quietest), not the worker's audio.Split
	diarize      []string // each point's diarization, a row each: off, on (speech and diarization), only
	vocabulary   []string // sent with every transcription request (nil: none)
	warm, dur    time.Duration
	concurrency  []int // requests (clips) or recordings (mix) in flight
	diarizePack  int   // the pool's DiarizePack (arrangement /diarpackN)
}

type point struct {
	completed    int
	seconds      float64
	audioSeconds float64
	latencies    []time.Duration
	errors       int
	// Beside each other (mode on): the speech requests' and the diarize
	// requests' own latencies, to tell which one makes a tail.
	speech, diarize []time.Duration
}

// measure runs the workload at each concurrency through the project's own
// triton.Pool (shared memory, word timestamps, as the worker sends) and
// returns one row per point (columns from "workload" on).
func measure(ctx context.Context, lc loadConfig) ([][]string, error) {
	maxSamples := int(lc.clipSeconds * rate)
	if lc.mix {
		maxSamples = int(lc.chunkSeconds * rate)
	}
	// Clips: the concurrency is what is in flight. The mix: what the worker
	// keeps in flight a partition, the rest of a recording's chunks waiting
	// in the pool (their latency counts that wait, as a job's does).
	inflight := slices.Max(lc.concurrency)
	if lc.mix {
		inflight = lc.inflight
	}
	reg := prometheus.NewRegistry()
	pool, err := triton.NewPool(triton.PoolConfig{
		Addrs: lc.addrs, MaxInflight: inflight, RequestTimeout: 2 * time.Minute, Attempts: 5,
		BackoffBase: 5 * time.Millisecond, BackoffMax: 200 * time.Millisecond, EjectAfter: 3, HealthInterval: 5 * time.Second,
		SharedMemory: true, ChunkSamples: maxSamples, DiarizePack: lc.diarizePack,
	}, triton.DefaultModelIO(), reg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = pool.WaitReady(wctx)
	cancel()
	if err != nil {
		return nil, err
	}
	rctx, stopHealth := context.WithCancel(ctx)
	var health sync.WaitGroup
	health.Go(func() { _ = pool.Run(rctx) })
	defer func() { stopHealth(); health.Wait() }()
	stats, err := dialStats(lc.addrs)
	if err != nil {
		return nil, err
	}
	defer stats.close()

	rng := rand.New(rand.NewPCG(1, 2))
	clip := synth.SpeechLike(rng, int(lc.clipSeconds*rate), rate)
	modes := lc.diarize
	if len(modes) == 0 {
		modes = []string{"off"}
	}
	var rows [][]string
	for _, n := range lc.concurrency {
		for _, mode := range modes {
			row, err := measurePoint(ctx, lc, pool, reg, stats, clip, n, mode)
			if err != nil {
				return nil, err
			}
			rows = append(rows, row)
		}
	}
	if r, of := sharedMemory(reg); r < of || of == 0 {
		fmt.Printf("# audio through shared memory to %d of %d partitions (the rest in the request)\n", r, of)
	}
	return rows, nil
}

// measurePoint is one point: n clips or recordings in flight, diarized as
// mode says (off, on, only). Its workload is named with the mode
// (clip45, clip45+diarize, clip45-diarize-only; mix, ...).
func measurePoint(ctx context.Context, lc loadConfig, pool *triton.Pool, reg *prometheus.Registry, stats *partitionStats, clip []float32, n int, mode string) ([]string, error) {
	work := clipRequest(pool, clip, mode, lc.vocabulary)
	workload := fmt.Sprintf("clip%g", lc.clipSeconds)
	if lc.mix {
		split, name := workerChunks, "mix"
		if lc.quietest {
			split, name = splitQuietest, "mix-quietest"
		}
		work, workload = mixJob(pool, lc.chunkSeconds, lc.chunkPar, split, mode, lc.vocabulary), name
	}
	switch mode {
	case "on":
		workload += "+diarize"
	case "only":
		workload += "-diarize-only"
	}
	var before, after, dBefore, dAfter modelStats
	var cpuBefore, cpuAfter cpuTimes
	overBefore := overloaded(reg)
	p := run(ctx, n, lc.warm, lc.dur, work, func() {
		before, dBefore, cpuBefore = stats.sum(ctx, modelspec.Name), stats.sum(ctx, modelspec.DiarizeName), readCPU()
	}, func() {
		after, dAfter, cpuAfter = stats.sum(ctx, modelspec.Name), stats.sum(ctx, modelspec.DiarizeName), readCPU()
	})
	fmt.Printf("# %s at %d: host CPUs %.1f of %d busy (%s), this load generator %.1f\n", workload, n,
		cpuAfter.busyCores(cpuBefore), runtime.NumCPU(), cpuAfter.byGroup(cpuBefore), cpuAfter.selfCores(cpuBefore))
	meanBatch, queueMs, inputMs, inferMs, outputMs := perRequest(after, before)
	if mode != "off" {
		b, q, _, inf, _ := perRequest(dAfter, dBefore)
		fmt.Printf("# %s at %d: diarize model %d requests, mean batch %.1f, queue %.1f ms, infer %.1f ms a request\n",
			workload, n, dAfter.requests-dBefore.requests, b, q, inf)
		if mode == "on" {
			fmt.Printf("# %s at %d: %s\n", workload, n, sideBySide(p.point))
		}
		if mode == "only" {
			meanBatch, queueMs, inputMs, inferMs, outputMs = perRequest(dAfter, dBefore)
		}
	}
	return []string{workload, strconv.Itoa(n), strconv.Itoa(p.completed), f3(p.seconds),
		f3(float64(p.completed) / p.seconds), f3(p.audioSeconds / p.seconds),
		ms(pct(p.latencies, 0.5)), ms(pct(p.latencies, 0.95)), ms(pct(p.latencies, 0.99)),
		f3(meanBatch), f3(p.util), strconv.Itoa(p.errors), strconv.Itoa(int(overloaded(reg) - overBefore)),
		f3(queueMs), f3(inputMs), f3(inferMs), f3(outputMs)}, nil
}

// diarizeRecording sends a recording's chunks to the diarize model one
// after another, each with the state the last returned, the last
// finishing, as the worker does; each chunk's latency is recorded (its
// audio with audio, else latency only).
func diarizeRecording(ctx context.Context, pool *triton.Pool, chunks [][]float32, phase *atomic.Pointer[point], mu *sync.Mutex, audio bool) error {
	var state []byte
	for i, c := range chunks {
		t0 := time.Now()
		res, err := pool.Diarize(ctx, triton.DiarizeRequest{Samples: c, State: state, Finish: i == len(chunks)-1})
		sec := 0.0
		if audio {
			sec = float64(len(c)) / rate
		}
		record(phase.Load(), mu, t0, err, sec, audio)
		if err != nil {
			return err
		}
		state = res.State
	}
	return nil
}

// clipRequest sends the same clip as one request (mode off), with its
// diarization beside it (on: the clip is done when both are), or its
// diarization alone (only).
func clipRequest(pool *triton.Pool, clip []float32, mode string, vocabulary []string) func(context.Context, int, *atomic.Pointer[point], *sync.Mutex) error {
	return func(ctx context.Context, _ int, phase *atomic.Pointer[point], mu *sync.Mutex) error {
		p := phase.Load() // a clip counts in the window it started in, as before
		start := time.Now()
		var err error
		switch mode {
		case "only":
			return diarizeRecording(ctx, pool, [][]float32{clip}, phase, mu, true)
		case "on":
			// The clip's latency is until both are done; the diarization's
			// own is recorded too, without audio.
			g, gctx := errgroup.WithContext(ctx)
			g.Go(func() error { return diarizeRecording(gctx, pool, [][]float32{clip}, phase, mu, false) })
			t0 := time.Now()
			_, err = pool.Transcribe(gctx, triton.Request{Samples: clip, Timestamps: true, Vocabulary: vocabulary})
			recordSpeech(p, mu, t0, err)
			if derr := g.Wait(); err == nil {
				err = derr
			}
		default:
			_, err = pool.Transcribe(ctx, triton.Request{Samples: clip, Timestamps: true, Vocabulary: vocabulary})
		}
		record(p, mu, start, err, float64(len(clip))/rate, true)
		return nil
	}
}

// mixJob transcribes one recording from the length mix the way the worker
// does: cut by split (workerChunks, the worker's rule) into chunks of at
// most chunkSeconds, overlapping by a second where a cut is not in a pause,
// par chunks in flight.
//
// With mode on, the chunks also go to the diarize model one after another
// (diarizeRecording) while they are transcribed, as the worker does a job
// that asks for speakers, and the recording is done when both are; with
// mode only, they go to the diarize model alone.
func mixJob(pool *triton.Pool, chunkSeconds float64, par int, split func([]float32, audio.SplitConfig) [][]float32, mode string, vocabulary []string) func(context.Context, int, *atomic.Pointer[point], *sync.Mutex) error {
	return func(ctx context.Context, client int, phase *atomic.Pointer[point], mu *sync.Mutex) error {
		rng := rand.New(rand.NewPCG(uint64(client), uint64(time.Now().UnixNano())))
		sec := synth.RecordingSeconds(rng)
		x := synth.SpeechLike(rng, int(sec*rate), rate)
		chunks := split(x, audio.ChunkSplit(modelspec.SampleRate, chunkSeconds, audio.StitchOverlap))
		if mode == "only" {
			return diarizeRecording(ctx, pool, chunks, phase, mu, true)
		}
		g, gctx := errgroup.WithContext(ctx)
		var dz errgroup.Group
		if mode == "on" {
			dz.Go(func() error { return diarizeRecording(ctx, pool, chunks, phase, mu, false) }) // not gctx: it ends when g.Wait returns
		}
		g.SetLimit(par)
		for _, c := range chunks {
			g.Go(func() error {
				t0 := time.Now()
				_, err := pool.Transcribe(gctx, triton.Request{Samples: c, Timestamps: true, Vocabulary: vocabulary})
				// Per chunk, in the window it completes in: a recording begun
				// in the warm-up counts what it finishes in the measured one.
				record(phase.Load(), mu, t0, err, float64(len(c))/rate, true)
				if mode == "on" {
					recordSpeech(phase.Load(), mu, t0, err)
				}
				return err
			})
		}
		err := g.Wait()
		if derr := dz.Wait(); err == nil {
			err = derr
		}
		return err
	}
}

// synthVocabulary is n phrases of one to three made-up lowercase words (a
// fixed seed): what a 1,000-phrase vocabulary costs the decoder, which
// NeMo's random-weight model spells as any lowercase text.
func synthVocabulary(n int) []string {
	rng := rand.New(rand.NewPCG(7, 11))
	word := func() string {
		b := make([]byte, 4+rng.IntN(7))
		for i := range b {
			b[i] = byte('a' + rng.IntN(26))
		}
		return string(b)
	}
	out := make([]string, n)
	for i := range out {
		w := []string{word()}
		for range rng.IntN(3) {
			w = append(w, word())
		}
		out[i] = strings.Join(w, " ")
	}
	return out
}

// record counts a request that ended: its latency, and with counted its
// completion and audio (a diarization beside a transcription adds its
// latency only, which is also kept as the diarize requests' own: the
// recording's audio is counted once).
func record(p *point, mu *sync.Mutex, start time.Time, err error, audioSec float64, counted bool) {
	d := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		if !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
			p.errors++
		}
		return
	}
	p.latencies = append(p.latencies, d)
	if counted {
		p.completed++
		p.audioSeconds += audioSec
	} else {
		p.diarize = append(p.diarize, d)
	}
}

// recordSpeech keeps the own latency of a speech request that ran beside
// its recording's diarization, where it ended without error.
func recordSpeech(p *point, mu *sync.Mutex, start time.Time, err error) {
	if err != nil {
		return
	}
	d := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	p.speech = append(p.speech, d)
}

// sideBySide is the log line of the two models' own latencies beside
// each other: where a point's tail comes from.
func sideBySide(p point) string {
	q := func(l []time.Duration) string {
		if len(l) == 0 {
			return "none"
		}
		return fmt.Sprintf("%s/%s/%s (slowest %s)", ms(pct(l, 0.5)), ms(pct(l, 0.95)), ms(pct(l, 0.99)), ms(slices.Max(l)))
	}
	return fmt.Sprintf("speech requests p50/p95/p99 ms %s, diarize requests %s", q(p.speech), q(p.diarize))
}

// measured is a point's figures plus the GPU utilisation over its window.
type measured struct {
	point
	util float64
}

// run keeps n workers busy for warm+dur and measures what completes in dur;
// begin and end run at the measured window's edges.
func run(ctx context.Context, n int, warm, dur time.Duration, work func(context.Context, int, *atomic.Pointer[point], *sync.Mutex) error, begin, end func()) measured {
	var mu sync.Mutex
	warmP, cur := &point{}, &point{}
	var phase atomic.Pointer[point]
	phase.Store(warmP)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = work(ctx, i, &phase, &mu)
			}
		})
	}
	sleep(ctx, warm)
	begin()
	util := startUtil()
	start := time.Now()
	phase.Store(cur)
	sleep(ctx, dur)
	mu.Lock()
	cur.seconds = time.Since(start).Seconds()
	out := measured{point: *cur, util: util()}
	out.latencies = slices.Clone(cur.latencies)
	out.speech, out.diarize = slices.Clone(cur.speech), slices.Clone(cur.diarize)
	mu.Unlock()
	end()
	cancel()
	wg.Wait()
	return out
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// partitionStats reads each partition's Triton statistics over gRPC: where
// a request's time went (queue, input, infer, output), beside batch counts.
type partitionStats struct {
	conns []*grpc.ClientConn
}

// modelStats are the model's cumulative counts, summed over partitions.
type modelStats struct {
	requests, rows, executions          uint64
	queueNs, inputNs, inferNs, outputNs uint64
}

func dialStats(addrs []string) (*partitionStats, error) {
	s := &partitionStats{}
	for _, a := range addrs {
		c, err := grpc.NewClient(a, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			s.close()
			return nil, err
		}
		s.conns = append(s.conns, c)
	}
	return s, nil
}

func (s *partitionStats) sum(ctx context.Context, model string) modelStats {
	var t modelStats
	for _, c := range s.conns {
		r, err := pb.NewGRPCInferenceServiceClient(c).ModelStatistics(ctx, &pb.ModelStatisticsRequest{Name: model})
		if err != nil {
			continue
		}
		for _, m := range r.GetModelStats() {
			is := m.GetInferenceStats()
			t.requests += is.GetSuccess().GetCount() + is.GetFail().GetCount()
			t.rows += m.GetInferenceCount()
			t.executions += m.GetExecutionCount()
			t.queueNs += is.GetQueue().GetNs()
			t.inputNs += is.GetComputeInput().GetNs()
			t.inferNs += is.GetComputeInfer().GetNs()
			t.outputNs += is.GetComputeOutput().GetNs()
		}
	}
	return t
}

func (s *partitionStats) close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
}

// perRequest is after-before as mean batch and milliseconds per request.
func perRequest(after, before modelStats) (meanBatch float64, queue, input, infer, output float64) {
	req := float64(after.requests - before.requests)
	if e := after.executions - before.executions; e > 0 {
		meanBatch = float64(after.rows-before.rows) / float64(e)
	}
	if req == 0 {
		return meanBatch, 0, 0, 0, 0
	}
	ms := func(a, b uint64) float64 { return float64(a-b) / req / 1e6 }
	return meanBatch, ms(after.queueNs, before.queueNs), ms(after.inputNs, before.inputNs), ms(after.inferNs, before.inferNs), ms(after.outputNs, before.outputNs)
}

// sharedMemory is how many partitions the pool's audio reaches through
// shared memory (registered regions), of how many.
func sharedMemory(reg *prometheus.Registry) (registered, of int) {
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "fleetscribe_triton_shared_memory" {
			continue
		}
		for _, m := range mf.GetMetric() {
			of++
			if m.GetGauge().GetValue() == 1 {
				registered++
			}
		}
	}
	return registered, of
}

func overloaded(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "fleetscribe_triton_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == "overloaded" {
					total += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total
}

// startUtil samples GPU utilisation with nvidia-smi until the returned
// function is called, which returns the mean (-1 without nvidia-smi).
func startUtil() func() float64 {
	cmd := exec.Command("nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits", "-lms", "200")
	outp, err := cmd.StdoutPipe()
	if err != nil || cmd.Start() != nil {
		return func() float64 { return -1 }
	}
	var mu sync.Mutex
	var sum, n float64
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		var line []byte
		for {
			k, err := outp.Read(buf)
			for _, c := range buf[:k] {
				if c != '\n' {
					line = append(line, c)
					continue
				}
				if v, err := strconv.ParseFloat(strings.TrimSpace(string(line)), 64); err == nil {
					mu.Lock()
					sum, n = sum+v, n+1
					mu.Unlock()
				}
				line = line[:0]
			}
			if err != nil {
				return
			}
		}
	}()
	return func() float64 {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if n == 0 {
			return -1
		}
		return sum / n
	}
}

func appendCSV(path string, row []string) error {
	_, statErr := os.Stat(path)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if statErr != nil {
		_ = w.Write(columns)
	}
	_ = w.Write(row)
	w.Flush()
	if err := w.Error(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func pct(l []time.Duration, p float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond)) }
func f3(v float64) string       { return strconv.FormatFloat(v, 'f', 3, 64) }

// cpuTimes is what the host's CPUs and this process had spent at one
// moment: where the served path runs out of CPUs (eight Triton servers,
// eight stubs and the load on one host), the GPU waits.
type cpuTimes struct {
	at         time.Time
	busy, all  float64 // /proc/stat jiffies: busy (all but idle and iowait) and all
	self       time.Duration
	procStatOK bool
	procs      map[int]procCPU // every process's CPU so far, by pid
}

// procCPU is one process's group and CPU time so far (jiffies); diarize:
// a stub serving the diarize model.
type procCPU struct {
	group   string
	ticks   float64
	diarize bool
}

// cpuGroups names the processes whose CPU a point reports: Triton's
// servers, their Python-backend stubs (where the model runs) and the MPS
// server; the rest is "other".
var cpuGroups = []struct{ comm, group string }{
	{"tritonserver", "servers"},
	{"triton_python_b", "stubs"}, // the stub's name, cut to 15 characters
	{"nvidia-cuda-mps", "mps"},
}

// readProcs reads every process's CPU time (procstat.Named).
func readProcs() map[int]procCPU {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	procs := make(map[int]procCPU, len(ents))
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, cpu, err := procstat.Named(pid)
		if err != nil {
			continue // gone since the listing
		}
		group := "other"
		for _, g := range cpuGroups {
			if strings.HasPrefix(comm, g.comm) {
				group = g.group
			}
		}
		procs[pid] = procCPU{group: group, ticks: cpu.Seconds() * 100, diarize: group == "stubs" && servesDiarize(pid)} // jiffies (USER_HZ)
	}
	return procs
}

// servesDiarize is whether the Python-backend stub pid serves the diarize
// model: its first argument is the model's file (.../diarize/1/model.py).
func servesDiarize(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 1 && strings.Contains(args[1], "/"+modelspec.DiarizeName+"/")
}

// byGroup is how many CPUs each group of processes used on average since
// b, counting the processes alive at both readings, and of the stubs those
// of the diarize model and the busiest stub of each model: a stub near
// 1.0 is a partition's model process that its one Python thread bounds
// ("servers 2.1, stubs 8.0 (diarize 3.1; busiest speech 0.6, diarize
// 0.9), mps 0.1, other 1.3").
func (t cpuTimes) byGroup(b cpuTimes) string {
	wall := t.at.Sub(b.at).Seconds()
	if wall <= 0 || t.procs == nil || b.procs == nil {
		return "per process: unknown"
	}
	used := map[string]float64{}
	var diarize, busiestSpeech, busiestDiarize float64
	for pid, p := range t.procs {
		q, ok := b.procs[pid]
		if !ok || q.group != p.group || p.ticks < q.ticks {
			continue
		}
		cpus := (p.ticks - q.ticks) / 100 / wall // USER_HZ
		used[p.group] += cpus
		switch {
		case p.group == "stubs" && p.diarize:
			diarize += cpus
			busiestDiarize = max(busiestDiarize, cpus)
		case p.group == "stubs":
			busiestSpeech = max(busiestSpeech, cpus)
		}
	}
	var parts []string
	for _, g := range append(cpuGroups, struct{ comm, group string }{"", "other"}) {
		part := fmt.Sprintf("%s %.1f", g.group, used[g.group])
		if g.group == "stubs" {
			part += fmt.Sprintf(" (diarize %.1f; busiest speech %.2f, diarize %.2f)", diarize, busiestSpeech, busiestDiarize)
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

func readCPU() cpuTimes {
	t := cpuTimes{at: time.Now(), procs: readProcs()}
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		t.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return t
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 5 || f[0] != "cpu" {
		return t
	}
	for i, v := range f[1:] {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return t
		}
		t.all += x
		if i != 3 && i != 4 { // idle, iowait
			t.busy += x
		}
	}
	t.procStatOK = true
	return t
}

// busyCores is how many of the host's CPUs were busy on average since b.
func (t cpuTimes) busyCores(b cpuTimes) float64 {
	if !t.procStatOK || !b.procStatOK || t.all <= b.all {
		return -1
	}
	return (t.busy - b.busy) / (t.all - b.all) * float64(runtime.NumCPU())
}

// selfCores is how many CPUs this process used on average since b.
func (t cpuTimes) selfCores(b cpuTimes) float64 {
	wall := t.at.Sub(b.at)
	if wall <= 0 {
		return 0
	}
	return float64(t.self-b.self) / float64(wall)
}

// workerChunks are the samples of the chunks audio.Split cuts, as the
// worker cuts them.
func workerChunks(x []float32, cfg audio.SplitConfig) [][]float32 {
	var out [][]float32
	for _, c := range audio.Split(x, cfg) {
		out = append(out, c.Samples)
	}
	return out
}

// splitQuietest chunks x by the rule audio.Split had before it cut at the
// last pause of each window: at the window's quietest frame, wherever in
// its second half that is (chunks of 15-30 s, padded to 30 s by the
// compiled encoder), overlapping where that frame is not a pause. Kept in
// the lab only to measure the two rules side by side (-split quietest).
func splitQuietest(x []float32, cfg audio.SplitConfig) [][]float32 {
	frame := cfg.Frame
	if frame <= 0 || frame > cfg.Max/4 {
		frame = max(1, cfg.Max/64)
	}
	overlap := min(max(cfg.Overlap, 0), cfg.Max/4)
	var out [][]float32
	start := 0
	for len(x)-start > cfg.Max {
		lo, hi := start+cfg.Max/2, start+cfg.Max
		best, bestE := hi, math.Inf(1)
		var energies []float64
		for f := lo; f+frame <= hi; f += max(1, frame/2) {
			var e float64
			for _, v := range x[f : f+frame] {
				e += float64(v) * float64(v)
			}
			energies = append(energies, e)
			if e < bestE {
				best, bestE = f+frame/2, e
			}
		}
		pause := true
		if len(energies) > 0 {
			sorted := slices.Clone(energies)
			slices.Sort(sorted)
			pause = bestE <= 0.01*sorted[len(sorted)/2]
		}
		cut := min(max(best, start+1), start+cfg.Max)
		out = append(out, x[start:cut])
		next := cut
		if !pause && overlap > 0 && cut-overlap > start {
			next = cut - overlap
		}
		start = next
	}
	return append(out, x[start:])
}
