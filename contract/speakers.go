package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Who spoke, asked for per job in one of two ways:
//
//   - Speakers: the recording is diarized (a diarization model finds the
//     voices) and every word gets the label of its speaker ("spk_0",
//     "spk_1", ... in order of first appearance). "speakers": true, or an
//     object with hints: {"min": 2, "max": 4}; "speakers": false turns a
//     queue's default off.
//   - Channels "split": each channel of the recording is transcribed on its
//     own and is its own speaker ("ch_0", "ch_1", ...), for call recordings
//     with one party per channel; "mix" (the default) mixes them down.
//
// A job asks for one or the other, not both. A job that says neither takes
// the worker's default for its queue.

// Channel modes of Job.Channels.
const (
	ChannelsMix   = "mix"
	ChannelsSplit = "split"
)

// MaxSpeakerHint bounds a job's speaker hints, whatever the model
// (Amazon Transcribe's bound for MaxSpeakerLabels); a worker refuses hints
// over its diarization model's own, lower, limit.
const MaxSpeakerHint = 30

// MaxChannels bounds the channels a split job transcribes.
const MaxChannels = 8

// Speaker labels: SpeakerLabel(i) for diarized speakers, ChannelLabel(i)
// for split channels.
func SpeakerLabel(i int) string { return "spk_" + strconv.Itoa(i) }

// ChannelLabel is the speaker label of channel i of a split job.
func ChannelLabel(i int) string { return "ch_" + strconv.Itoa(i) }

// SpeakerHints asks for diarization, with optional bounds on the number of
// speakers. Its JSON is true, false (Off: no diarization, over a queue
// default), or {"min": n, "max": n} (either optional).
type SpeakerHints struct {
	Off bool `json:"-"`
	Min int  `json:"min,omitempty"` // 0: no lower bound
	Max int  `json:"max,omitempty"` // 0: no upper bound
}

// On reports whether h asks for diarization.
func (h *SpeakerHints) On() bool { return h != nil && !h.Off }

// MarshalJSON writes false for Off, true without hints, else the hints.
func (h SpeakerHints) MarshalJSON() ([]byte, error) {
	switch {
	case h.Off:
		return []byte("false"), nil
	case h.Min == 0 && h.Max == 0:
		return []byte("true"), nil
	}
	type plain SpeakerHints
	return json.Marshal(plain(h))
}

