// Package conversation makes synthetic conversations for the speaker
// tests, the demo and the diarization benchmark: sentences of everyday
// clinical speech read by ffmpeg's flite voices, taking turns with pauses,
// sometimes talking over each other, with the reference of who said what
// when. The same seed makes the same conversation.
package conversation

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Rate is the rate of the samples made here (the model contract's).
const Rate = 16000

// Voices are flite's distinct voices (kal and kal16 are one speaker): a
// conversation of n speakers takes n of them.
var Voices = []string{"slt", "rms", "awb", "kal16"}

// Utterance is one sentence of one speaker, where it lies in the recording.
type Utterance struct {
	Speaker    int     // index into Conversation.Voices
	Text       string  // as read (lower case, no punctuation)
	Start, End float64 // seconds, speech only (the synthesiser's silence trimmed)
}

// Conversation is the recording and its reference.
type Conversation struct {
	Samples    []float32 // mono, Rate
	Voices     []string  // voice of each speaker
	Utterances []Utterance
}

// Spec says what conversation to make.
type Spec struct {
	Seed     uint64
	Speakers int     // 1 to len(Voices)
	Seconds  float64 // about how long (the last turn finishes)
	// Overlap is the chance that a turn starts before the one before it
	// ends (0.8-1.5 s early).
	Overlap float64
}

// Synth reads text in a voice: mono samples at Rate, its silences kept.
type Synth func(ctx context.Context, text, voice string) ([]float32, error)

// Make makes the conversation spec asks for.
func Make(ctx context.Context, spec Spec, synth Synth) (Conversation, error) {
	if spec.Speakers < 1 || spec.Speakers > len(Voices) {
		return Conversation{}, fmt.Errorf("conversation of %d speakers: 1 to %d", spec.Speakers, len(Voices))
	}
	rng := rand.New(rand.NewPCG(spec.Seed, 0x5eed))
	voices := slices.Clone(Voices)
	rng.Shuffle(len(voices), func(i, j int) { voices[i], voices[j] = voices[j], voices[i] })
	voices = voices[:spec.Speakers]
	gains := make([]float32, len(voices))
	for i := range gains {
		gains[i] = float32(0.6 + 0.4*rng.Float64())
	}
	total := int(spec.Seconds * Rate)
	out := make([]float32, 0, total+30*Rate)
	var utts []Utterance
	at := int((0.3 + 0.7*rng.Float64()) * Rate)
	speaker := rng.IntN(spec.Speakers)
	for at < total {
		for range []int{1, 1, 2, 3}[rng.IntN(4)] {
			text := Sentence(rng)
			x, err := synth(ctx, text, voices[speaker])
			if err != nil {
				return Conversation{}, err
			}
			x = trim(x)
			if len(out) < at+len(x) {
				out = append(out, make([]float32, at+len(x)-len(out))...)
			}
			for i, v := range x {
				out[at+i] += v * gains[speaker]
			}
			utts = append(utts, Utterance{Speaker: speaker, Text: text, Start: float64(at) / Rate, End: float64(at+len(x)) / Rate})
			at += len(x) + int((0.15+0.35*rng.Float64())*Rate)
		}
		if spec.Speakers > 1 {
			next := rng.IntN(spec.Speakers - 1)
			if next >= speaker {
				next++
			}
			speaker = next
		}
		if rng.Float64() < spec.Overlap && spec.Speakers > 1 {
			at -= int((0.8 + 0.7*rng.Float64()) * Rate) // the next starts before this one ends
			at = max(at, int(utts[len(utts)-1].Start*Rate)+Rate/2)
		} else {
			at += int(0.8 * rng.Float64() * Rate)
		}
	}
	out = append(out, make([]float32, Rate/2)...)
	// A faint noise floor, as a room has.
	for i := range out {
		out[i] += float32(0.002 * rng.NormFloat64())
	}
	slices.SortFunc(utts, func(a, b Utterance) int { return cmpFloat(a.Start, b.Start) })
	return Conversation{Samples: out, Voices: voices, Utterances: utts}, nil
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// trim cuts the synthesiser's silence before and after the speech.
func trim(x []float32) []float32 {
	first, last := -1, -1
	for i, v := range x {
		if math.Abs(float64(v)) > 0.01 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first < 0 {
		return nil
	}
	return x[first : last+1]
}

// Sentence draws a sentence of everyday clinical speech.
func Sentence(rng *rand.Rand) string {
	subjects := []string{"the patient", "the doctor", "my mother", "the nurse", "the child", "her husband", "the pharmacist", "my father"}
	verbs := []string{"reports", "needs", "will take", "has had", "described", "asked about", "is worried about", "mentioned"}
	objects := []string{"mild chest pain", "a follow up appointment", "two tablets every morning", "a fever since tuesday",
		"trouble sleeping at night", "pain in the left knee", "a new prescription", "a bad cough", "the blood test results",
		"a headache in the evening", "swelling in both ankles", "the heart rate"}
	tails := []string{"", "since last week", "in the afternoon", "after lunch", "before the weekend", "every day", "this morning"}
	s := subjects[rng.IntN(len(subjects))] + " " + verbs[rng.IntN(len(verbs))] + " " + objects[rng.IntN(len(objects))]
	if t := tails[rng.IntN(len(tails))]; t != "" {
		s += " " + t
	}
	return s
}

// Flite is a Synth of ffmpeg's flite voices, each sentence synthesised
// once and kept in dir.
func Flite(dir string) Synth {
	return func(ctx context.Context, text, voice string) ([]float32, error) {
		if strings.ContainsAny(text, `'\:`) {
			return nil, errors.New("flite text must not hold quotes, backslashes or colons")
		}
		sum := sha256.Sum256([]byte(voice + "|" + text))
		path := filepath.Join(dir, hex.EncodeToString(sum[:8])+".f32")
		if b, err := os.ReadFile(path); err == nil {
			return fromBytes(b), nil
		}
		cmd := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
			fmt.Sprintf("flite=text='%s':voice=%s", text, voice), "-ar", fmt.Sprint(Rate), "-ac", "1", "-f", "f32le", "-")
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("flite (ffmpeg): %w", err)
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err == nil {
			_ = os.Rename(tmp, path)
		}
		return fromBytes(b), nil
	}
}

func fromBytes(b []byte) []float32 {
	x := make([]float32, len(b)/4)
	for i := range x {
		x[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return x
}

// WAV encodes channels of equal length (each mono at Rate) as one 16-bit
// PCM WAV file, channel 0 first.
func WAV(channels ...[]float32) []byte {
	n := 0
	for _, c := range channels {
		n = max(n, len(c))
	}
	nc := len(channels)
	data := make([]byte, 44+2*nc*n)
	copy(data, "RIFF")
	binary.LittleEndian.PutUint32(data[4:], uint32(36+2*nc*n))
	copy(data[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(data[16:], 16)
	binary.LittleEndian.PutUint16(data[20:], 1)
	binary.LittleEndian.PutUint16(data[22:], uint16(nc))
	binary.LittleEndian.PutUint32(data[24:], Rate)
	binary.LittleEndian.PutUint32(data[28:], uint32(Rate*2*nc))
	binary.LittleEndian.PutUint16(data[32:], uint16(2*nc))
	binary.LittleEndian.PutUint16(data[34:], 16)
	copy(data[36:], "data")
	binary.LittleEndian.PutUint32(data[40:], uint32(2*nc*n))
	for i := range n {
		for c, ch := range channels {
			var v float32
			if i < len(ch) {
				v = ch[i]
			}
			s := int16(max(-32768, min(32767, math.Round(float64(v)*32767))))
			binary.LittleEndian.PutUint16(data[44+2*(nc*i+c):], uint16(s))
		}
	}
	return data
}

// Channels splits the conversation into one track a speaker, as a call
// recorder keeps each party on its own channel (each with the room's
// faint noise).
func (c Conversation) Channels(ctx context.Context, synth Synth) ([][]float32, error) {
	out := make([][]float32, len(c.Voices))
	for i := range out {
		out[i] = make([]float32, len(c.Samples))
	}
	rng := rand.New(rand.NewPCG(uint64(len(c.Samples)), 7))
	for i := range out {
		for k := range out[i] {
			out[i][k] = float32(0.002 * rng.NormFloat64())
		}
	}
	for _, u := range c.Utterances {
		x, err := synth(ctx, u.Text, c.Voices[u.Speaker])
		if err != nil {
			return nil, err
		}
		x = trim(x)
		at := int(math.Round(u.Start * Rate))
		for k, v := range x {
			if at+k < len(c.Samples) {
				out[u.Speaker][at+k] += v * 0.8
			}
		}
	}
	return out, nil
}
