package main

import (
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"image/color"
	"os"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// offline is what offline.py measured: one process, no server.
type offline struct {
	ClipSeconds       float64 `json:"clip_seconds"`
	Batch1ClipsPerS   float64 `json:"batch1_clips_per_s"`
	BestBatch         int     `json:"best_batch"`
	BestClipsPerS     float64 `json:"best_clips_per_s"`
	Batch128ClipsPerS float64 `json:"batch128_clips_per_s"`
	FLOPsPerClip      float64 `json:"flops_per_clip"`
	MatmulTFLOPs      float64 `json:"matmul_tflops"`
	Params            float64 `json:"params"`
	Device            string  `json:"device"`
}

type result struct {
	config, workload   string
	conc               int
	reqPerS, audioPerS float64
	p50, p95, p99      float64
	meanBatch, util    float64
	errors, overloaded int
	completed          int
}

func readResults(path string) ([]result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []result
	for _, r := range rows[1:] {
		if len(r) < len(columns) {
			continue
		}
		num := func(i int) float64 { v, _ := strconv.ParseFloat(r[i], 64); return v }
		out = append(out, result{
			config: r[0], workload: r[1], conc: int(num(2)), completed: int(num(3)),
			reqPerS: num(5), audioPerS: num(6), p50: num(7), p95: num(8), p99: num(9),
			meanBatch: num(10), util: num(11), errors: int(num(12)), overloaded: int(num(13)),
		})
	}
	return out, nil
}

// best returns the highest-throughput point of a configuration and
// workload whose p99 is within the limit.
func best(rs []result, config, workload string, p99Limit float64) (result, bool) {
	var b result
	ok := false
	for _, r := range rs {
		if r.config == config && r.workload == workload && r.p99 <= p99Limit && r.errors == 0 && r.audioPerS > b.audioPerS {
			b, ok = r, true
		}
	}
	return b, ok
}

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	in := fs.String("results", "docs/benchmarks/results.csv", "results CSV")
	off := fs.String("offline", "docs/benchmarks/offline.json", "offline reference")
	plotPath := fs.String("plot", "", "write a PNG of throughput against p99 here")
	table := fs.String("table", "", "write the markdown table here")
	limit := fs.Float64("p99-ms", 1000, "latency limit for the headline figures")
	if err := fs.Parse(args); err != nil {
		return err
	}
	rs, err := readResults(*in)
	if err != nil {
		return err
	}
	var o offline
	b, err := os.ReadFile(*off)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	var configs []string
	for _, r := range rs {
		if !slices.Contains(configs, r.config) {
			configs = append(configs, r.config)
		}
	}
	var md strings.Builder
	fmt.Fprintf(&md, "| configuration | workload | concurrency | req/s | audio-s/s | p50 ms | p95 ms | p99 ms | mean batch | GPU util %% | errors | overloaded |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&md, "| %s | %s | %d | %.1f | %.0f | %.0f | %.0f | %.0f | %.1f | %.0f | %d | %d |\n",
			r.config, r.workload, r.conc, r.reqPerS, r.audioPerS, r.p50, r.p95, r.p99, r.meanBatch, r.util, r.errors, r.overloaded)
	}
	if *table != "" {
		if err := os.WriteFile(*table, []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	fmt.Print(md.String())

	offlineAudio := o.BestClipsPerS * o.ClipSeconds
	flopBound := o.MatmulTFLOPs * 1e12 / o.FLOPsPerClip * o.ClipSeconds
	fmt.Printf("\noffline, one process: %.1f clips/s at batch 1, %.1f at batch %d (%.0f audio-s/s)\n", o.Batch1ClipsPerS, o.BestClipsPerS, o.BestBatch, offlineAudio)
	fmt.Printf("FLOP bound: %.2f TFLOP per %g-s clip at %.0f TFLOP/s dense bf16 = %.0f audio-s/s\n", o.FLOPsPerClip/1e12, o.ClipSeconds, o.MatmulTFLOPs, flopBound)
	fmt.Printf("\nbest point per configuration at p99 <= %.0f ms:\n", *limit)
	var bestServed result
	var bestMPS, timeSliced float64
	for _, c := range configs {
		r, ok := best(rs, c, "clip45", *limit)
		if !ok {
			continue
		}
		fmt.Printf("  %-22s %6.1f req/s %8.0f audio-s/s  p99 %5.0f ms  batch %.1f  (concurrency %d)\n", c, r.reqPerS, r.audioPerS, r.p99, r.meanBatch, r.conc)
		if r.audioPerS > bestServed.audioPerS {
			bestServed = r
		}
		if strings.HasPrefix(c, "mps") && r.audioPerS > bestMPS {
			bestMPS = r.audioPerS
		}
		if c == "timesliced-4" {
			timeSliced = r.audioPerS
		}
	}
	mixBatched, _ := best(rs, "mix-batched", "mix", 1e12)
	mixUnbatched, _ := best(rs, "mix-unbatched", "mix", 1e12)
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	if *plotPath != "" {
		if err := drawPlot(rs, configs, *plotPath); err != nil {
			return err
		}
	}
	fmt.Printf("RESULT mps_vs_timesliced=%.2f flop_fraction=%.2f vs_offline=%.2f batching_speedup=%.2f p99_ms=%.0f\n",
		ratio(bestMPS, timeSliced), ratio(bestServed.audioPerS, flopBound), ratio(bestServed.audioPerS, offlineAudio),
		ratio(mixBatched.audioPerS, mixUnbatched.audioPerS), bestServed.p99)
	return nil
}

func drawPlot(rs []result, configs []string, path string) error {
	p := plot.New()
	p.Title.Text = "45-s clips: throughput against p99 latency, one H200"
	p.X.Label.Text = "p99 latency (ms)"
	p.Y.Label.Text = "audio-seconds per second"
	p.Legend.Top = true
	p.Legend.Left = true
	palette := []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
		{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255}}
	i := 0
	for _, c := range configs {
		var pts plotter.XYs
		for _, r := range rs {
			if r.config == c && r.workload == "clip45" && r.errors == 0 {
				pts = append(pts, plotter.XY{X: r.p99, Y: r.audioPerS})
			}
		}
		if len(pts) == 0 {
			continue
		}
		line, scatter, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		col := palette[i%len(palette)]
		line.Color, scatter.Color = col, col
		scatter.Shape = draw.CircleGlyph{}
		p.Add(line, scatter)
		p.Legend.Add(c, line, scatter)
		i++
	}
	return p.Save(8*vg.Inch, 5*vg.Inch, path)
}
