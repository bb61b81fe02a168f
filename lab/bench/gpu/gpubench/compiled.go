package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
)

// bestPublished is the best published single-H200 Parakeet runtime's
// figure, in audio-seconds per second (TensorRT engines, batch 256).
const bestPublished = 12400

// study is what encoder_study.py measured offline.
type study struct {
	Buckets map[string]struct {
		CompileS float64 `json:"compile_s"`
		Points   map[string]struct {
			EagerMs          float64 `json:"encoder_eager_ms"`
			CompiledMs       float64 `json:"encoder_compiled_ms"`
			NoGraphsMs       float64 `json:"encoder_nographs_ms"`
			EagerSDPAMs      float64 `json:"encoder_eager_sdpa_ms"`
			ModelAttnMs      float64 `json:"encoder_modelattn_ms"`
			Speedup          float64 `json:"speedup"`
			RelDiff          float64 `json:"mean_rel_diff"`
			TokenAgreement   float64 `json:"token_agreement"`
			ControlAgreement float64 `json:"control_token_agreement"`
			EagerVsFP32      float64 `json:"eager_vs_fp32_token_agreement"`
			CompiledVsFP32   float64 `json:"compiled_vs_fp32_token_agreement"`
			OtherCasts       float64 `json:"othercasts_token_agreement"`
		} `json:"points"`
	} `json:"buckets"`
	Casts     string `json:"casts"`
	Attention string `json:"attention"`
}

// compiledReport is `gpubench compiled`: the compiled encoder's served
// figures for NeMo's model (the rows whose decoder is "nemo") beside the
// eager ones of the same results, the start-up times of plans with as many
// partitions as the default arrangement (what a start loads does not depend
// on the MPS percentage), the offline study, and its RESULT line.
func compiledReport(args []string) error {
	fs := flag.NewFlagSet("compiled", flag.ContinueOnError)
	var results stringList
	fs.Var(&results, "results", "results CSV (repeatable)")
	studyPath := fs.String("study", "", "encoder_study.py's JSON for NeMo's model")
	def := fs.String("default", "mps50-8", "the default plan's arrangement: start-up times are of arrangements with its partition count")
	encoder := fs.String("encoder", "inductor_regional_cudagraphs", "the compiled encoder's name in the RESULT line")
	clipLimit := fs.Float64("p99-ms", 1000, "latency limit on 45-s clips")
	mixLimit := fs.Float64("mix-p99-ms", 1500, "chunk latency limit on the length mix")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var rs []result
	for _, r := range results {
		got, err := readResults(r)
		if err != nil {
			return err
		}
		rs = append(rs, got...)
	}
	nemo := func(enc, workload string) func(result) bool {
		return func(r result) bool { return r.decoder == "nemo" && r.encoder == enc && r.workload == workload }
	}
	fmt.Println("| arrangement | encoder | workload | in flight | audio-s/s | p99 ms | mean batch | GPU util % | ready s | compile cache |")
	fmt.Println("|---|---|---|---:|---:|---:|---:|---:|---:|---|")
	for _, r := range rs {
		if r.decoder != "nemo" {
			continue
		}
		fmt.Printf("| %s | %s | %s | %d | %.0f | %.0f | %.1f | %.0f | %.0f | %s |\n", r.arrangement, r.encoder, r.workload, r.conc, r.audioPerS, r.p99, r.meanBatch, r.util, r.ready, r.cache)
	}
	top, _ := best(rs, *clipLimit, nemo("compiled", "clip45"))
	eager, _ := best(rs, *clipLimit, nemo("eager", "clip45"))
	mix, _ := best(rs, *mixLimit, nemo("compiled", "mix"))
	if before, ok := best(rs, *mixLimit, nemo("compiled", "mix-quietest")); ok {
		fmt.Printf("the length mix at chunk p99 <= %.0f ms, chunked at the last pause (as the worker does) against the quietest point (the rule before): %s vs %.0f audio-s/s (%s)\n",
			*mixLimit, coldOrDash(mix.audioPerS), before.audioPerS, ratioOrDash(mix.audioPerS, before.audioPerS))
	}
	plan, err := parseArrangement(*def)
	if err != nil {
		return err
	}
	warm, cold := 0.0, 0.0
	for _, r := range rs {
		a, err := parseArrangement(r.arrangement)
		if err != nil || r.decoder != "nemo" || r.encoder != "compiled" || a.processes != plan.processes || a.instances != plan.instances {
			continue
		}
		switch r.cache {
		case "warm":
			if warm == 0 || r.ready < warm {
				warm = r.ready
			}
		case "cold":
			cold = max(cold, r.ready)
		}
	}
	if *studyPath != "" {
		b, err := os.ReadFile(*studyPath)
		if err != nil {
			return err
		}
		var st study
		if err := json.Unmarshal(b, &st); err != nil {
			return err
		}
		for _, k := range slices.Sorted(maps.Keys(st.Buckets)) {
			bk := st.Buckets[k]
			for _, bs := range slices.Sorted(maps.Keys(bk.Points)) {
				p := bk.Points[bs]
				line := fmt.Sprintf("offline, %s-s bucket, batch %s: encoder %.1f ms eagerly, %.1f ms compiled (%.2fx)", k, bs, p.EagerMs, p.CompiledMs, p.Speedup)
				if p.NoGraphsMs > 0 {
					line += fmt.Sprintf(", %.1f ms without CUDA graphs", p.NoGraphsMs)
				}
				if p.EagerSDPAMs > 0 {
					line += fmt.Sprintf("; eagerly through SDPA %.1f ms (the compiled encoder %.2fx that)", p.EagerSDPAMs, p.EagerSDPAMs/p.CompiledMs)
				}
				if p.ModelAttnMs > 0 {
					other := map[string]string{"sdpa": "the model's own", "model": "SDPA"}[st.Attention]
					line += fmt.Sprintf("; compiled with %s attention %.1f ms (%.2fx)", orDash(other), p.ModelAttnMs, p.EagerMs/p.ModelAttnMs)
				}
				if p.TokenAgreement > 0 {
					line += fmt.Sprintf("; mean relative difference %.4f; tokens agree %.3f (control, eager with noise of that size: %.3f)", p.RelDiff, p.TokenAgreement, p.ControlAgreement)
				}
				if p.OtherCasts > 0 {
					line += fmt.Sprintf("; with the other bf16 rounding rule (shipped: %s) tokens agree %.3f", orDash(st.Casts), p.OtherCasts)
				}
				if p.EagerVsFP32 > 0 {
					line += fmt.Sprintf("; against eager in fp32, tokens agree %.3f compiled, %.3f eager in bf16", p.CompiledVsFP32, p.EagerVsFP32)
				}
				fmt.Println(line)
			}
		}
	}
	h := holdOf(rs, top)
	if h.runs > 0 {
		fmt.Printf("%s, 45-s clips at %d in flight: %d runs of %.0f-s windows or longer, %.0f-%.0f audio-s/s (mean %.0f); at 128 in flight against 64 (means): %s\n",
			top.arrangement, top.conc, h.runs, h.window, h.low, h.high, h.mean, h.c128VsC64)
	}
	fmt.Printf("RESULT server=triton model=nemo encoder=%s best_mode=%s served_audio_s_per_s=%.0f mix_audio_s_per_s=%s p99_ms=%.0f vs_eager=%s vs_best_published=%.2f warm_start_s=%.0f cold_start_s=%s c128_vs_c64=%s window_s=%.0f runs=%d\n",
		*encoder, orDash(top.arrangement), top.audioPerS, coldOrDash(mix.audioPerS), top.p99, ratioOrDash(top.audioPerS, eager.audioPerS), top.audioPerS/bestPublished, warm, coldOrDash(cold),
		h.c128VsC64, h.window, h.runs)
	return nil
}

