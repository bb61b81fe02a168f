package worker_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/contract"
)

// encodeSpeech makes a 3 s recording with ffmpeg (flite speech) in the
// format its arguments select.
func encodeSpeech(t *testing.T, ext string, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed (make deps installs it)")
	}
	out := filepath.Join(t.TempDir(), "speech."+ext)
	a := append([]string{"-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "flite=text='blood pressure one twenty over eighty':voice=kal"}, args...)
	if b, err := exec.CommandContext(t.Context(), "ffmpeg", append(a, out)...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Uploads in every common format become transcripts, whatever their key
// says: MP3 and FLAC decoded in Go, M4A, Ogg/Opus and WebM through ffmpeg.
// Without ffmpeg, those it reads get an unsupported_audio record that
// names the format; nothing is lost either way.
func TestUploadFormatsBecomeTranscripts(t *testing.T) {
	e := newEnv(t, 1, 3)
	files := map[string][]byte{
		"call.mp3":     encodeSpeech(t, "mp3", "-ar", "44100", "-ac", "2", "-c:a", "libmp3lame", "-b:a", "64k"),
		"call.flac":    encodeSpeech(t, "flac", "-ar", "48000", "-c:a", "flac"),
		"call.m4a":     encodeSpeech(t, "m4a", "-ar", "44100", "-c:a", "aac"),
		"call.ogg":     encodeSpeech(t, "ogg", "-c:a", "libopus", "-b:a", "24k"),
		"browser.webm": encodeSpeech(t, "webm", "-c:a", "libopus"),
		// An MP3 under a .wav name, and at 8 kHz (MPEG-2.5, as telephony
		// MP3s are, which the Go decoder does not read: ffmpeg does).
		"misnamed.wav":   encodeSpeech(t, "mp3", "-c:a", "libmp3lame"),
		"not-audio.mp3":  []byte("this is a text file, not audio at all"),
		"truncated.flac": encodeSpeech(t, "flac", "-c:a", "flac")[:60],
	}
	for k, b := range files {
		e.put(k, b)
		e.sendJob(k)
	}
	e.run(e.config(), nil)
	for _, k := range []string{"call.mp3", "call.flac", "call.m4a", "call.ogg", "browser.webm", "misnamed.wav"} {
		out := e.outputs(k)
		var tr contract.Transcript
		if err := json.Unmarshal(out["json"], &tr); err != nil {
			t.Errorf("%s: no transcript (%v); outputs %v", k, err, keysOf(out))
			continue
		}
		if tr.DurationSec < 1.5 || tr.DurationSec > 4 || !strings.HasPrefix(tr.Text, "samples ") {
			t.Errorf("%s: %.2f s, %q", k, tr.DurationSec, tr.Text)
		}
	}
	for k, class := range map[string]string{"not-audio.mp3": contract.ClassCorruptAudio, "truncated.flac": contract.ClassCorruptAudio} {
		if rec, ok := e.errorRecord(k); !ok || rec.Class != class {
			t.Errorf("%s: record %+v (found %v), want %s", k, rec, ok, class)
		}
	}
	if v, f := e.depth(e.queue.URL); v+f != 0 {
		t.Errorf("%d messages left", v+f)
	}

	// No ffmpeg: formats only it reads are refused by name; MP3 still works.
	e2 := newEnv(t, 1, 3)
	for _, k := range []string{"call.m4a", "call.mp3"} {
		e2.put(k, files[k])
		e2.sendJob(k)
	}
	cfg := e2.config()
	cfg.Inputs.FFmpeg = ""
	e2.run(cfg, nil)
	if rec, ok := e2.errorRecord("call.m4a"); !ok || rec.Class != contract.ClassUnsupported || !strings.Contains(rec.Message, "mp4") || !strings.Contains(rec.Message, "ffmpeg") {
		t.Errorf("m4a without ffmpeg: %+v (found %v), want unsupported_audio naming mp4 and ffmpeg", rec, ok)
	}
	if out := e2.outputs("call.mp3"); out["json"] == nil {
		t.Error("mp3 without ffmpeg: no transcript")
	}
}
