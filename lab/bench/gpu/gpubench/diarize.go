package main

import (
	"errors"
	"flag"
	"fmt"
	"strings"
)

// diarizeReport is `gpubench diarize -results F...`: the side-by-side
// points of the diarize model (workloads W, W+diarize, W-diarize-only of
// one arrangement and concurrency, measured one after another on the same
// partitions) as a table, and the RESULT line of the best point of the
// 45-s clips with diarization within the chunk latency limit (where none
// is, the closest to it, within_p99_limit=false), beside the speech-only
// point of the same run, with the length mix's ratio where it was
// measured and the speech model's encoder (compiled or eager).
func diarizeReport(args []string) error {
	fs := flag.NewFlagSet("diarize", flag.ContinueOnError)
	var paths stringList
	fs.Var(&paths, "results", "results CSV (repeatable)")
	limit := fs.Float64("p99-ms", 1500, "chunk latency limit of the headline point")
	clip := fs.String("workload", "clip45", "the clip workload of the headline figures")
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
	type key struct {
		arrangement, base string
		conc              int
	}
	type trio struct{ off, on, only *result }
	points := map[key]*trio{}
	var order []key
	for i := range rs {
		r := &rs[i]
		base, mode := r.workload, "off"
		if b, ok := strings.CutSuffix(base, "+diarize"); ok {
			base, mode = b, "on"
		} else if b, ok := strings.CutSuffix(base, "-diarize-only"); ok {
			base, mode = b, "only"
		}
		k := key{r.arrangement, base, r.conc}
		t := points[k]
		if t == nil {
			t = &trio{}
			points[k] = t
			order = append(order, k)
		}
		switch mode {
		case "off":
			t.off = r
		case "on":
			t.on = r
		default:
			t.only = r
		}
	}
	fmt.Println("| arrangement | workload | in flight | speech only audio-s/s | p99 ms | speech + diarization audio-s/s | p99 ms | ratio | diarization alone audio-s/s | p99 ms | its mean batch |")
	fmt.Println("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var head, mix, over *trio
	bestDiar := 0.0
	for _, k := range order {
		t := points[k]
		if t.on == nil || t.off == nil {
			continue
		}
		onlyAudio, onlyP99, onlyBatch := 0.0, 0.0, 0.0
		if t.only != nil {
			onlyAudio, onlyP99, onlyBatch = t.only.audioPerS, t.only.p99, t.only.meanBatch
			if t.only.errors == 0 && t.only.p99 <= *limit && onlyAudio > bestDiar {
				bestDiar = onlyAudio
			}
		}
		fmt.Printf("| %s | %s | %d | %.0f | %.0f | %.0f | %.0f | %.2f | %.0f | %.0f | %.1f |\n", k.arrangement, k.base, k.conc,
			t.off.audioPerS, t.off.p99, t.on.audioPerS, t.on.p99, t.on.audioPerS/t.off.audioPerS, onlyAudio, onlyP99, onlyBatch)
		ok := t.on.errors == 0 && t.on.p99 <= *limit
		if ok && k.base == *clip && (head == nil || t.on.audioPerS > head.on.audioPerS) {
			head = t
		}
		if t.on.errors == 0 && k.base == *clip && (over == nil || t.on.p99 < over.on.p99) {
			over = t
		}
		if ok && strings.HasPrefix(k.base, "mix") && (mix == nil || t.on.audioPerS > mix.on.audioPerS) {
			mix = t
		}
	}
	within := head != nil
	if !within {
		// No point meets the limit: the one closest to it, said so.
		if head = over; head == nil {
			return errors.New("no " + *clip + " point with diarization without errors")
		}
	}
	mixRatio := 0.0
	if mix != nil {
		mixRatio = mix.on.audioPerS / mix.off.audioPerS
	}
	if bestDiar == 0 && head.only != nil {
		bestDiar = head.only.audioPerS
	}
	fmt.Printf("RESULT model=sortformer asr_only_audio_s_per_s=%.0f asr_diar_audio_s_per_s=%.0f ratio=%.2f diar_only_audio_s_per_s=%.0f p99_ms=%.0f mix_ratio=%.2f within_p99_limit=%t asr_encoder=%s\n",
		head.off.audioPerS, head.on.audioPerS, head.on.audioPerS/head.off.audioPerS, bestDiar, head.on.p99, mixRatio, within, head.off.encoder)
	return nil
}
