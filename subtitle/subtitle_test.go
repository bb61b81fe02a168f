package subtitle

import (
	"bytes"
	"flag"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/asticode/go-astisub"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/golden"
)

// checkCues parses SRT and WebVTT with an independent parser (go-astisub)
// and checks the conventions: cues of at most 7 s and two lines of at most
// 42 characters (a single longer word alone excepted), in order, never
// overlapping, holding every word in order.
func checkCues(t *testing.T, tr contract.Transcript, words []string) {
	t.Helper()
	for name, parse := range map[string]func([]byte) (*astisub.Subtitles, error){
		"srt": func(b []byte) (*astisub.Subtitles, error) { return astisub.ReadFromSRT(bytes.NewReader(b)) },
		"vtt": func(b []byte) (*astisub.Subtitles, error) { return astisub.ReadFromWebVTT(bytes.NewReader(b)) },
	} {
		body := map[string][]byte{"srt": RenderSRT(tr), "vtt": RenderVTT(tr)}[name]
		subs, err := parse(body)
		if err != nil {
			t.Fatalf("%s does not parse: %v\n%s", name, err, body)
		}
		var got []string
		var prevEnd time.Duration
		for i, it := range subs.Items {
			d := it.EndAt - it.StartAt
			if d <= 0 || d > 7*time.Second+time.Millisecond {
				t.Errorf("%s cue %d lasts %v", name, i+1, d)
			}
			if it.StartAt < prevEnd {
				t.Errorf("%s cue %d starts at %v, before the previous one ends (%v)", name, i+1, it.StartAt, prevEnd)
			}
			prevEnd = it.EndAt
			var lines []string
			for _, l := range it.Lines {
				if text := strings.TrimSpace(l.String()); text != "" { // the parser may keep a trailing blank line
					lines = append(lines, text)
				}
			}
			if len(lines) > 2 {
				t.Errorf("%s cue %d has %d lines: %q", name, i+1, len(lines), lines)
			}
			for _, text := range lines {
				if n := utf8.RuneCountInString(text); n > 42 && strings.Contains(text, " ") {
					t.Errorf("%s cue %d line of %d characters: %q", name, i+1, n, text)
				}
				got = append(got, strings.Fields(text)...)
			}
		}
		if strings.Join(got, " ") != strings.Join(words, " ") {
			t.Errorf("%s cues hold %d words, want the %d of the transcript, in order", name, len(got), len(words))
		}
	}
}

func randomWords(rng *rand.Rand, n int) ([]contract.Word, []string) {
	vocab := strings.Fields("the patient reports chest pain since tuesday morning and denies shortness of breath. blood pressure is one hundred twenty over eighty. follow up in two weeks? yes! electroencephalography hospitalisation")
	var out []contract.Word
	var texts []string
	tm := 0.2
	for range n {
		w := vocab[rng.IntN(len(vocab))]
		if rng.IntN(200) == 0 {
			w = strings.Repeat("x", 50) // longer than a line
		}
		d := 0.1 + rng.Float64()*0.5
		out = append(out, contract.Word{Word: w, Start: tm, End: tm + d})
		texts = append(texts, w)
		tm += d
		switch r := rng.IntN(20); {
		case r == 0:
			tm += 1 + rng.Float64()*3 // a pause
		case r == 1:
			tm -= 0.15 // times that overlap, as stitched chunks can give
		case r < 5:
			tm += rng.Float64() * 0.2
		}
	}
	return out, texts
}

