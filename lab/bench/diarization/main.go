// Command diarization is make bench-diarization: synthetic conversations
// of 2-4 voices (lab/kit/conversation: flite's voices taking turns with
// pauses, some talking over each other; 1 to 10 minutes each, and one of
// 60 minutes) and stereo calls with a party on each channel go through what
// users run: uploaded to the local S3, enqueued with the enqueue binary
// (-job-speakers on, -job-channels split), transcribed by the worker binary
// against real Triton partitions serving deploy/triton/cpu-whisper
// (Whisper tiny.en and the CPU diarizer). Each conversation's speaker
// turns are scored against its reference: DER (collar 0.25 s, overlapped
// speech scored) by pyannote.metrics (make bench-diarization installs it
// pinned in .lab/diarization) and by the lab's own scorer beside it; WDER
// (words paired with the reference by a minimum edit alignment, their
// speakers under DER's mapping); whether the number of speakers is right;
// on the 60-minute one, the confusion of each 10-minute window under its
// one mapping (labels consistent end to end); on the calls, the words on
// their channel's speaker. The diarizer's CPU is its Triton stub
// processes' (each model instance is a process of its own). Ends with
// "RESULT engine=pyannote_campp conversations=N der=X wder=X count_right=X
// minutes=X cpu_s_per_audio_min=X".
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/conversation"
	"github.com/fleetscribe/fleetscribe/lab/kit/diarscore"
	"github.com/fleetscribe/fleetscribe/lab/kit/procstat"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench-diarization:", err)
		os.Exit(1)
	}
}

// item is one recording of the benchmark and its reference.
type item struct {
	key   string
	conv  conversation.Conversation
	split bool // a stereo call: channels split
	long  bool
}

