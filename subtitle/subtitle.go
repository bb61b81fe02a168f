package subtitle

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/fleetscribe/fleetscribe/contract"
)

// Subtitle conventions the segments follow (those of broadcasters' and
// streaming services' style guides): a cue is at most cueMaxSeconds long
// and fits cueMaxLines lines of at most cueLineChars characters; cues end
// at pauses and sentence ends; cues never overlap and are in order.
const (
	cueMaxSeconds = 7.0
	cueLineChars  = 42
	cueMaxLines   = 2
	cuePause      = 0.8 // a pause this long ends a cue
	cueSentence   = 1.5 // a cue this long ends at a sentence end
	cueMinSeconds = 0.8 // a shorter cue is held this long when the next allows
)

// BuildSegments groups words into subtitle cues: a new cue starts after a
// pause, after a sentence end once the cue has been up long enough to
// read, when the next word would make the cue too long to read or to
// fit its lines, and when the speaker changes (a cue is one speaker's and
// carries the speaker's label).
func BuildSegments(words []contract.Word) []contract.Segment {
	var (
		out []contract.Segment
		cur *contract.Segment
	)
	for _, w := range words {
		word := strings.TrimSpace(w.Word)
		if word == "" {
			continue
		}
		if cur != nil && (w.Start-cur.End > cuePause || w.End-cur.Start > cueMaxSeconds || w.Speaker != cur.Speaker ||
			!fitsCue(cur.Text+" "+word) || endsSentence(cur.Text) && cur.End-cur.Start >= cueSentence) {
			out = append(out, *cur)
			cur = nil
		}
		if cur == nil {
			cur = &contract.Segment{Start: w.Start, End: w.End, Text: word, Speaker: w.Speaker}
			continue
		}
		cur.End = max(cur.End, w.End)
		cur.Text += " " + word
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return tidyCues(out)
}

// SplitSegments cuts segments without word times (a model that gives only
// text: one segment per chunk, up to a chunk's length) into cues by the
// same rules, giving each cue a share of its segment's time in proportion
// to its characters.
func SplitSegments(segs []contract.Segment) []contract.Segment {
	var out []contract.Segment
	for _, s := range segs {
		words := strings.Fields(s.Text)
		if len(words) == 0 {
			continue
		}
		total := len(strings.Join(words, " "))
		perChar := (s.End - s.Start) / float64(max(total, 1))
		var cue []string
		pos := 0 // characters before the cue
		flush := func() {
			text := strings.Join(cue, " ")
			start := s.Start + float64(pos)*perChar
			end := min(start+float64(len(text))*perChar, start+cueMaxSeconds)
			out = append(out, contract.Segment{Start: start, End: end, Text: text})
			pos += len(text) + 1
			cue = nil
		}
		for _, w := range words {
			if len(cue) > 0 {
				text := strings.Join(cue, " ")
				dur := float64(len(text)+1+len(w)) * perChar
				if !fitsCue(text+" "+w) || dur > cueMaxSeconds || endsSentence(text) && float64(len(text))*perChar >= cueSentence {
					flush()
				}
			}
			cue = append(cue, w)
		}
		flush()
	}
	return tidyCues(out)
}

// tidyCues puts cues in order, ends each before the next starts, and holds
// a very short one up to cueMinSeconds where there is room.
func tidyCues(cues []contract.Segment) []contract.Segment {
	slices.SortStableFunc(cues, func(a, b contract.Segment) int { return cmp.Compare(a.Start, b.Start) })
	for i := range cues {
		c := &cues[i]
		next := math.Inf(1)
		if i+1 < len(cues) {
			next = cues[i+1].Start
		}
		if c.End-c.Start < cueMinSeconds {
			c.End = min(c.Start+cueMinSeconds, next)
		}
		c.End = min(c.End, next)
		if c.End <= c.Start {
			c.End = c.Start + 0.001
		}
	}
	return cues
}

func endsSentence(text string) bool {
	return strings.HasSuffix(text, ".") || strings.HasSuffix(text, "?") || strings.HasSuffix(text, "!")
}

// fitsCue reports whether text fits a cue's lines.
func fitsCue(text string) bool { return len(wrapCue(text)) <= cueMaxLines }

// wrapCue breaks a cue's text into lines of at most cueLineChars
// characters, as evenly as it can (a bottom-heavy pair when uneven); a
// single word longer than a line stands alone.
func wrapCue(text string) []string {
	if utf8.RuneCountInString(text) <= cueLineChars {
		return []string{text}
	}
	words := strings.Fields(text)
	// Two lines: the break that makes the longer line shortest.
	best, bestLen := -1, math.MaxInt
	for i := 1; i < len(words); i++ {
		a := utf8.RuneCountInString(strings.Join(words[:i], " "))
		b := utf8.RuneCountInString(strings.Join(words[i:], " "))
		if a <= cueLineChars && b <= cueLineChars && max(a, b) < bestLen {
			best, bestLen = i, max(a, b)
		}
	}
	if best > 0 {
		return []string{strings.Join(words[:best], " "), strings.Join(words[best:], " ")}
	}
	// More than two lines' worth: fill greedily (the caller keeps cues to
	// two lines; this is for a single overlong word or an overlong cue).
	var lines []string
	line := ""
	for _, w := range words {
		switch {
		case line == "":
			line = w
		case utf8.RuneCountInString(line)+1+utf8.RuneCountInString(w) <= cueLineChars:
			line += " " + w
		default:
			lines = append(lines, line)
			line = w
		}
	}
	return append(lines, line)
}

// Marks flags the words a reviewer should check: a word whose confidence
// is below Below (0: no marks, the default) is written "[word?]" in TXT
// and SRT, and in a WebVTT class span "<c.low>word</c>" (style it with
// ::cue(.low)). A word without a confidence is never marked.
type Marks struct {
	Below float64
}

// mark is w's text as Marks write it in TXT and SRT.
func (m Marks) mark(w contract.Word, vtt bool) string {
	word := strings.TrimSpace(w.Word)
	switch {
	case m.Below <= 0 || w.Confidence <= 0 || w.Confidence >= m.Below:
		return word
	case vtt:
		return "<c.low>" + word + "</c>"
	}
	return "[" + word + "?]"
}

// RenderTXT returns the plain text transcript; with speakers, a line for
// each run of one speaker's words: "spk_0: text".
func RenderTXT(t contract.Transcript) []byte { return RenderTXTMarked(t, Marks{}) }

// RenderTXTMarked is RenderTXT with the words below m's threshold marked
// (the text is then the words', which the transcript's text joins).
func RenderTXTMarked(t contract.Transcript, m Marks) []byte {
	if len(t.Speakers) == 0 && (m.Below <= 0 || len(t.Words) == 0) {
		return []byte(t.Text + "\n")
	}
	var b strings.Builder
	label := ""
	for i, w := range t.Words {
		word := m.mark(w, false)
		if word == "" {
			continue
		}
		switch {
		case len(t.Speakers) == 0:
			if b.Len() > 0 {
				b.WriteString(" ")
			}
			b.WriteString(word)
		case i == 0 || w.Speaker != label:
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			label = w.Speaker
			fmt.Fprintf(&b, "%s: %s", label, word)
		default:
			b.WriteString(" " + word)
		}
	}
	b.WriteString("\n")
	return []byte(b.String())
}

// cueText is a segment's lines, with its speaker: "spk_0: " before the
// text for SRT (which has no speaker markup), a WebVTT voice span for VTT;
// marked, the segment's words as m marks them (words: the segment's words
// in order, nil where the words are not known).
func cueText(s contract.Segment, vtt bool, m Marks, words []contract.Word) string {
	lines := wrapCue(s.Text)
	if m.Below > 0 && words != nil {
		lines = markLines(lines, words, m, vtt)
	}
	switch {
	case s.Speaker == "":
	case vtt:
		lines[0] = "<v " + s.Speaker + ">" + lines[0]
	default:
		lines[0] = s.Speaker + ": " + lines[0]
	}
	return strings.Join(lines, "\n")
}

// markLines writes each line's words as m marks them: words are the cue's,
// in order, one for each word of its lines.
func markLines(lines []string, words []contract.Word, m Marks, vtt bool) []string {
	out := make([]string, len(lines))
	next := 0
	for i, line := range lines {
		fields := strings.Fields(line)
		for j := range fields {
			if next < len(words) {
				fields[j] = m.mark(words[next], vtt)
			}
			next++
		}
		out[i] = strings.Join(fields, " ")
	}
	return out
}

// cueWords returns each segment's words (the transcript's words in order,
// as many as each segment's text has), or nil where they do not match the
// segments' text (segments not built from the words).
func cueWords(t contract.Transcript) [][]contract.Word {
	var words []contract.Word
	for _, w := range t.Words {
		if strings.TrimSpace(w.Word) != "" {
			words = append(words, w)
		}
	}
	out := make([][]contract.Word, len(t.Segments))
	at := 0
	for i, s := range t.Segments {
		n := len(strings.Fields(s.Text))
		if at+n > len(words) {
			return nil
		}
		for k := range n {
			if strings.TrimSpace(words[at+k].Word) != strings.Fields(s.Text)[k] {
				return nil
			}
		}
		out[i] = words[at : at+n]
		at += n
	}
	return out
}

// noSpeech is the one cue of a recording without speech: players refuse
// an SRT file without cues.
const noSpeech = "[no speech]"

// RenderSRT returns SubRip subtitles for the transcript's segments, each
// cue wrapped to its lines.
func RenderSRT(t contract.Transcript) []byte { return RenderSRTMarked(t, Marks{}) }

// RenderSRTMarked is RenderSRT with the words below m's threshold marked.
func RenderSRTMarked(t contract.Transcript, m Marks) []byte {
	var b strings.Builder
	segs := t.Segments
	words := cueWords(t)
	if len(segs) == 0 {
		segs, words = []contract.Segment{{Start: 0, End: max(min(t.DurationSec, cueMaxSeconds), cueMinSeconds), Text: noSpeech}}, nil
	}
	for i, s := range segs {
		fmt.Fprintf(&b, "%d\n%s --> %s\n%s\n\n", i+1, subTime(s.Start, ","), subTime(s.End, ","), cueText(s, false, m, at(words, i)))
	}
	return []byte(b.String())
}

// RenderVTT returns WebVTT subtitles for the transcript's segments, each
// cue wrapped to its lines (a file without cues is valid WebVTT).
func RenderVTT(t contract.Transcript) []byte { return RenderVTTMarked(t, Marks{}) }

// RenderVTTMarked is RenderVTT with the words below m's threshold marked.
func RenderVTTMarked(t contract.Transcript, m Marks) []byte {
	var b strings.Builder
	b.WriteString("WEBVTT\n\n")
	words := cueWords(t)
	for i, s := range t.Segments {
		fmt.Fprintf(&b, "%s --> %s\n%s\n\n", subTime(s.Start, "."), subTime(s.End, "."), cueText(s, true, m, at(words, i)))
	}
	return []byte(b.String())
}

// at is words[i], or nil where words is.
func at(words [][]contract.Word, i int) []contract.Word {
	if words == nil {
		return nil
	}
	return words[i]
}

func subTime(sec float64, sep string) string {
	ms := int64(sec*1000 + 0.5)
	if ms < 0 {
		ms = 0
	}
	return fmt.Sprintf("%02d:%02d:%02d%s%03d", ms/3600000, ms/60000%60, ms/1000%60, sep, ms%1000)
}
