package worker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/conversation"
	"github.com/fleetscribe/fleetscribe/lab/kit/synth"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// halves is a diarizer that hears speaker 0 in the first half of every
// chunk and speaker 1 in the second (so with the fake recogniser's two
// words a chunk, "samples" is spk_0's and the count spk_1's), keeps the
// chunks it has heard in its state, and fails as fail says. As the
// contract says, a finish with audio (the recording's last chunk) is
// heard, then finished.
type halves struct {
	mu       sync.Mutex
	requests int
	finishes int
	chunks   []int // samples of each chunk heard, in order
	fail     func(finish bool) error
}

func (h *halves) Diarize(_ context.Context, r triton.DiarizeRequest) (triton.DiarizeResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.requests++
	if h.fail != nil {
		if err := h.fail(r.Finish); err != nil {
			return triton.DiarizeResult{}, err
		}
	}
	n := 0
	if len(r.State) > 0 {
		if err := json.Unmarshal(r.State, &n); err != nil {
			return triton.DiarizeResult{}, err
		}
	}
	var res triton.DiarizeResult
	if len(r.Samples) > 0 {
		h.chunks = append(h.chunks, len(r.Samples))
		d := float64(len(r.Samples)) / 16000
		res.Turns = []triton.DiarizeTurn{{Start: 0, End: d / 2, Speaker: 0}, {Start: d / 2, End: d, Speaker: 1}}
		n++
	}
	res.State, _ = json.Marshal(n)
	if r.Finish {
		h.finishes++
		// Provisional speakers 0 and 1 are final labels 1 and 0: the
		// worker must apply the labels, not the provisional indices.
		res.Labels = []int{1, 0}
	}
	return res, nil
}

// runWith runs the worker with d as its diarizer (nil: none) until idle.
func (e *env) runWith(cfg worker.Config, d worker.Diarizer) {
	e.t.Helper()
	deps := worker.Deps{Model: "asr", SQS: e.recorder, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard)}
	if d != nil {
		deps.Diarizer, deps.DiarizeModel = d, "diarize"
	}
	e.runDeps(cfg, deps)
}

func (e *env) sendSpeakersJob(key string, hints *contract.SpeakerHints, channels string, formats ...string) {
	e.t.Helper()
	b, err := contract.Job{Bucket: e.in, Key: key, Speakers: hints, Channels: channels, Formats: formats}.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	e.send(string(b))
}

// A job that asks for speakers gets a speaker on every word, by the
// diarizer's final labels, turns, a summary and schema v2; its recording's
// chunks reach the diarizer in order, each with the state the one before
// returned; TXT, SRT and VTT carry the speakers.
func TestSpeakersOnEveryWord(t *testing.T) {
	e := newEnv(t, 2, 3)
	e.put("consult.wav", speechWAV(42, 1)) // two chunks
	e.sendSpeakersJob("consult.wav", &contract.SpeakerHints{Max: 2}, "", "txt", "srt", "vtt")
	h := &halves{}
	e.runWith(e.config(), h)
	tr, ok := e.transcript("consult.wav")
	if !ok {
		t.Fatalf("no transcript: %v", keysOf(e.outputs("consult.wav")))
	}
	if tr.Schema != contract.TranscriptSchemaSpeakers || tr.SpeakerError != nil {
		t.Fatalf("schema %q, speaker error %+v", tr.Schema, tr.SpeakerError)
	}
	if len(h.chunks) != tr.Chunks || h.finishes != 1 || h.requests != tr.Chunks {
		t.Errorf("diarizer heard %d chunks in %d requests, %d finishes; the transcript has %d chunks (want a request a chunk, the last finishing)",
			len(h.chunks), h.requests, h.finishes, tr.Chunks)
	}
	for _, w := range tr.Words {
		want := "spk_1" // "samples", provisional 0, final label 1
		if w.Word != "samples" {
			want = "spk_0"
		}
		if w.Speaker != want {
			t.Fatalf("word %q at %.2f s: speaker %q, want %q", w.Word, w.Start, w.Speaker, want)
		}
	}
	if len(tr.Speakers) != 2 || tr.Speakers[0].Label != "spk_1" || tr.Speakers[0].Words+tr.Speakers[1].Words != len(tr.Words) {
		t.Errorf("speakers %+v", tr.Speakers)
	}
	if len(tr.SpeakerTurns) < 2*tr.Chunks-1 || tr.Diarization == nil || tr.Diarization.Mode != contract.ModeSpeakers || tr.Diarization.MaxSpeakers != 2 {
		t.Errorf("turns %d for %d chunks, diarization %+v", len(tr.SpeakerTurns), tr.Chunks, tr.Diarization)
	}
	for _, s := range tr.Segments {
		if s.Speaker == "" {
			t.Fatalf("segment without a speaker: %+v", s)
		}
	}
	out := e.outputs("consult.wav")
	if txt := string(out["txt"]); !strings.HasPrefix(txt, "spk_1: samples") || !strings.Contains(txt, "\nspk_0: ") {
		t.Errorf("txt:\n%s", txt)
	}
	if !strings.Contains(string(out["vtt"]), "<v spk_1>samples") || !strings.Contains(string(out["srt"]), "spk_0: ") {
		t.Errorf("vtt or srt without speakers:\n%s\n%s", out["vtt"], out["srt"])
	}
}

