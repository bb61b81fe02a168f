//go:build accuracy

// The long-form accuracy measurement (make bench-accuracy): about 20
// minutes of pocketsphinx, so not part of make test.

package accuracy_test

import (
	"context"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/conversation"
	"github.com/fleetscribe/fleetscribe/lab/kit/wer"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

var (
	accuracyMinutes = flag.Float64("accuracy-minutes", 20, "length of the long-form accuracy test's recording")
	accuracyChunk   = flag.Float64("accuracy-chunk-seconds", 30, "the worker's -chunk-seconds in the long-form accuracy test")
	accuracyEngine  = flag.String("accuracy-engine", "whisper", "the CPU recogniser: whisper (deploy/triton/cpu-whisper) or pocketsphinx (deploy/triton/cpu)")
	accuracyJoin    = flag.String("accuracy-join", worker.JoinAlign, "the worker's -overlap-join: align or middle")
	accuracyParams  = flag.String("accuracy-params", "", "further model parameters of the recogniser, key=value,... (such as whisper_beam=5)")
)

// sentences returns n sentences of everyday clinical speech, drawn from
// templates (the same as the speaker benchmarks' conversations read).
func sentences(rng *rand.Rand, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = conversation.Sentence(rng)
	}
	return out
}

// flite synthesises text with voice at 16 kHz mono.
func flite(t *testing.T, dir, text, voice string) []float32 {
	t.Helper()
	path := filepath.Join(dir, "s.wav")
	if out, err := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi",
		"-i", "flite=text='"+text+"':voice="+voice, "-ar", "16000", "-ac", "1", "-c:a", "pcm_s16le", path).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, out)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	c, err := audio.DecodeWAV(b)
	if err != nil {
		t.Fatal(err)
	}
	return c.Samples
}

// onset is where speech starts in x: the first 10 ms frame above a tenth
// of the loudest frame's RMS.
func onset(x []float32) int {
	const frame = 160
	var rmss []float64
	for i := 0; i+frame <= len(x); i += frame {
		var e float64
		for _, v := range x[i : i+frame] {
			e += float64(v) * float64(v)
		}
		rmss = append(rmss, math.Sqrt(e/frame))
	}
	peak := slices.Max(rmss)
	for i, r := range rmss {
		if r > peak/10 {
			return i * frame
		}
	}
	return 0
}

