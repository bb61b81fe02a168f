package contract

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Schemas of the records the worker writes.
const (
	TranscriptSchema = "fleetscribe.transcript/v1"
	// TranscriptSchemaSpeakers is the schema of a transcript with
	// speakers: v1's fields with the same meaning (a v1 reader reads it as
	// it reads v1), and speakers on words and segments, speaker turns, a
	// summary per speaker and how they were found.
	TranscriptSchemaSpeakers = "fleetscribe.transcript/v2"
	ErrorSchema              = "fleetscribe.error/v1"
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
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
	Text    string  `json:"text"`
	Speaker string  `json:"speaker,omitempty"` // v2: a segment is one speaker's
}

// Word is one recognised word and its time in the recording, in seconds.
type Word struct {
	Word       string  `json:"word"`
	Start      float64 `json:"start"`
	End        float64 `json:"end"`
	Confidence float64 `json:"confidence,omitempty"`
	Speaker    string  `json:"speaker,omitempty"` // v2: who said it
}

// Transcript is the JSON document written for a finished job.
type Transcript struct {
	Schema      string    `json:"schema"`
	Input       InputRef  `json:"input"`
	Model       string    `json:"model"`
	Text        string    `json:"text"`
	Segments    []Segment `json:"segments"`
	Words       []Word    `json:"words,omitempty"`
	DurationSec float64   `json:"duration_s"`
	SampleRate  int       `json:"source_sample_rate"`
	Chunks      int       `json:"chunks"`
	Attempt     int       `json:"attempt"`
	CreatedAt   time.Time `json:"created_at"`
	// v2 (TranscriptSchemaSpeakers): the speakers, in order of first
	// appearance; their turns, in time order (turns of two speakers may
	// overlap); how they were found; or why a job that asked has none.
	Speakers     []SpeakerSummary `json:"speakers,omitempty"`
	SpeakerTurns []SpeakerTurn    `json:"speaker_turns,omitempty"`
	Diarization  *Diarization     `json:"diarization,omitempty"`
	SpeakerError *SpeakerError    `json:"speaker_error,omitempty"`
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

// ErrorRecordTag is set on error records so a bucket lifecycle rule can
// expire them (lifecycle filters match tags and prefixes, not suffixes).
const ErrorRecordTag = "fleetscribe-record=error"

// MetaFinal is the user metadata of an error record saying whether it is
// final ("true") or provisional ("false": the message stays queued and may
// still succeed), so a listing can tell them apart without reading them.
const MetaFinal = "fleetscribe-final"

// MaxKeyBytes is S3's limit on the length of an object key, in UTF-8 bytes.
const MaxKeyBytes = 1024

// MaxPrefixBytes bounds an output prefix, the worker's or a job's, so that
// every output key fits MaxKeyBytes whatever the input key.
const MaxPrefixBytes = 512

// hashedMarker starts the key segment of inputs whose readable output key
// would be too long. It cannot occur in a readable key: there every '%' is
// followed by two hex digits.
const hashedMarker = "%hashed"

// Output suffixes. The JSON transcript's existence means the job is done.
const (
	suffixJSON  = ".json"
	suffixError = ".error.json"
	suffixClaim = ".claim"
)

// InvalidMessageKey is where the error record of a message that is not a
// job goes: there is no input key to put it beside. Readable output keys
// start with a bucket name, which never starts with '_'.
func InvalidMessageKey(prefix, messageID string) string {
	return prefix + "_invalid-messages/" + escapeSegment(messageID) + suffixError
}

// RejectedRecordKey is where the error record of record i of a message of
// several goes when that record is refused (not a job, or refused by the
// worker's policy): named by the message, so each refused record has its
// own, none beside an input's outputs where a reader would take it for
// that input's outcome.
func RejectedRecordKey(prefix, messageID string, i int) string {
	// escapeSegment escapes every dot, so ".record-" cannot come from an id.
	return fmt.Sprintf("%s_invalid-messages/%s.record-%d%s", prefix, escapeSegment(messageID), i, suffixError)
}

// UnwritableRecordKey is where the error record of a job goes when S3
// refuses its usual key: a short key that any legal prefix fits.
func UnwritableRecordKey(prefix string, keys OutputKeys) string {
	sum := sha256.Sum256([]byte(keys.Base))
	return prefix + "_unwritable/" + hex.EncodeToString(sum[:]) + suffixError
}

// OutputKeys are the deterministic keys of one job's outputs.
type OutputKeys struct {
	Base  string // without extension
	JSON  string
	Error string
	Claim string // short-lived marker of a job in progress
}

// Key returns the key for an extra format ("txt", "srt", "vtt").
func (k OutputKeys) Key(format string) string { return k.Base + "." + format }

// KeysFor derives output keys from the input bucket, key, version (or
// ETag) and the model, so the same input and model always map to the same
// transcript, a new upload of the same key to a new one, and distinct
// inputs to distinct outputs:
//
//	{prefix}{bucket}/{escaped key}/{model}/{v-version | e-etag | unversioned}.json
//
// The input key is kept as it is, except that '%', control characters, a
// '/' that would start an empty path segment (leading, trailing or
// doubled), the dots of "." and ".." segments and the last dot of a
// segment ending like an output file (".json", ".txt", ...) are
// percent-encoded, so that ordinary keys read as themselves, no tool that
// treats keys as paths can fold two outputs together, and no output key
// lies under another's as under a folder. Where that key would pass
// MaxKeyBytes, the key segment is replaced by "%hashed/" and the SHA-256
// of the input key (and, if still too long, of the model and tag too).
// prefix must be at most MaxPrefixBytes long (Config.Validate and
// CheckOutputPrefix see to that).
func KeysFor(prefix string, in InputRef, model string) OutputKeys {
	tag := "unversioned"
	switch {
	case in.VersionID != "" && in.VersionID != "null":
		tag = "v-" + in.VersionID
	case in.ETag != "":
		tag = "e-" + strings.Trim(in.ETag, `"`)
	}
	head := prefix + in.Bucket + "/"
	tail := "/" + escapeSegment(model) + "/" + escapeSegment(tag)
	base := head + EscapeKey(in.Key) + tail
	if len(base)+len(suffixError) > MaxKeyBytes {
		sum := sha256.Sum256([]byte(in.Key))
		base = head + hashedMarker + "/" + hex.EncodeToString(sum[:]) + tail
	}
	if len(base)+len(suffixError) > MaxKeyBytes {
		h := sha256.New()
		for _, s := range []string{in.Key, model, tag} {
			fmt.Fprintf(h, "%d:%s", len(s), s)
		}
		base = head + hashedMarker + "/" + hex.EncodeToString(h.Sum(nil))
	}
	return OutputKeys{Base: base, JSON: base + suffixJSON, Error: base + suffixError, Claim: base + suffixClaim}
}

// outputSuffixes end the last segment of every output key (and of the
// error records of messages that are not jobs).
var outputSuffixes = []string{suffixError, suffixJSON, suffixClaim, "." + FormatTXT, "." + FormatSRT, "." + FormatVTT}

// endsLikeOutput reports whether a segment ends like the last segment of
// an output key. No other segment of an output key may (escaped input keys
// have that dot percent-encoded; prefixes and bucket names with such a
// segment are refused), so no output key is a folder of another: a key
// like "{prefix}a/x/asr/unversioned.json/..." cannot be made.
func endsLikeOutput(seg string) bool {
	for _, suf := range outputSuffixes {
		if len(seg) > len(suf) && strings.HasSuffix(seg, suf) {
			return true
		}
	}
	return false
}

// EscapeKey returns the readable form of an input key used in output
// keys (see KeysFor). UnescapeKey reverses it.
func EscapeKey(key string) string {
	var b strings.Builder
	segStart, lastDot := 0, segmentLastDot(key, 0)
	for i := 0; i < len(key); i++ {
		c := key[i]
		switch {
		case c == '/':
			// Literal only where it ends a non-empty segment and more follows.
			if i > 0 && key[i-1] != '/' && i+1 < len(key) {
				b.WriteByte('/')
			} else {
				b.WriteString("%2F")
			}
			segStart = i + 1
			lastDot = segmentLastDot(key, segStart)
		case c == '.' && (dotSegment(key, segStart) || i == lastDot):
			b.WriteString("%2E")
		case c == '%' || c < 0x20 || c == 0x7F:
			fmt.Fprintf(&b, "%%%02X", c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

// segmentLastDot returns the index of the last '.' of the segment starting
// at start when the segment ends like an output key (endsLikeOutput), so
// that EscapeKey encodes it; -1 otherwise.
func segmentLastDot(key string, start int) int {
	end := strings.IndexByte(key[start:], '/')
	if end < 0 {
		end = len(key) - start
	}
	seg := key[start : start+end]
	if !endsLikeOutput(seg) {
		return -1
	}
	return start + strings.LastIndexByte(seg, '.')
}

// dotSegment reports whether the segment starting at start is "." or "..".
func dotSegment(key string, start int) bool {
	end := strings.IndexByte(key[start:], '/')
	if end < 0 {
		end = len(key) - start
	}
	seg := key[start : start+end]
	return seg == "." || seg == ".."
}

// UnescapeKey reverses EscapeKey.
func UnescapeKey(s string) (string, error) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '%' {
			b.WriteByte(s[i])
			continue
		}
		if i+2 >= len(s) {
			return "", errors.New("truncated escape")
		}
		v, err := hex.DecodeString(s[i+1 : i+3])
		if err != nil {
			return "", fmt.Errorf("bad escape %q", s[i:i+3])
		}
		b.WriteByte(v[0])
		i += 2
	}
	if !utf8.ValidString(b.String()) {
		return "", errors.New("not UTF-8")
	}
	return b.String(), nil
}

// escapeSegment percent-encodes every byte of s but letters, digits, '-'
// and '_', so a model name or version id is one path segment without
// dots and distinct values stay distinct.
func escapeSegment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// CheckOutputPrefix reports an output prefix that is unsafe to write
// under: longer than MaxPrefixBytes, not ending in '/', or with an empty,
// "." or ".." segment, a leading '/', control characters or a '%'.
func CheckOutputPrefix(p string) error {
	switch {
	case p == "":
		return nil
	case len(p) > MaxPrefixBytes:
		return fmt.Errorf("output prefix is %d bytes, limit %d", len(p), MaxPrefixBytes)
	case !strings.HasSuffix(p, "/"):
		return fmt.Errorf("output prefix %q must end with '/'", p)
	case !utf8.ValidString(p):
		return errors.New("output prefix is not UTF-8")
	}
	for _, seg := range strings.Split(strings.TrimSuffix(p, "/"), "/") {
		if seg == "" || seg == "." || seg == ".." {
			return fmt.Errorf("output prefix %q has an empty, '.' or '..' segment", p)
		}
		if endsLikeOutput(seg) {
			return fmt.Errorf("output prefix %q has a segment %q ending like an output file (%s): outputs under it could lie under another input's", p, seg, strings.Join(outputSuffixes, ", "))
		}
		for _, r := range seg {
			if r < 0x20 || r == 0x7F || r == '%' || r == '\\' {
				return fmt.Errorf("output prefix %q has a control character, '%%' or '\\'", p)
			}
		}
	}
	return nil
}
