package worker

import (
	"fmt"
	"strings"

	"github.com/fleetscribe/fleetscribe/triton"
)

// Segmentation limits for subtitles.
const (
	segMaxGap   = 0.8 // seconds of silence that end a segment
	segMaxLen   = 7.0 // seconds
	segMaxChars = 84  // two subtitle lines
)

// BuildSegments groups words into subtitle-sized segments: a new segment
// starts after a pause, or when the current one is too long to read.
func BuildSegments(words []triton.Word) []Segment {
	var (
		out []Segment
		cur *Segment
	)
	for _, w := range words {
		if cur != nil && (w.Start-cur.End > segMaxGap || w.End-cur.Start > segMaxLen || len(cur.Text)+1+len(w.Word) > segMaxChars) {
			out = append(out, *cur)
			cur = nil
		}
		if cur == nil {
			cur = &Segment{Start: w.Start, End: w.End, Text: w.Word}
			continue
		}
		cur.End = w.End
		cur.Text += " " + w.Word
	}
	if cur != nil {
		out = append(out, *cur)
	}
	return out
}

// RenderTXT returns the plain text transcript.
func RenderTXT(t Transcript) []byte { return []byte(t.Text + "\n") }

// RenderSRT returns SubRip subtitles for the transcript's segments.
func RenderSRT(t Transcript) []byte {
	var b strings.Builder
	for i, s := range t.Segments {
		fmt.Fprintf(&b, "%d\n%s --> %s\n%s\n\n", i+1, subTime(s.Start, ","), subTime(s.End, ","), s.Text)
	}
	return []byte(b.String())
}

// RenderVTT returns WebVTT subtitles for the transcript's segments.
func RenderVTT(t Transcript) []byte {
	var b strings.Builder
	b.WriteString("WEBVTT\n\n")
	for _, s := range t.Segments {
		fmt.Fprintf(&b, "%s --> %s\n%s\n\n", subTime(s.Start, "."), subTime(s.End, "."), s.Text)
	}
	return []byte(b.String())
}

func subTime(sec float64, sep string) string {
	ms := int64(sec*1000 + 0.5)
	if ms < 0 {
		ms = 0
	}
	return fmt.Sprintf("%02d:%02d:%02d%s%03d", ms/3600000, ms/60000%60, ms/1000%60, sep, ms%1000)
}