// A long recording of many synthesised sentences with pauses (three voices,
// every third sentence in noise), uploaded as MP3 and transcribed by the
// worker through pocketsphinx partitions over gRPC: cut into chunks,
// streamed, stitched. Its word error rate is within 2 points of
// recognising each sentence alone (cut from the same decoded audio), and
// each sentence's first word, where it and the next are heard as said,
// starts within 0.5 s of where the sentence does; stitching loses no more
// than a tenth of the sentence starts the recogniser hears alone.
func TestLongFormAccuracy(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatal("ffmpeg is required (make deps installs it)")
	}
	srv := cpuTriton(t)
	rec, err := triton.Dial(srv.Addr, triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rec.Close() })

	// The recording: sentences and pauses of 0.6-1.6 s of faint noise.
	rng := rand.New(rand.NewPCG(20, 26))
	dir := t.TempDir()
	voices := []string{"rms", "slt", "kal16"}
	var (
		x      []float32
		starts []float64 // each sentence's speech onset, in seconds
		texts  []string
		spans  [][2]int
	)
	silence := func(seconds float64) {
		for range int(seconds * 16000) {
			x = append(x, float32(rng.NormFloat64()*0.0005))
		}
	}
	silence(1)
	for _, s := range sentences(rng, 100000) {
		if float64(len(x)) >= *accuracyMinutes*60*16000 {
			break
		}
		i := len(texts)
		y := flite(t, dir, s, voices[i%len(voices)])
		if i%3 == 2 {
			for k := range y {
				y[k] += float32(rng.NormFloat64() * 0.01) // about 20 dB below the speech
			}
		}
		starts = append(starts, float64(len(x)+onset(y))/16000)
		spans = append(spans, [2]int{len(x), len(x) + len(y)})
		texts = append(texts, s)
		x = append(x, y...)
		silence(0.6 + rng.Float64())
	}
	wav := filepath.Join(dir, "long.wav")
	if err := os.WriteFile(wav, audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: x}), 0o600); err != nil {
		t.Fatal(err)
	}
	// MP3, for size (the emulator refuses single uploads past 11 MiB): the
	// sentences alone are cut from the same decoded MP3.
	mp3Path := filepath.Join(dir, "long.mp3")
	if out, err := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-i", wav,
		"-c:a", "libmp3lame", "-b:a", "64k", mp3Path).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, out)
	}
	mp3, err := os.ReadFile(mp3Path)
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := audio.DecodeContext(t.Context(), mp3, nil, audio.PathFFmpeg())
	if err != nil {
		t.Fatal(err)
	}
	decoded.Samples = audio.Resample(decoded.Samples, decoded.Rate, 16000) // as the worker does

	// Each sentence alone, from 0.2 s before to 0.2 s after it, levelled
	// as the worker levels a chunk.
	alone := make([]string, len(texts))
	var wg sync.WaitGroup
	sem := make(chan struct{}, cpuInstances)
	for i, sp := range spans {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			lo, hi := max(0, sp[0]-3200), min(len(decoded.Samples), sp[1]+3200)
			y := slices.Clone(decoded.Samples[lo:hi])
			_, _ = audio.Normalize(y) // synthesised speech: finite
			r, err := rec.Infer(context.Background(), triton.Request{Samples: y})
			if err != nil {
				t.Error(err)
			}
			alone[i] = r.Text
		})
	}
	wg.Wait()

	// The whole recording through the worker.
	e := newEnv(t, "longform", 3, []string{srv.Addr}, 5*time.Minute)
	cfg := e.config()
	cfg.Audio.ChunkSeconds = *accuracyChunk
	cfg.Audio.OverlapJoin = *accuracyJoin
	tr := e.transcribe("long.mp3", mp3, cfg)

	reference := strings.Join(texts, " ")
	stitchedEdits, words := wer.Errors(reference, tr.Text)
	aloneEdits, _ := wer.Errors(reference, strings.Join(alone, " "))
	stitched, single := float64(stitchedEdits)/float64(words), float64(aloneEdits)/float64(words)

	// Sentence starts: the time of the word each sentence's first word is
	// aligned with, where it was heard as said together with the word
	// after it (one common word, "the", alone can be aligned with the same
	// word of a neighbouring sentence).
	var ref []string
	var first, lengths []int // each sentence's first word in ref, and its words
	for _, s := range texts {
		w := wer.Normalize(s)
		first, lengths = append(first, len(ref)), append(lengths, len(w))
		ref = append(ref, w...)
	}
	hyp := make([]string, len(tr.Words))
	for i, w := range tr.Words {
		hyp[i] = strings.ToLower(w.Word)
	}
	align := wer.Align(ref, hyp)
	var within, located int
	worst := 0.0
	for i, f := range first {
		j, ok := heardStart(ref, hyp, align, f, lengths[i])
		if !ok {
			continue
		}
		located++
		d := math.Abs(tr.Words[j].Start - starts[i])
		worst = max(worst, d)
		if d <= 0.5 {
			within++
		} else {
			t.Logf("sentence %d (%q) starts at %.2f s; its first words were heard at %.2f s", i, texts[i], starts[i], tr.Words[j].Start)
		}
	}
	// A start can be timed only where the sentence's first words were heard
	// as said; alone, the recogniser hears them in this many sentences.
	locatedAlone := 0
	for i, s := range texts {
		r, h := wer.Normalize(s), wer.Normalize(alone[i])
		if _, ok := heardStart(r, h, wer.Align(r, h), 0, len(r)); ok {
			locatedAlone++
		}
	}
	t.Logf("%.1f min, %d sentences, %d words, %d chunks: WER stitched %.3f, each sentence alone %.3f; "+
		"%d of %d located sentence starts within 0.5 s (worst %.2f s); first words heard in %d sentences alone",
		float64(len(x))/16000/60, len(texts), words, tr.Chunks, stitched, single, within, located, worst, locatedAlone)
	fmt.Printf("RESULT engine=%s minutes=%.1f sentences=%d wer_stitched=%.3f wer_alone=%.3f starts_within_0_5s=%d located=%d located_alone=%d worst_start_s=%.2f\n",
		*accuracyEngine, float64(len(x))/16000/60, len(texts), stitched, single, within, located, locatedAlone, worst)
	if stitched > single+0.02 {
		t.Errorf("stitched WER %.3f is more than 2 points above %.3f, each sentence alone", stitched, single)
	}
	// At least 95% of the located starts within 0.5 s (pocketsphinx placed
	// every one; Whisper's word times, from its attention, miss a few).
	if located < locatedAlone*9/10 || within*100 < located*95 {
		t.Errorf("%d sentence starts located (%d alone), %d of them within 0.5 s (worst %.2f s)", located, locatedAlone, within, worst)
	}
}

// heardStart reports where in hyp the sentence of n words at ref[f] begins:
// the hyp word its first word is aligned with, where that word and the
// next (for a sentence of more than one word) were heard as said.
func heardStart(ref, hyp []string, align []int, f, n int) (int, bool) {
	if n == 0 {
		return 0, false
	}
	j := align[f]
	if j < 0 || hyp[j] != ref[f] {
		return 0, false
	}
	if n > 1 && (align[f+1] != j+1 || hyp[j+1] != ref[f+1]) {
		return 0, false
	}
	return j, true
}