func run(ctx context.Context) error {
	binDir := flag.String("bin", "bin", "directory holding the worker and enqueue binaries")
	launcher := flag.String("tritonserver", "scripts/tritonserver", "command that runs Triton Inference Server")
	repo := flag.String("model-repository", "deploy/triton/cpu-whisper", "Triton model repository the partitions serve")
	partitions := flag.Int("partitions", 4, "Triton partitions")
	count := flag.Int("conversations", 30, "conversations of 2-4 voices, 1-10 minutes each")
	longMinutes := flag.Float64("long-minutes", 60, "length of the one long conversation (0: none)")
	calls := flag.Int("calls", 5, "stereo calls, a party on each channel, 1-3 minutes each")
	scorer := flag.String("pyannote-python", ".lab/diarization/bin/python", "Python with pyannote.metrics (make bench-diarization installs it); empty: the lab's scorer only")
	cache := flag.String("tts-cache", filepath.Join(os.TempDir(), "fleetscribe-flite"), "folder keeping flite's sentences between runs")
	verbose := flag.Bool("v", false, "show the worker's and servers' logs")
	keep := flag.String("keep", "", "folder to write each recording's transcript and reference into (JSON), to look at")
	flag.Parse()
	logs := io.Discard
	if *verbose {
		logs = os.Stderr
	}
	if err := os.MkdirAll(*cache, 0o755); err != nil {
		return err
	}
	synth := conversation.Flite(*cache)

	fmt.Printf("synthesising %d conversations, a %.0f-minute one and %d stereo calls (flite voices %s)\n", *count, *longMinutes, *calls, strings.Join(conversation.Voices, ", "))
	var items []item
	for i := range *count {
		seed := uint64(1000 + i)
		spec := conversation.Spec{Seed: seed, Speakers: 2 + i%3, Seconds: 60 * (1 + 9*float64(i)/float64(max(*count-1, 1))), Overlap: 0.15}
		c, err := conversation.Make(ctx, spec, synth)
		if err != nil {
			return err
		}
		items = append(items, item{key: fmt.Sprintf("conversations/c%02d-%dv.wav", i+1, spec.Speakers), conv: c})
	}
	if *longMinutes > 0 {
		c, err := conversation.Make(ctx, conversation.Spec{Seed: 60, Speakers: 3, Seconds: 60 * *longMinutes, Overlap: 0.15}, synth)
		if err != nil {
			return err
		}
		items = append(items, item{key: fmt.Sprintf("conversations/long-%.0fmin.wav", *longMinutes), conv: c, long: true})
	}
	for i := range *calls {
		c, err := conversation.Make(ctx, conversation.Spec{Seed: uint64(500 + i), Speakers: 2, Seconds: 60 * (1 + 2*float64(i)/float64(max(*calls-1, 1))), Overlap: 0.15}, synth)
		if err != nil {
			return err
		}
		items = append(items, item{key: fmt.Sprintf("calls/call-%02d.wav", i+1), conv: c, split: true})
	}

	emu, err := localaws.Start(ctx)
	if err != nil {
		return err
	}
	defer emu.Stop()
	sqsc, s3c := emu.Clients()
	const bucket, outBucket = "bench-audio", "bench-transcripts"
	q, err := emu.Provision(ctx, "bench-diarization", 3, bucket, outBucket)
	if err != nil {
		return err
	}
	audioSeconds := 0.0
	for _, it := range items {
		body := conversation.WAV(it.conv.Samples)
		if it.split {
			tracks, err := it.conv.Channels(ctx, synth)
			if err != nil {
				return err
			}
			body = conversation.WAV(tracks...)
		}
		audioSeconds += float64(len(it.conv.Samples)) / conversation.Rate
		if err := localaws.Upload(ctx, s3c, bucket, it.key, body); err != nil {
			return err
		}
	}

	fmt.Printf("starting %d partitions of %s\n", *partitions, *repo)
	plan, err := tritonproc.RunPlan(ctx, filepath.Join(*binDir, "worker"), *launcher, *repo, *partitions, []string{"asr", "diarize"}, logs)
	if err != nil {
		return err
	}
	defer plan.Stop()
	common := []string{"-aws-endpoint", emu.Endpoint, "-queue-url", q.URL}
	for _, e := range [][]string{{"-prefix", "conversations/", "-job-speakers", "on"}, {"-prefix", "calls/", "-job-channels", "split"}} {
		enq := exec.CommandContext(ctx, filepath.Join(*binDir, "enqueue"), append(append(slices.Clone(common), "-bucket", bucket, "-progress", "none"), e...)...)
		enq.Stderr = logs
		if out, err := enq.Output(); err != nil {
			return fmt.Errorf("enqueue: %w: %s", err, out)
		}
	}
	fmt.Printf("the worker transcribes %.0f minutes of audio\n", audioSeconds/60)
	started := time.Now()
	wk := exec.CommandContext(ctx, filepath.Join(*binDir, "worker"), append(common,
		"-output-bucket", outBucket, "-input-buckets", bucket, "-triton-addrs", strings.Join(plan.Addrs, ","),
		"-concurrency", strconv.Itoa(*partitions), "-wait-time", "1s", "-exit-when-idle", "5s", "-metrics-addr", "", "-job-timeout", "2h")...)
	wk.Stdout, wk.Stderr = logs, logs
	wk.Cancel = func() error { return wk.Process.Signal(syscall.SIGTERM) }
	if err := wk.Run(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	wall := time.Since(started)
	diarCPU, asrCPU := stubCPU(plan.Pid())
	var failures []error
	if visible, inflight, err := localaws.Depth(ctx, sqsc, q.URL); err != nil || visible+inflight > 0 {
		failures = append(failures, fmt.Errorf("queue not drained: %d visible, %d in flight (%v)", visible, inflight, err))
	}

	fmt.Printf("worker done in %.0f s\n\n", wall.Seconds())
	fmt.Println("| recording | voices | minutes | speakers found | DER (pyannote) | DER (lab) | WDER | words | overlap s | overlap words on a voice talking |")
	fmt.Println("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	type scored struct {
		key              string
		ref, hyp         []diarscore.Turn
		der, wder        float64
		pairs            int
		overlapPairs     int
		onVoice          int
		voices, found    int
		minutes, overlap float64
	}
	var convs []scored
	callRight, callWords := 0, 0
	var longResult *scored
	var longTr contract.Transcript
	var longConv conversation.Conversation
	for _, it := range items {
		tr, err := localaws.ReadTranscript(ctx, s3c, outBucket, bucket, it.key)
		if err != nil {
			return err
		}
		if *keep != "" {
			if err := keepFiles(*keep, it, tr); err != nil {
				return err
			}
		}
		if tr.SpeakerError != nil {
			failures = append(failures, fmt.Errorf("%s: speaker_error %s: %s", it.key, tr.SpeakerError.Class, tr.SpeakerError.Message))
		}
		if it.split {
			r, n := diarscore.ChannelWords(it.conv, tr)
			callRight, callWords = callRight+r, callWords+n
			continue
		}
		ref, rw := diarscore.Reference(it.conv)
		hyp, hw := diarscore.Hypothesis(tr)
		d := diarscore.DER(ref, hyp, 0.25)
		wd := diarscore.WDER(rw, hw, d.Mapping, 0.25)
		s := scored{key: it.key, ref: ref, hyp: hyp, der: d.DER, wder: wd.WDER, pairs: wd.Pairs, overlapPairs: wd.OverlapPairs, onVoice: wd.OnVoice, voices: len(it.conv.Voices), found: len(tr.Speakers),
			minutes: float64(len(it.conv.Samples)) / conversation.Rate / 60, overlap: diarscore.OverlapSeconds(it.conv)}
		convs = append(convs, s)
		if it.long {
			longResult, longTr, longConv = &convs[len(convs)-1], tr, it.conv
		}
	}
	pyDER, err := pyannoteDER(ctx, *scorer, convs2(convs, func(s scored) (string, []diarscore.Turn, []diarscore.Turn) { return s.key, s.ref, s.hyp }))
	if err != nil {
		return err
	}
	var sumDER, sumWrong, sumPairs, minutes float64
	ovPairs, ovOn := 0, 0
	right := 0
	for _, s := range convs {
		dur := s.minutes
		minutes += dur
		py := math.NaN()
		if v, ok := pyDER[s.key]; ok {
			py = v
		}
		fmt.Printf("| %s | %d | %.1f | %d | %s | %.3f | %.3f | %d | %.1f | %d/%d |\n", s.key, s.voices, dur, s.found, fmtNum(py), s.der, s.wder, s.pairs, s.overlap, s.onVoice, s.overlapPairs)
		score := s.der
		if !math.IsNaN(py) {
			score = py
		}
		sumDER += score * dur // weighted by length: DER over all the speech
		sumWrong += s.wder * float64(s.pairs)
		sumPairs += float64(s.pairs)
		ovPairs += s.overlapPairs
		ovOn += s.onVoice
		if s.found == s.voices {
			right++
		}
	}
	n := len(convs)
	der := sumDER / max(minutes, 1e-9)
	wder := sumWrong / max(sumPairs, 1)
	fmt.Printf("\nDER over all conversations %.4f (each weighted by its length; pyannote.metrics where it ran), WDER %.4f over %d words outside overlapped speech "+
		"(inside it %d of %d words have a voice talking there), speakers counted right in %d of %d\n", der, wder, int(sumPairs), ovOn, ovPairs, right, n)
	if longResult != nil {
		fmt.Printf("the %.0f-minute conversation: DER %.4f, %d speakers for %d voices; confusion by 10-minute window under one mapping: %s\n",
			float64(len(longConv.Samples))/conversation.Rate/60, longResult.der, len(longTr.Speakers), len(longConv.Voices), windows(longResult.ref, longResult.hyp))
	}
	if callWords > 0 {
		fmt.Printf("stereo calls: %d of %d words on their channel's speaker\n", callRight, callWords)
	}
	cpuPerMin := diarCPU.Seconds() / (audioSeconds / 60)
	fmt.Printf("CPU: the diarizer's stubs %.0f s, the recogniser's %.0f s, for %.0f minutes of audio (%.2f and %.2f CPU-s per audio minute); wall %.0f s on %d partitions\n",
		diarCPU.Seconds(), asrCPU.Seconds(), audioSeconds/60, cpuPerMin, asrCPU.Seconds()/(audioSeconds/60), wall.Seconds(), *partitions)
	fmt.Printf("RESULT engine=pyannote_campp conversations=%d der=%.4f wder=%.4f count_right=%.3f minutes=%.1f cpu_s_per_audio_min=%.2f overlap_words_on_voice=%d/%d stereo_words_right=%d/%d\n",
		n, der, wder, float64(right)/float64(max(n, 1)), minutes, cpuPerMin, ovOn, ovPairs, callRight, callWords)
	return errors.Join(failures...)
}

func fmtNum(x float64) string {
	if math.IsNaN(x) {
		return "-"
	}
	return fmt.Sprintf("%.3f", x)
}

type scoredTurns struct {
	ID  string      `json:"id"`
	Ref [][]float64 `json:"ref"`
	Hyp [][]float64 `json:"hyp"`
	// Speakers: the labels, indexed by the third value of each turn.
	RefLabels []string `json:"ref_labels"`
	HypLabels []string `json:"hyp_labels"`
}

func convs2[T any](xs []T, f func(T) (string, []diarscore.Turn, []diarscore.Turn)) []scoredTurns {
	var out []scoredTurns
	for _, x := range xs {
		id, ref, hyp := f(x)
		st := scoredTurns{ID: id}
		st.Ref, st.RefLabels = encodeTurns(ref)
		st.Hyp, st.HypLabels = encodeTurns(hyp)
		out = append(out, st)
	}
	return out
}

func encodeTurns(turns []diarscore.Turn) ([][]float64, []string) {
	var out [][]float64
	var names []string
	idx := map[string]int{}
	for _, t := range turns {
		i, ok := idx[t.Speaker]
		if !ok {
			i = len(names)
			idx[t.Speaker] = i
			names = append(names, t.Speaker)
		}
		out = append(out, []float64{t.Start, t.End, float64(i)})
	}
	return out, names
}

// pyannoteDER scores every conversation with pyannote.metrics (score.py
// beside this file), by id; none where python is empty.
func pyannoteDER(ctx context.Context, python string, items []scoredTurns) (map[string]float64, error) {
	if python == "" {
		return nil, nil
	}
	in, err := json.Marshal(items)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, python, "lab/bench/diarization/score.py")
	cmd.Stdin, cmd.Stderr = bytes.NewReader(in), os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("pyannote.metrics scorer (%s): %w", python, err)
	}
	res := map[string]float64{}
	return res, json.Unmarshal(out, &res)
}

