package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/fleetscribe/fleetscribe/triton"
)

// scriptModel hears a recording of continuous speech with no pauses: a
// word every 0.4 s, each 0.3 s long. Each sample holds its own index in
// the recording, so a chunk tells where it starts; like a real model, it
// recognises only the words wholly inside the chunk it is sent.
type scriptModel struct {
	mu     sync.Mutex
	chunks int
}

func (m *scriptModel) Transcribe(_ context.Context, req triton.Request) (triton.Result, error) {
	m.mu.Lock()
	m.chunks++
	m.mu.Unlock()
	start := float64(req.Samples[0]) / modelRate
	end := start + float64(len(req.Samples))/modelRate
	var r triton.Result
	for k := 0; ; k++ {
		ws, we := 0.4*float64(k), 0.4*float64(k)+0.3
		if ws >= end {
			break
		}
		if ws >= start && we <= end {
			r.Words = append(r.Words, triton.Word{Word: fmt.Sprintf("w%d", k), Start: ws - start, End: we - start})
		}
	}
	words := make([]string, len(r.Words))
	for i, w := range r.Words {
		words[i] = w.Word
	}
	r.Text = strings.Join(words, " ")
	return r, nil
}

// A 100 s recording of speech without a pause is cut into 30 s chunks
// that overlap by a second; the stitched transcript has every word once,
// in order, at its time. Without the overlap, words cut in two are lost.
func TestStitchedOverlapKeepsEveryWordOnce(t *testing.T) {
	const seconds = 100
	samples := make([]float32, seconds*modelRate)
	for i := range samples {
		samples[i] = float32(i)
	}
	var want []string
	for k := 0; 0.4*float64(k)+0.3 <= seconds; k++ {
		want = append(want, fmt.Sprintf("w%d", k))
	}
	for _, timestamps := range []bool{true, false} {
		m := &scriptModel{}
		w := &Worker{cfg: Config{Audio: AudioConfig{ChunkSeconds: 30, ChunkParallelism: 4, Timestamps: timestamps}}, tr: m}
		tr, _, err := w.transcribeSamples(context.Background(), samples, inference{model: "asr", prog: &progress{}})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(tr.Text)
		if timestamps {
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Errorf("with overlap: %d words, want %d, each once in order", len(got), len(want))
			}
			for i, wd := range tr.Words {
				var k int
				if _, err := fmt.Sscanf(wd.Word, "w%d", &k); err != nil || wd.Start < 0.4*float64(k)-1e-6 || wd.Start > 0.4*float64(k)+1e-6 {
					t.Errorf("word %d %s at %.3f s", i, wd.Word, wd.Start)
					break
				}
			}
			if m.chunks < 4 {
				t.Errorf("%d chunks for %d s", m.chunks, seconds)
			}
		} else if len(got) >= len(want) {
			t.Errorf("without overlap (no word times to stitch by) %d words of %d: no word was cut, so this test shows nothing", len(got), len(want))
		}
	}
}

// levelCheck records the loudest sample of each chunk it is sent.
type levelCheck struct {
	mu    sync.Mutex
	peaks []float32
}

func (l *levelCheck) Transcribe(_ context.Context, req triton.Request) (triton.Result, error) {
	var p float32
	for _, v := range req.Samples {
		p = max(p, v, -v)
	}
	l.mu.Lock()
	l.peaks = append(l.peaks, p)
	l.mu.Unlock()
	return triton.Result{}, nil
}

// Overlapping chunks are levelled at once (under -race) each on its own
// copy: every chunk arrives levelled, and the shared samples are not
// scaled twice or raced on.
func TestOverlappingChunksLevelledApart(t *testing.T) {
	samples := make([]float32, 100*modelRate)
	for i := range samples {
		samples[i] = 0.001 * float32(1+i%7) // quiet, and never a pause
	}
	orig := append([]float32(nil), samples...)
	l := &levelCheck{}
	w := &Worker{cfg: Config{Audio: AudioConfig{ChunkSeconds: 30, ChunkParallelism: 4, Timestamps: true, Normalize: true}}, tr: l}
	if _, _, err := w.transcribeSamples(context.Background(), samples, inference{model: "asr", prog: &progress{}}); err != nil {
		t.Fatal(err)
	}
	if len(l.peaks) < 4 {
		t.Fatalf("%d chunks", len(l.peaks))
	}
	for i, p := range l.peaks {
		if p < 0.01 {
			t.Errorf("chunk %d arrived at peak %v: not levelled", i, p)
		}
	}
	for i := range samples {
		if samples[i] != orig[i] {
			t.Fatalf("sample %d changed from %v to %v: overlapping chunks levelled in place", i, orig[i], samples[i])
		}
	}
}

