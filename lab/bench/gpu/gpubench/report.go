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
	ClipSeconds     float64 `json:"clip_seconds"`
	Batch1ClipsPerS float64 `json:"batch1_clips_per_s"`
	BestBatch       int     `json:"best_batch"`
	BestClipsPerS   float64 `json:"best_clips_per_s"`
	FLOPsPerClip    float64 `json:"flops_per_clip"`
	MatmulTFLOPs    float64 `json:"matmul_tflops"`
	Params          float64 `json:"params"`
	Device          string  `json:"device"`
}

type result struct {
	arrangement, kind, decoder, workload string
	encoder, cache                       string  // compiled or eager; the compile cache at start (cold, warm, none)
	ready                                float64 // seconds the partitions took to be ready
	conc, completed                      int
	seconds                              float64 // the measurement window
	reqPerS, audioPerS                   float64
	p50, p95, p99                        float64
	meanBatch, util                      float64
	errors, overloaded                   int
	queueMs, inputMs, inferMs, outputMs  float64
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
	legacy := len(rows) > 0 && slices.Equal(rows[0], legacyColumns)
	if len(rows) == 0 || !legacy && !slices.Equal(rows[0], columns) {
		return nil, fmt.Errorf("%s: not a results file of this version (header %v)", path, rows[:min(1, len(rows))])
	}
	var out []result
	for _, r := range rows[1:] {
		num := func(i int) float64 { v, _ := strconv.ParseFloat(r[i], 64); return v }
		res := result{encoder: "eager", cache: "none"}
		if !legacy {
			res.encoder, res.ready, res.cache = r[20], num(21), r[22]
		}
		out = append(out, result{
			encoder: res.encoder, ready: res.ready, cache: res.cache,
			arrangement: r[0], kind: r[1], decoder: r[2], workload: r[3], conc: int(num(4)), completed: int(num(5)),
			seconds: num(6), reqPerS: num(7), audioPerS: num(8), p50: num(9), p95: num(10), p99: num(11),
			meanBatch: num(12), util: num(13), errors: int(num(14)), overloaded: int(num(15)), queueMs: num(16), inputMs: num(17),
			inferMs: num(18), outputMs: num(19),
		})
	}
	return out, nil
}