// Each chunk is one diarization request, the last bringing the final
// labels, whether the recording is streamed or decoded whole, in one chunk
// or several.
func TestOneDiarizationRequestAChunk(t *testing.T) {
	for name, tc := range map[string]struct {
		wav    []byte
		chunks float64 // -chunk-seconds
	}{
		"streamed, two chunks":    {speechWAV(42, 1), 30},
		"whole, three chunks":     {audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: noise(20*16000, 3)}), 8},
		"whole, one chunk":        {audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: noise(5*16000, 4)}), 30},
		"streamed mp3, one chunk": {toMP3(t, audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: noise(6*16000, 5)})), 30},
	} {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, 1, 3)
			e.put("r.wav", tc.wav)
			e.sendSpeakersJob("r.wav", &contract.SpeakerHints{Max: 2}, "")
			h := &halves{}
			cfg := e.config()
			cfg.Audio.ChunkSeconds = tc.chunks
			e.runWith(cfg, h)
			tr, ok := e.transcript("r.wav")
			if !ok || tr.SpeakerError != nil {
				t.Fatalf("transcript %v, speaker error %+v", ok, tr.SpeakerError)
			}
			if tr.Chunks < 1 || h.requests != tr.Chunks || len(h.chunks) != tr.Chunks || h.finishes != 1 {
				t.Errorf("%d chunks: %d requests, %d heard, %d finishing; want one request a chunk, the last finishing", tr.Chunks, h.requests, len(h.chunks), h.finishes)
			}
			if len(tr.Speakers) == 0 || tr.Speakers[0].Label != "spk_1" {
				t.Errorf("speakers %+v: the last chunk's labels not applied", tr.Speakers)
			}
		})
	}
}

// A job that does not ask for speakers costs nothing more: no request
// reaches the diarizer, and its transcript is v1 as before.
func TestNoSpeakersNoDiarization(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("a.wav", speechWAV(40, 2))
	e.sendJob("a.wav")
	h := &halves{}
	e.runWith(e.config(), h)
	tr, ok := e.transcript("a.wav")
	if !ok || tr.Schema != contract.TranscriptSchema || tr.Speakers != nil || tr.Diarization != nil || h.requests != 0 {
		t.Fatalf("transcript %v (schema %q, speakers %v); diarizer requests %d", ok, tr.Schema, tr.Speakers, h.requests)
	}
	for _, w := range tr.Words {
		if w.Speaker != "" {
			t.Fatalf("word with a speaker: %+v", w)
		}
	}
}

// An upload-triggered job (an S3 event: no options) takes its queue's
// default; a job's own "speakers": false turns the default off.
func TestQueueDefaultSpeakers(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("event.wav", speechWAV(10, 3))
	e.put("off.wav", speechWAV(10, 4))
	e.send(s3Event(e.in, "event.wav"))
	e.sendSpeakersJob("off.wav", &contract.SpeakerHints{Off: true}, "")
	cfg := e.config()
	cfg.Speaker = worker.SpeakerConfig{Speakers: []*contract.SpeakerHints{{}}}
	e.runWith(cfg, &halves{})
	if tr, ok := e.transcript("event.wav"); !ok || len(tr.Speakers) == 0 {
		t.Errorf("S3 event under a queue default of speakers: %v, %+v", ok, tr.Speakers)
	}
	if tr, ok := e.transcript("off.wav"); !ok || tr.Speakers != nil || tr.Schema != contract.TranscriptSchema {
		t.Errorf(`"speakers": false under the default: %v, %+v`, ok, tr.Speakers)
	}
}

// A diarization failure never loses the transcript: refused or poison, the
// transcript is written without speakers, saying why; a worker without a
// diarizer says so.
func TestDiarizationFailureKeepsTheTranscript(t *testing.T) {
	for _, tc := range []struct {
		name  string
		d     worker.Diarizer
		class string
	}{
		{"rejected", &halves{fail: func(bool) error { return fmt.Errorf("x: %w", triton.ErrRejected) }}, contract.ClassRejected},
		{"poison", &halves{fail: func(finish bool) error {
			if finish {
				return fmt.Errorf("x: %w", triton.ErrPoisonInput)
			}
			return nil
		}}, contract.ClassModelFailed},
		{"no diarizer", nil, contract.ClassDiarizationUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 1, 3)
			e.put("a.wav", speechWAV(40, 5))
			e.sendSpeakersJob("a.wav", &contract.SpeakerHints{}, "")
			e.runWith(e.config(), tc.d)
			tr, ok := e.transcript("a.wav")
			if !ok {
				t.Fatalf("no transcript: %v", keysOf(e.outputs("a.wav")))
			}
			if tr.SpeakerError == nil || tr.SpeakerError.Class != tc.class || tr.Schema != contract.TranscriptSchemaSpeakers || tr.Text == "" {
				t.Fatalf("speaker error %+v (want class %s), schema %q, text %q", tr.SpeakerError, tc.class, tr.Schema, tr.Text)
			}
			if got := counter(t, e.wreg, "fleetscribe_diarizations_total", "outcome", tc.class); got != 1 {
				t.Errorf("fleetscribe_diarizations_total{outcome=%q} = %v", tc.class, got)
			}
			e.recorder.check(t, 1)
		})
	}
}