// windows is the DER of each 10-minute window of a long conversation
// under the whole conversation's one mapping: labels that drift show as a
// window's confusion.
func windows(ref, hyp []diarscore.Turn) string {
	whole := diarscore.DER(ref, hyp, 0.25)
	end := 0.0
	for _, t := range ref {
		end = max(end, t.End)
	}
	var parts []string
	// A last window under 30 s (the final words running past the hour) is
	// no window.
	for lo := 0.0; end-lo >= 30; lo += 600 {
		clip := func(ts []diarscore.Turn, rename map[string]string) []diarscore.Turn {
			var out []diarscore.Turn
			for _, t := range ts {
				s, e := max(t.Start, lo), min(t.End, lo+600)
				if e > s {
					name := t.Speaker
					if rename != nil {
						name = rename[t.Speaker]
						if name == "" {
							name = "unmapped:" + t.Speaker
						}
					}
					out = append(out, diarscore.Turn{Speaker: name, Start: s - lo, End: e - lo})
				}
			}
			return out
		}
		r := clip(ref, nil)
		h := clip(hyp, whole.Mapping)
		// Under the fixed mapping: confusion is time where the mapped
		// hypothesis speaker is not the reference's.
		w := diarscore.DER(r, h, 0.25)
		fixed := 0.0
		if w.Total > 0 {
			fixed = (w.Missed + w.FalseAlarm + fixedConfusion(r, h)) / w.Total
		}
		parts = append(parts, fmt.Sprintf("%.0f-%.0f min %.3f", lo/60, min(lo+600, end)/60, fixed))
	}
	return strings.Join(parts, ", ")
}

