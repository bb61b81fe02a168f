package main

import (
	"flag"
	"fmt"
	"math"
	"strings"
)

// diarizeReport is `gpubench diarize -results F...`: the side-by-side
// points of the diarize model (workloads W, W+diarize, W-diarize-only of
// one arrangement and concurrency, measured one after another on the same
// partitions) as a table, a row each run (a point measured again, in
// another file or later in one, is another run), and the RESULT line of
// the point of the 45-s clips with diarization measured at least
// -min-runs times whose runs all stayed within the chunk latency limit
// and served most on their mean (where none did, the closest to it,
// within_p99_limit=false): each figure the mean of its runs, the p99 the
// worst, the ratio's spread over the runs beside it, with the length
// mix's ratio where it was measured within the limit (from its runs,
// however few: mix_runs says how many) and the speech model's encoder
// (compiled or eager).
func diarizeReport(args []string) error {
	fs := flag.NewFlagSet("diarize", flag.ContinueOnError)
	var paths stringList
	fs.Var(&paths, "results", "results CSV (repeatable)")
	limit := fs.Float64("p99-ms", 1500, "chunk latency limit of the headline point")
	clip := fs.String("workload", "clip45", "the clip workload of the headline figures")
	minRuns := fs.Int("min-runs", 1, "runs a point needs to be the headline (the figures that hold: 2)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var rs []result
	for _, p := range paths {
		got, err := readResults(p)
		if err != nil {
			return err
		}
		rs = append(rs, got...)
	}
	points, order := diarizeRuns(rs)
	fmt.Println("| arrangement | workload | in flight | speech only audio-s/s | p99 ms | speech + diarization audio-s/s | p99 ms | ratio | diarization alone audio-s/s | p99 ms | its mean batch |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range order {
		for _, t := range points[k] {
			if t.on == nil || t.off == nil {
				continue
			}
			onlyAudio, onlyP99, onlyBatch := 0.0, 0.0, 0.0
			if t.only != nil {
				onlyAudio, onlyP99, onlyBatch = t.only.audioPerS, t.only.p99, t.only.meanBatch
			}
			fmt.Printf("| %s | %s | %d | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %.1f |\n", k.arrangement, k.base, k.conc,
				t.off.audioPerS, t.off.p99, t.on.audioPerS, t.on.p99, t.on.audioPerS/t.off.audioPerS, onlyAudio, onlyP99, onlyBatch)
		}
	}
	var head, mix, over *diarizePoint
	bestDiar := 0.0
	for _, k := range order {
		p := summarize(points[k], *limit)
		if p == nil {
			continue
		}
		// The length mix's ratio is reported from however many runs it
		// has (mix_runs says how many): one measured run is a figure, not
		// a zero.
		if strings.HasPrefix(k.base, "mix") && p.within && (mix == nil || p.on > mix.on) {
			mix = p
		}
		if p.runs < *minRuns {
			continue
		}
		if p.onlyWithin && p.only > bestDiar {
			bestDiar = p.only
		}
		if k.base == *clip {
			if p.within && (head == nil || p.on > head.on) {
				head = p
			}
			if over == nil || p.p99 < over.p99 {
				over = p
			}
		}
	}
	within := head != nil
	if !within {
		// No point meets the limit: the one closest to it, said so.
		if head = over; head == nil {
			return fmt.Errorf("no %s point with diarization without errors measured %d times or more", *clip, *minRuns)
		}
	}
	mixRatio, mixRuns := 0.0, 0
	if mix != nil {
		mixRatio, mixRuns = mix.ratio, mix.runs
	}
	if bestDiar == 0 {
		bestDiar = head.only
	}
	fmt.Printf("RESULT model=sortformer asr_only_audio_s_per_s=%.0f asr_diar_audio_s_per_s=%.0f ratio=%.2f diar_only_audio_s_per_s=%.0f p99_ms=%.0f mix_ratio=%.2f mix_runs=%d within_p99_limit=%t asr_encoder=%s runs=%d ratio_min=%.2f ratio_max=%.2f\n",
		head.off, head.on, head.ratio, bestDiar, head.p99, mixRatio, mixRuns, within, head.encoder, head.runs, head.ratioMin, head.ratioMax)
	return nil
}

type diarizeKey struct {
	arrangement, base string
	conc              int
}

// diarizeTrio is one run of a point: speech only, speech and diarization,
// diarization alone.
type diarizeTrio struct{ off, on, only *result }

// diarizeRuns groups the results into points and each point's runs, in
// the order they were first measured: a mode seen again for a point
// begins its next run.
func diarizeRuns(rs []result) (map[diarizeKey][]*diarizeTrio, []diarizeKey) {
	points := map[diarizeKey][]*diarizeTrio{}
	var order []diarizeKey
	for i := range rs {
		r := &rs[i]
		base, mode := r.workload, "off"
		if b, ok := strings.CutSuffix(base, "+diarize"); ok {
			base, mode = b, "on"
		} else if b, ok := strings.CutSuffix(base, "-diarize-only"); ok {
			base, mode = b, "only"
		}
		k := diarizeKey{r.arrangement, base, r.conc}
		runs := points[k]
		if runs == nil {
			order = append(order, k)
		}
		if n := len(runs); n == 0 || *runs[n-1].slot(mode) != nil {
			runs = append(runs, &diarizeTrio{})
			points[k] = runs
		}
		*runs[len(runs)-1].slot(mode) = r
	}
	return points, order
}

// slot is where the trio keeps the result of mode (off, on or only).
func (t *diarizeTrio) slot(mode string) **result {
	switch mode {
	case "on":
		return &t.on
	case "only":
		return &t.only
	}
	return &t.off
}

// diarizePoint is a point's runs summed up: means, the worst p99, the
// ratio's spread, and whether every run stayed within the limit.
type diarizePoint struct {
	runs                      int
	off, on, only             float64
	ratio, ratioMin, ratioMax float64
	p99                       float64
	within, onlyWithin        bool
	encoder                   string
}

// summarize is the point of runs with both speech only and speech and
// diarization, none with errors; nil where it has none.
func summarize(runs []*diarizeTrio, limit float64) *diarizePoint {
	p := &diarizePoint{within: true, onlyWithin: true, ratioMin: math.Inf(1)}
	onlyRuns := 0
	for _, t := range runs {
		if t.on == nil || t.off == nil || t.on.errors > 0 {
			continue
		}
		p.runs++
		ratio := t.on.audioPerS / t.off.audioPerS
		p.off += t.off.audioPerS
		p.on += t.on.audioPerS
		p.ratio += ratio
		p.ratioMin, p.ratioMax = min(p.ratioMin, ratio), max(p.ratioMax, ratio)
		p.p99 = max(p.p99, t.on.p99)
		p.within = p.within && t.on.p99 <= limit
		p.encoder = t.off.encoder
		if t.only != nil {
			onlyRuns++
			p.only += t.only.audioPerS
			p.onlyWithin = p.onlyWithin && t.only.errors == 0 && t.only.p99 <= limit
		}
	}
	if p.runs == 0 {
		return nil
	}
	n := float64(p.runs)
	p.off, p.on, p.ratio = p.off/n, p.on/n, p.ratio/n
	if onlyRuns > 0 {
		p.only /= float64(onlyRuns)
	} else {
		p.onlyWithin = false
	}
	return p
}
