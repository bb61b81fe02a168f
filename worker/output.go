package worker

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/fleetscribe/fleetscribe/triton"
)

// Schemas of the records the worker writes.
const (
	TranscriptSchema = "fleetscribe.transcript/v1"
	ErrorSchema      = "fleetscribe.error/v1"
)

// InputRef identifies the exact input object a record was made from.
type InputRef struct {
	Bucket    string `json:"bucket"`
	Key       string `json:"key"`
	ETag      string `json:"etag,omitempty"`
	VersionID string `json:"version_id,omitempty"`
	Size      int64  `json:"size,omitempty"`
}

// Segment is a stretch of speech with its text, for subtitles and reading.
type Segment struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Text  string  `json:"text"`
}

// Transcript is the JSON document written for a finished job.
type Transcript struct {
	Schema      string        `json:"schema"`
	Input       InputRef      `json:"input"`
	Model       string        `json:"model"`
	Text        string        `json:"text"`
	Segments    []Segment     `json:"segments"`
	Words       []triton.Word `json:"words,omitempty"`
	DurationSec float64       `json:"duration_s"`
	SampleRate  int           `json:"source_sample_rate"`
	Chunks      int           `json:"chunks"`
	Attempt     int           `json:"attempt"`
	CreatedAt   time.Time     `json:"created_at"`
}

// ErrorRecord is the JSON document written where a failed job's transcript
// would have gone.
type ErrorRecord struct {
	Schema    string    `json:"schema"`
	Input     InputRef  `json:"input"`
	Model     string    `json:"model"`
	Class     string    `json:"error_class"`
	Message   string    `json:"error"`
	Attempt   int       `json:"attempt"`
	Final     bool      `json:"final"` // false: the message stays queued and may still succeed from the DLQ
	CreatedAt time.Time `json:"created_at"`
	// For a message that is not a job: its id and body, kept so nothing is lost.
	MessageID   string `json:"message_id,omitempty"`
	MessageBody string `json:"message_body,omitempty"`
}

// InvalidMessageKey is where the error record of a message that is not a
// job goes: there is no input key to put it beside.
func InvalidMessageKey(prefix, messageID string) string {
	return prefix + "_invalid-messages/" + sanitizeSegment(messageID) + ".error.json"
}

// OutputKeys are the deterministic keys of one job's outputs.
type OutputKeys struct {
	Base  string // without extension
	JSON  string
	Error string
}

// Key returns the key for an extra format ("txt", "srt", "vtt").
func (k OutputKeys) Key(format string) string { return k.Base + "." + format }

// KeysFor derives output keys from the input key, its version (or ETag)
// and the model, so the same input and model always map to the same
// transcript, and a new upload of the same key to a new one:
//
//	{prefix}{input key}/{model}/{version id or etag}.json
func KeysFor(prefix string, in InputRef, model string) OutputKeys {
	tag := "unversioned"
	switch {
	case in.VersionID != "" && in.VersionID != "null":
		tag = "v-" + in.VersionID
	case in.ETag != "":
		tag = "e-" + strings.Trim(in.ETag, `"`)
	}
	tag = sanitizeSegment(tag)
	base := prefix + path.Clean("/" + in.Key)[1:] + "/" + sanitizeSegment(model) + "/" + tag
	return OutputKeys{Base: base, JSON: base + ".json", Error: base + ".error.json"}
}

func sanitizeSegment(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
			return r
		default:
			return '_'
		}
	}, s)
}

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