// A retryable diarization failure retries the job, as a failed
// transcription does; on the last receive the transcript is written with
// speaker_error retries_exhausted instead of an error record.
func TestRetryableDiarizationFailure(t *testing.T) {
	e := newEnv(t, 1, 2)
	e.put("a.wav", speechWAV(20, 6))
	e.sendSpeakersJob("a.wav", &contract.SpeakerHints{}, "")
	h := &halves{fail: func(bool) error { return fmt.Errorf("partition down: %w", triton.ErrUnavailable) }}
	cfg := e.config()
	cfg.Queues.MaxReceives = 2
	cfg.Jobs.ExitWhenIdle = 4 * time.Second // longer than the 1 s backoff
	e.runWith(cfg, h)
	tr, ok := e.transcript("a.wav")
	if !ok || tr.SpeakerError == nil || tr.SpeakerError.Class != contract.ClassExhausted {
		t.Fatalf("transcript %v, speaker error %+v; outputs %v %s", ok, tr.SpeakerError, keysOf(e.outputs("a.wav")), e.outputs("a.wav")["error.json"])
	}
	for id, n := range e.recorder.received {
		if n != 2 {
			t.Errorf("message %s received %d times, want 2 (retried once, then the transcript)", id, n)
		}
	}
	if got := counter(t, e.wreg, "fleetscribe_diarizations_total", "outcome", "retry"); got != 1 {
		t.Errorf("diarizations retried: %v", got)
	}
}

// Hints the model cannot meet, or a job that asks for speakers and split
// channels, are refused before any work, with a record of their own.
func TestBadSpeakerJobsAreRefused(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.put("a.wav", speechWAV(5, 7))
	body, _ := json.Marshal(map[string]any{"v": 1, "bucket": e.in, "key": "a.wav", "speakers": map[string]int{"max": 6}})
	e.send(string(body))
	for _, bad := range []string{`{"max": 0}`, `{"min": 3, "max": 2}`, `{"max": 2.5}`, `true, "channels": "split"`} {
		e.send(fmt.Sprintf(`{"v":1,"bucket":%q,"key":"a.wav","speakers":%s}`, e.in, bad))
	}
	cfg := e.config()
	cfg.Speaker.MaxSpeakers = 4
	h := &halves{}
	e.runWith(cfg, h)
	recs := e.rejected()
	if len(recs) != 5 || h.requests != 0 {
		t.Fatalf("%d records for 5 bad jobs, diarizer requests %d", len(recs), h.requests)
	}
	for _, r := range recs {
		if r.Class != contract.ClassBadMessage || !strings.Contains(r.Message, "speaker") {
			t.Errorf("record %s: %s", r.Class, r.Message)
		}
	}
	if _, ok := e.transcript("a.wav"); ok {
		t.Error("a refused job was transcribed")
	}
}

// A stereo recording with channels split: each channel transcribed alone,
// each word on its channel's speaker.
func TestChannelsSplit(t *testing.T) {
	e := newEnv(t, 1, 3)
	// Left: 3 s of noise bursts, right: 5 s (the fake answers "samples N"
	// with N the channel's own samples at 16 kHz).
	left, right := noise(3*16000, 1), noise(5*16000, 2)
	e.put("call.wav", conversation.WAV(left, right))
	e.sendSpeakersJob("call.wav", nil, contract.ChannelsSplit, "vtt")
	h := &halves{}
	e.runWith(e.config(), h)
	tr, ok := e.transcript("call.wav")
	if !ok {
		t.Fatalf("no transcript: %v", keysOf(e.outputs("call.wav")))
	}
	if tr.Diarization == nil || tr.Diarization.Mode != contract.ModeChannels || len(tr.Speakers) != 2 || h.requests != 0 {
		t.Fatalf("diarization %+v, speakers %+v, diarizer requests %d", tr.Diarization, tr.Speakers, h.requests)
	}
	for _, s := range tr.Speakers {
		if s.Channel == nil || contract.ChannelLabel(*s.Channel) != s.Label {
			t.Errorf("speaker %+v", s)
		}
	}
	byLabel := map[string][]string{}
	for _, w := range tr.Words {
		byLabel[w.Speaker] = append(byLabel[w.Speaker], w.Word)
	}
	if len(byLabel["ch_0"]) == 0 || len(byLabel["ch_1"]) == 0 {
		t.Fatalf("words by speaker: %v", byLabel)
	}
	if !strings.Contains(string(e.outputs("call.wav")["vtt"]), "<v ch_1>") {
		t.Errorf("vtt without the channel's voice")
	}
}

// noise is n samples of speech-like bursts at 16 kHz.
func noise(n int, seed uint64) []float32 {
	return synth.SpeechLike(rand.New(rand.NewPCG(seed, 9)), n, 16000)
}