// hold is how well the headline point holds: its runs (rows of the same
// arrangement, encoder and workload at the same concurrency, each a run),
// their shortest window and spread, and the arrangement's mean at 128 in
// flight against its mean at 64 ("-" where either is missing).
type hold struct {
	runs                    int
	window, low, high, mean float64
	c128VsC64               string
}

func holdOf(rs []result, top result) hold {
	same := func(conc int) []result {
		var out []result
		for _, r := range rs {
			if r.arrangement == top.arrangement && r.decoder == top.decoder && r.encoder == top.encoder && r.workload == top.workload && r.conc == conc && r.errors == 0 {
				out = append(out, r)
			}
		}
		return out
	}
	mean := func(xs []result) float64 {
		var sum float64
		for _, r := range xs {
			sum += r.audioPerS
		}
		return sum / float64(max(1, len(xs)))
	}
	h := hold{c128VsC64: "-"}
	runs := same(top.conc)
	if top.arrangement == "" || len(runs) == 0 {
		return h
	}
	h.runs, h.mean, h.low, h.high, h.window = len(runs), mean(runs), runs[0].audioPerS, runs[0].audioPerS, runs[0].seconds
	for _, r := range runs {
		h.low, h.high, h.window = min(h.low, r.audioPerS), max(h.high, r.audioPerS), min(h.window, r.seconds)
	}
	if at64, at128 := same(64), same(128); len(at64) > 0 && len(at128) > 0 {
		h.c128VsC64 = fmt.Sprintf("%.2f", mean(at128)/mean(at64))
	}
	return h
}

// ratioOrDash is a/b, or "-" where either was not measured.
func ratioOrDash(a, b float64) string {
	if a == 0 || b == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// coldOrDash is a figure, or "-" where none was measured.
func coldOrDash(s float64) string {
	if s == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f", s)
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