// best returns the highest-throughput point without errors, whose p99 is
// within the limit, among those keep accepts.
func best(rs []result, p99Limit float64, keep func(result) bool) (result, bool) {
	var b result
	ok := false
	for _, r := range rs {
		if keep(r) && r.p99 <= p99Limit && r.errors == 0 && r.audioPerS > b.audioPerS {
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
	table := fs.String("table", "", "write the markdown tables here")
	limit := fs.Float64("p99-ms", 1000, "latency limit for the headline figures")
	workload := fs.String("workload", "clip45", "the fixed-clip workload of the headline figures")
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
	var arrangements []string
	for _, r := range rs {
		if !slices.Contains(arrangements, r.arrangement) {
			arrangements = append(arrangements, r.arrangement)
		}
	}
	var md strings.Builder
	md.WriteString("| arrangement | decoder | workload | concurrency | req/s | audio-s/s | p50 ms | p99 ms | mean batch | GPU util % | queue ms | input ms | infer ms | output ms | errors | overloaded |\n")
	md.WriteString("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		fmt.Fprintf(&md, "| %s | %s | %s | %d | %.1f | %.0f | %.0f | %.0f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f | %d | %d |\n",
			r.arrangement, r.decoder, r.workload, r.conc, r.reqPerS, r.audioPerS, r.p50, r.p99, r.meanBatch, r.util,
			r.queueMs, r.inputMs, r.inferMs, r.outputMs, r.errors, r.overloaded)
	}

	offlineAudio := o.BestClipsPerS * o.ClipSeconds
	flopBound := 0.0
	if o.FLOPsPerClip > 0 {
		flopBound = o.MatmulTFLOPs * 1e12 / o.FLOPsPerClip * o.ClipSeconds
	}
	ratio := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return a / b
	}
	clips := func(r result) bool { return r.workload == *workload && r.decoder == "cuda_graph" }
	bestOf := func(kind string) (result, bool) {
		return best(rs, *limit, func(r result) bool { return clips(r) && r.kind == kind })
	}
	top, _ := best(rs, *limit, clips)
	ts, _ := bestOf("timesliced")
	mpsBest, _ := bestOf("mps")
	inst, _ := bestOf("instances")

	fmt.Fprintf(&md, "\nBest point of each arrangement at p99 <= %.0f ms (%s):\n\n", *limit, *workload)
	md.WriteString("| arrangement | decoder | concurrency | audio-s/s | clips/s | p99 ms | mean batch | GPU util % | vs best time-sliced |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, a := range arrangements {
		r, ok := best(rs, *limit, func(r result) bool { return r.arrangement == a && r.workload == *workload })
		if !ok {
			continue
		}
		fmt.Fprintf(&md, "| %s | %s | %d | %.0f | %.1f | %.0f | %.1f | %.0f | %.2f |\n", a, r.decoder, r.conc, r.audioPerS,
			r.reqPerS, r.p99, r.meanBatch, r.util, ratio(r.audioPerS, ts.audioPerS))
	}
	if *table != "" {
		if err := os.WriteFile(*table, []byte(md.String()), 0o644); err != nil {
			return err
		}
	}
	fmt.Print(md.String())
	fmt.Printf("\noffline, one process: %.1f clips/s at batch 1, %.1f at batch %d (%.0f audio-s/s)\n", o.Batch1ClipsPerS, o.BestClipsPerS, o.BestBatch, offlineAudio)
	fmt.Printf("FLOP bound: %.2f TFLOP per %g-s clip at %.0f TFLOP/s dense bf16 = %.0f audio-s/s\n", o.FLOPsPerClip/1e12, o.ClipSeconds, o.MatmulTFLOPs, flopBound)
	mixBatched, _ := best(rs, 1e12, func(r result) bool { return r.workload == "mix" && !strings.HasSuffix(r.arrangement, "/unbatched") })
	mixUnbatched, _ := best(rs, 1e12, func(r result) bool { return r.workload == "mix" && strings.HasSuffix(r.arrangement, "/unbatched") })
	if *plotPath != "" {
		if err := drawPlot(rs, arrangements, *workload, *plotPath); err != nil {
			return err
		}
	}
	fmt.Printf("RESULT server=triton decoder=cuda_graph best_mode=%s served_audio_s_per_s=%.0f vs_offline=%.2f flop_fraction=%.2f p99_ms=%.0f mode_vs_timesliced=%.2f batching_speedup=%.2f best_timesliced=%s best_mps=%s mps_vs_timesliced=%.2f best_instances=%s instances_vs_timesliced=%.2f\n",
		orDash(top.arrangement), top.audioPerS, ratio(top.audioPerS, offlineAudio), ratio(top.audioPerS, flopBound), top.p99,
		ratio(top.audioPerS, ts.audioPerS), ratio(mixBatched.audioPerS, mixUnbatched.audioPerS),
		orDash(ts.arrangement), orDash(mpsBest.arrangement), ratio(mpsBest.audioPerS, ts.audioPerS),
		orDash(inst.arrangement), ratio(inst.audioPerS, ts.audioPerS))
	return nil
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func drawPlot(rs []result, arrangements []string, workload, path string) error {
	p := plot.New()
	p.Title.Text = "45-s clips through real Triton: throughput against p99 latency, one H200"
	p.X.Label.Text = "p99 latency (ms)"
	p.Y.Label.Text = "audio-seconds per second"
	p.Legend.Top = false
	p.Legend.Left = false
	palette := []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
		{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255},
		{0xbc, 0xbd, 0x22, 255}, {0x17, 0xbe, 0xcf, 255}}
	i := 0
	for _, a := range arrangements {
		var pts plotter.XYs
		for _, r := range rs {
			if r.arrangement == a && r.workload == workload && r.decoder == "cuda_graph" && r.errors == 0 && r.completed > 0 {
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
		if i >= len(palette) {
			line.Dashes = []vg.Length{vg.Points(4), vg.Points(2)}
		}
		p.Add(line, scatter)
		p.Legend.Add(a, line, scatter)
		i++
	}
	return p.Save(9*vg.Inch, 6*vg.Inch, path)
}