func TestCuesFollowTheConventions(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 11))
	for trial := range 20 {
		words, texts := randomWords(rng, 50+rng.IntN(400))
		tr := contract.Transcript{Words: words, Segments: BuildSegments(words)}
		t.Run(fmt.Sprint("words", trial), func(t *testing.T) { checkCues(t, tr, texts) })

		// The same text without word times: one segment per 29 s chunk, as
		// a model without timestamps gives it.
		var segs []contract.Segment
		for i := 0; i < len(texts); i += 60 {
			j := min(i+60, len(texts))
			segs = append(segs, contract.Segment{Start: float64(i) / 60 * 29, End: float64(j) / 60 * 29, Text: strings.Join(texts[i:j], " ")})
		}
		tr = contract.Transcript{Segments: SplitSegments(segs)}
		t.Run(fmt.Sprint("chunks", trial), func(t *testing.T) { checkCues(t, tr, texts) })
	}
}

// A pause and a sentence end each end a cue; a cue never runs past 7 s.
func TestCuesBreakAtPausesAndSentences(t *testing.T) {
	w := func(s string, start, end float64) contract.Word {
		return contract.Word{Word: s, Start: start, End: end}
	}
	segs := BuildSegments([]contract.Word{
		w("blood", 0, 0.4), w("pressure", 0.4, 0.9), w("is", 0.9, 1.0), w("normal.", 1.0, 1.6),
		w("heart", 1.7, 2.0), w("rate", 2.0, 2.3), w("is", 2.3, 2.4), w("fine", 2.4, 2.8),
		w("no", 4.0, 4.2), w("fever", 4.2, 4.6), // after a 1.2 s pause
	})
	var texts []string
	for _, s := range segs {
		texts = append(texts, s.Text)
	}
	if want := []string{"blood pressure is normal.", "heart rate is fine", "no fever"}; strings.Join(texts, "|") != strings.Join(want, "|") {
		t.Errorf("cues %q, want %q", texts, want)
	}
}

// A recording without speech: an SRT with one placeholder cue (players
// refuse an empty file), a WebVTT with none.
func TestNoSpeechSubtitles(t *testing.T) {
	tr := contract.Transcript{DurationSec: 12, Segments: []contract.Segment{}}
	srt, err := astisub.ReadFromSRT(bytes.NewReader(RenderSRT(tr)))
	if err != nil || len(srt.Items) != 1 || strings.TrimSpace(srt.Items[0].Lines[0].String()) != noSpeech {
		t.Errorf("silent SRT: %v, %+v", err, srt)
	}
	vtt, err := astisub.ReadFromWebVTT(bytes.NewReader(RenderVTT(tr)))
	if err != nil || len(vtt.Items) != 0 {
		t.Errorf("silent VTT: %v, %d cues", err, len(vtt.Items))
	}
}

var update = flag.Bool("update", false, "rewrite golden files")

func goldenFile(t *testing.T, name string, got []byte) {
	t.Helper()
	golden.Check(t, filepath.Join("testdata", name), got, *update, "go test ./subtitle -update")
}

func TestSubtitleGolden(t *testing.T) {
	words := []contract.Word{
		{Word: "the", Start: 0.31, End: 0.45}, {Word: "patient", Start: 0.45, End: 0.9},
		{Word: "is", Start: 0.9, End: 1.0}, {Word: "stable", Start: 1.0, End: 1.5},
		// a long pause starts a new cue
		{Word: "follow", Start: 3.2, End: 3.5}, {Word: "up", Start: 3.5, End: 3.7},
		{Word: "in", Start: 3.7, End: 3.8}, {Word: "two", Start: 3.8, End: 4.0}, {Word: "weeks", Start: 4.0, End: 4.4},
		{Word: "later", Start: 3661.0, End: 3661.5}, // past an hour
	}
	tr := contract.Transcript{Text: "the patient is stable follow up in two weeks later", Words: words, Segments: BuildSegments(words)}
	if len(tr.Segments) != 3 {
		t.Fatalf("%d segments, want 3: %+v", len(tr.Segments), tr.Segments)
	}
	goldenFile(t, "transcript.srt", RenderSRT(tr))
	goldenFile(t, "transcript.vtt", RenderVTT(tr))
	goldenFile(t, "transcript.txt", RenderTXT(tr))
}