// fixedConfusion is the confused time when hypothesis speakers are named
// as their reference speakers already (no new mapping).
func fixedConfusion(ref, hyp []diarscore.Turn) float64 {
	const frame = 0.01
	end := 0.0
	for _, t := range append(slices.Clone(ref), hyp...) {
		end = max(end, t.End)
	}
	n := int(end/frame) + 1
	at := func(ts []diarscore.Turn) []map[string]bool {
		out := make([]map[string]bool, n)
		for _, t := range ts {
			for f := int(t.Start / frame); f < min(n, int(t.End/frame)); f++ {
				if out[f] == nil {
					out[f] = map[string]bool{}
				}
				out[f][t.Speaker] = true
			}
		}
		return out
	}
	r, h := at(ref), at(hyp)
	total := 0.0
	for f := range n {
		nr, nh, nc := len(r[f]), len(h[f]), 0
		for s := range r[f] {
			if h[f][s] {
				nc++
			}
		}
		total += float64(min(nr, nh)-nc) * frame
	}
	return total
}

// stubCPU sums the CPU time of the Python backend stubs under pid: the
// diarize model's and the asr model's instances.
func stubCPU(pid int) (diarize, asr time.Duration) {
	for _, p := range descendants(pid) {
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
		if err != nil || !bytes.Contains(cmd, []byte("triton_python_backend_stub")) {
			continue
		}
		u, s, err := procstat.CPU(p)
		if err != nil {
			continue
		}
		switch {
		case bytes.Contains(cmd, []byte("/diarize/")):
			diarize += u + s
		case bytes.Contains(cmd, []byte("/asr/")):
			asr += u + s
		}
	}
	return diarize, asr
}

// descendants lists the processes under pid (from /proc's parent links).
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 {
			pp, _ := strconv.Atoi(f[1])
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// keepFiles writes a recording's transcript and its reference into dir.
func keepFiles(dir string, it item, tr contract.Transcript) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	name := strings.NewReplacer("/", "_", ".wav", "").Replace(it.key)
	ref, _ := json.MarshalIndent(struct {
		Voices     []string                 `json:"voices"`
		Utterances []conversation.Utterance `json:"utterances"`
	}{it.conv.Voices, it.conv.Utterances}, "", " ")
	got, _ := json.MarshalIndent(tr, "", " ")
	if err := os.WriteFile(filepath.Join(dir, name+".reference.json"), ref, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".transcript.json"), got, 0o644)
}