// Two chunks that time the words they share differently (each hears them
// in another context): the word at the overlap's middle is kept once, not
// doubled ("left left") when each copy's middle lies on its own side of
// the overlap's middle, and not lost when each lies on the other's.
func TestOverlapJoinAlignsSharedWords(t *testing.T) {
	// Chunk 0 covers 140-165 s, chunk 1 starts at 164 s (1 s of overlap,
	// middle 164.5 s). Times below are in each chunk's own time.
	spans := []chunkSpan{{offset: 140 * modelRate, length: 25 * modelRate}, {offset: 164 * modelRate, length: 20 * modelRate, overlap: modelRate}}
	w := func(s string, start, end float64) triton.Word { return triton.Word{Word: s, Start: start, End: end} }
	for name, c := range map[string]struct{ a, b []triton.Word }{
		// The case seen on a noisy recording: 164.29-164.63 in the first
		// chunk, 164.395-164.735 in the second.
		"doubled by the middle rule": {
			a: []triton.Word{w("turn", 23.80, 24.20), w("left", 24.29, 24.63), w("at", 24.70, 24.85)},
			b: []triton.Word{w("left", 0.395, 0.735), w("at", 0.80, 0.95), w("the", 1.0, 1.1), w("light", 1.15, 1.5)},
		},
		"lost by the middle rule": {
			a: []triton.Word{w("turn", 23.80, 24.20), w("left", 24.40, 24.75), w("at", 24.80, 24.95)},
			b: []triton.Word{w("left", 0.25, 0.45), w("at", 0.55, 0.75), w("the", 1.0, 1.1), w("light", 1.15, 1.5)},
		},
	} {
		results := []*triton.Result{{Text: "x", Words: c.a}, {Text: "y", Words: c.b}}
		tr := stitch(spans, results, 184*modelRate, JoinAlign)
		if tr.Text != "turn left at the light" {
			t.Errorf("%s: %q, want each word once", name, tr.Text)
		}
		for i := 1; i < len(tr.Words); i++ {
			if tr.Words[i].Start < tr.Words[i-1].Start {
				t.Errorf("%s: words out of order: %+v", name, tr.Words)
			}
		}
	}
	// Nothing in common (a recogniser that heard other words in the
	// overlap): the middle rule still keeps each side's own.
	a := []triton.Word{w("one", 24.1, 24.3)}
	b := []triton.Word{w("two", 0.7, 0.9)}
	if tr := stitch(spans, []*triton.Result{{Words: a}, {Words: b}}, 184*modelRate, JoinAlign); tr.Text != "one two" {
		t.Errorf("no shared word: %q, want \"one two\"", tr.Text)
	}
}

// A recogniser that cases and punctuates (Whisper) hears the overlap's
// word as "clear." in one chunk and "Clear" in the next, timed either side
// of the overlap's middle: one word, not two.
func TestOverlapJoinIgnoresCaseAndPunctuation(t *testing.T) {
	w := func(s string, start, end float64) triton.Word { return triton.Word{Word: s, Start: start, End: end} }
	a := []triton.Word{w("The", 27.0, 27.3), w("clear.", 28.7, 29.0)}
	b := []triton.Word{w("Clear", 29.0, 29.3), w("Next", 30.5, 30.8)}
	keepA, fromB := joinOverlap(a, b, 28.0, 30.0)
	var got []string
	for _, x := range append(slices.Clone(a[:keepA]), b[fromB:]...) {
		got = append(got, x.Word)
	}
	if want := []string{"The", "clear.", "Next"}; !slices.Equal(got, want) {
		t.Errorf("joined %v, want %v", got, want)
	}
}