// UnmarshalJSON reads true, false or an object of whole-number hints;
// anything else is an error that says what is wanted.
func (h *SpeakerHints) UnmarshalJSON(b []byte) error {
	switch t := string(bytes.TrimSpace(b)); t {
	case "true":
		*h = SpeakerHints{}
		return nil
	case "false":
		*h = SpeakerHints{Off: true}
		return nil
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || raw == nil {
		return errors.New(`"speakers" must be true, false or {"min": n, "max": n}`)
	}
	*h = SpeakerHints{}
	for k, v := range raw {
		var dst *int
		switch k {
		case "min":
			dst = &h.Min
		case "max":
			dst = &h.Max
		default:
			return fmt.Errorf(`"speakers" has an unknown field %q (want min, max)`, k)
		}
		n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
		if err != nil {
			return fmt.Errorf(`"speakers.%s" must be a whole number, got %.20s`, k, v)
		}
		if n == 0 && k == "max" {
			return errors.New(`"speakers.max" is 0: a recording with speakers has at least one (leave max out for no bound)`)
		}
		*dst = n
	}
	return h.Validate()
}

// Validate refuses hints no recording can meet: negative, above
// MaxSpeakerHint, or a max below the min.
func (h SpeakerHints) Validate() error {
	switch {
	case h.Off:
		return nil
	case h.Min < 0 || h.Max < 0:
		return fmt.Errorf("speaker hints min %d, max %d: must not be negative", h.Min, h.Max)
	case h.Min > MaxSpeakerHint || h.Max > MaxSpeakerHint:
		return fmt.Errorf("speaker hints min %d, max %d: at most %d speakers", h.Min, h.Max, MaxSpeakerHint)
	case h.Max > 0 && h.Max < h.Min:
		return fmt.Errorf("speaker hints: max %d is below min %d", h.Max, h.Min)
	}
	return nil
}

// String is the hints as flags and logs write them: "on", "off", "min=2,max=4".
func (h SpeakerHints) String() string {
	switch {
	case h.Off:
		return "off"
	case h.Min == 0 && h.Max == 0:
		return "on"
	case h.Max == 0:
		return fmt.Sprintf("min=%d", h.Min)
	case h.Min == 0:
		return fmt.Sprintf("max=%d", h.Max)
	}
	return fmt.Sprintf("min=%d,max=%d", h.Min, h.Max)
}

// ParseSpeakerHints reads the flag form of hints: "" (nil: not said),
// "on" (or "true"), "off" (or "false"), or "min=N", "max=N" or both,
// comma-separated.
func ParseSpeakerHints(s string) (*SpeakerHints, error) {
	switch s {
	case "":
		return nil, nil
	case "off", "false":
		return &SpeakerHints{Off: true}, nil
	case "on", "true":
		return &SpeakerHints{}, nil
	}
	h := &SpeakerHints{}
	for _, kv := range bytes.Split([]byte(s), []byte(",")) {
		k, v, ok := bytes.Cut(kv, []byte("="))
		if !ok {
			return nil, fmt.Errorf("speakers %q: want on, off, or min=N,max=N", s)
		}
		n, err := strconv.Atoi(string(v))
		if err != nil {
			return nil, fmt.Errorf("speakers %q: %s must be a whole number", s, k)
		}
		switch string(k) {
		case "min":
			h.Min = n
		case "max":
			if n == 0 {
				return nil, fmt.Errorf("speakers %q: max 0 (leave it out for no bound)", s)
			}
			h.Max = n
		default:
			return nil, fmt.Errorf("speakers %q: unknown hint %q (want min, max)", s, k)
		}
	}
	return h, h.Validate()
}

// CheckChannels refuses a channel mode other than "", mix and split.
func CheckChannels(mode string) error {
	if mode != "" && mode != ChannelsMix && mode != ChannelsSplit {
		return fmt.Errorf("channels %q: want %s or %s", mode, ChannelsMix, ChannelsSplit)
	}
	return nil
}

// SpeakerTurn is a stretch of time one speaker talks. Turns of different
// speakers may overlap: two people talking at once is kept as it is.
type SpeakerTurn struct {
	Speaker string  `json:"speaker"`
	Start   float64 `json:"start"`
	End     float64 `json:"end"`
}

// SpeakerSummary is what one speaker said in all: talk time (the union of
// their turns), words, and the channel for a split job.
type SpeakerSummary struct {
	Label       string  `json:"label"`
	TalkSeconds float64 `json:"talk_s"`
	Words       int     `json:"words"`
	Channel     *int    `json:"channel,omitempty"`
}

// Diarization says how a transcript's speakers were found: Mode "speakers"
// (diarized, with the job's hints and the model that did it) or
// "channels" (one speaker a channel). OverlapSeconds is the time two or
// more speakers talk at once.
type Diarization struct {
	Mode           string  `json:"mode"`
	Model          string  `json:"model,omitempty"`
	MinSpeakers    int     `json:"min_speakers,omitempty"`
	MaxSpeakers    int     `json:"max_speakers,omitempty"`
	OverlapSeconds float64 `json:"overlap_s"`
}

// Diarization modes.
const (
	ModeSpeakers = "speakers"
	ModeChannels = "channels"
)

// SpeakerError is why a transcript that asked for speakers has none: the
// transcript is kept, words without speakers (see docs/contracts.md).
type SpeakerError struct {
	Class   string `json:"error_class"`
	Message string `json:"error"`
}
