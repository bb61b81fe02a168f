package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/internal/flagext"
	"github.com/fleetscribe/fleetscribe/internal/synth"
	"github.com/fleetscribe/fleetscribe/triton"
)

const rate = 16000

// Columns of the results CSV.
var columns = []string{"config", "workload", "concurrency", "completed", "seconds", "req_per_s", "audio_s_per_s",
	"p50_ms", "p95_ms", "p99_ms", "mean_batch", "gpu_util", "errors", "overloaded"}

type point struct {
	completed    int
	seconds      float64
	audioSeconds float64
	latencies    []time.Duration
	errors       int
}

func sweep(args []string, mix bool) error {
	fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
	var addrs, concs flagext.StringSliceCSV
	fs.Var(&addrs, "addrs", "partition addresses")
	fs.Var(&concs, "concurrency", "concurrencies to sweep (requests, or recordings for mix)")
	config := fs.String("config", "", "configuration name for the CSV")
	workload := fs.String("workload", "", "workload name for the CSV (default clip45 or mix)")
	clip := fs.Float64("clip-seconds", 45, "clip length (sweep)")
	dur := fs.Duration("duration", 15*time.Second, "measured time per point")
	warm := fs.Duration("warmup", 4*time.Second, "unmeasured time before each point")
	statsGlob := fs.String("stats", "", "glob of the servers' batch statistics files")
	out := fs.String("out", "results.csv", "CSV to append to")
	buckets := fs.String("buckets", "", "bucket lengths in seconds (bucket mode); empty: ragged")
	chunkSeconds := fs.Float64("chunk-seconds", 30, "the worker's -chunk-seconds (mix)")
	chunkPar := fs.Int("chunk-parallelism", 8, "the worker's -chunk-parallelism (mix)")
	maxInflight := fs.Int("max-inflight", 48, "the pool's -triton-max-inflight")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workload == "" {
		*workload = "clip45"
		if mix {
			*workload = "mix"
		}
	}
	io := triton.DefaultModelIO()
	io.TimestampsInput, io.WordsOutput = "", ""
	if *buckets != "" {
		for _, s := range strings.Split(*buckets, ",") {
			v, err := strconv.ParseFloat(s, 64)
			if err != nil {
				return err
			}
			io.Buckets = append(io.Buckets, int(v*rate))
		}
	}
	reg := prometheus.NewRegistry()
	pool, err := triton.NewPool(triton.PoolConfig{
		Addrs: addrs, MaxInflight: *maxInflight, RequestTimeout: 2 * time.Minute, Attempts: 5,
		BackoffBase: 5 * time.Millisecond, BackoffMax: 200 * time.Millisecond, EjectAfter: 3, HealthInterval: 5 * time.Second,
	}, io, reg)
	if err != nil {
		return err
	}
	defer pool.Close()
	ctx := context.Background()
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	err = pool.WaitReady(wctx)
	cancel()
	if err != nil {
		return err
	}
	rctx, stopHealth := context.WithCancel(ctx)
	var health sync.WaitGroup
	health.Go(func() { _ = pool.Run(rctx) })
	defer func() { stopHealth(); health.Wait() }()

	rng := rand.New(rand.NewPCG(1, 2))
	clipSamples := synth.SpeechLike(rng, int(*clip*rate), rate)
	for _, c := range concs {
		n, err := strconv.Atoi(c)
		if err != nil {
			return err
		}
		var work func(ctx context.Context, worker int, p *point, mu *sync.Mutex) error
		if mix {
			work = mixJob(pool, *chunkSeconds, *chunkPar)
		} else {
			work = clipRequest(pool, clipSamples)
		}
		before := batchStats(*statsGlob)
		overBefore := overloaded(reg)
		util := startUtil()
		p, err := run(ctx, n, *warm, *dur, work)
		gpu := util()
		if err != nil {
			return err
		}
		after := batchStats(*statsGlob)
		meanBatch := 0.0
		if b := after.batches - before.batches; b > 0 {
			meanBatch = float64(after.rows-before.rows) / float64(b)
		}
		row := []string{*config, *workload, c, strconv.Itoa(p.completed), f3(p.seconds),
			f3(float64(p.completed) / p.seconds), f3(p.audioSeconds / p.seconds),
			ms(pct(p.latencies, 0.5)), ms(pct(p.latencies, 0.95)), ms(pct(p.latencies, 0.99)),
			f3(meanBatch), f3(gpu), strconv.Itoa(p.errors), strconv.Itoa(int(overloaded(reg) - overBefore))}
		fmt.Println(strings.Join(row, "\t"))
		if err := appendCSV(*out, row); err != nil {
			return err
		}
	}
	return nil
}

// clipRequest sends the same clip as one request.
func clipRequest(pool *triton.Pool, clip []float32) func(context.Context, int, *point, *sync.Mutex) error {
	return func(ctx context.Context, _ int, p *point, mu *sync.Mutex) error {
		start := time.Now()
		_, err := pool.Transcribe(ctx, triton.Request{Samples: clip})
		record(p, mu, start, err, float64(len(clip))/rate)
		return nil
	}
}

// mixJob transcribes one recording from the length mix the way the worker
// does: split at quiet points, chunks in parallel.
func mixJob(pool *triton.Pool, chunkSeconds float64, par int) func(context.Context, int, *point, *sync.Mutex) error {
	return func(ctx context.Context, worker int, p *point, mu *sync.Mutex) error {
		rng := rand.New(rand.NewPCG(uint64(worker), uint64(time.Now().UnixNano())))
		sec := synth.RecordingSeconds(rng)
		x := synth.SpeechLike(rng, int(sec*rate), rate)
		chunks := audio.Split(x, audio.SplitConfig{Max: int(chunkSeconds * rate), Frame: rate * 30 / 1000})
		g, gctx := errgroup.WithContext(ctx)
		g.SetLimit(par)
		for _, c := range chunks {
			g.Go(func() error {
				t0 := time.Now()
				_, err := pool.Transcribe(gctx, triton.Request{Samples: c.Samples})
				record(p, mu, t0, err, float64(len(c.Samples))/rate) // per chunk: throughput counts audio as it completes
				return err
			})
		}
		return g.Wait()
	}
}

func record(p *point, mu *sync.Mutex, start time.Time, err error, audioSec float64) {
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
	if audioSec > 0 {
		p.completed++
		p.audioSeconds += audioSec
	}
}

// run keeps n workers busy for warm+dur and measures what completes in dur.
func run(ctx context.Context, n int, warm, dur time.Duration, work func(context.Context, int, *point, *sync.Mutex) error) (*point, error) {
	var mu sync.Mutex
	warmP, measured := &point{}, &point{}
	var phase atomic.Pointer[point]
	phase.Store(warmP)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			for ctx.Err() == nil {
				_ = work(ctx, i, phase.Load(), &mu)
			}
		})
	}
	time.Sleep(warm)
	start := time.Now()
	phase.Store(measured)
	time.Sleep(dur)
	mu.Lock()
	measured.seconds = time.Since(start).Seconds()
	snapshot := *measured
	snapshot.latencies = slices.Clone(measured.latencies)
	mu.Unlock()
	cancel()
	wg.Wait()
	return &snapshot, nil
}

type stats struct{ batches, rows int }

func batchStats(glob string) stats {
	var s stats
	if glob == "" {
		return s
	}
	files, _ := filepath.Glob(glob)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var v struct{ Batches, Rows int }
		if json.Unmarshal(b, &v) == nil {
			s.batches += v.Batches
			s.rows += v.Rows
		}
	}
	return s
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
