package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// badInputs is a corpus of what uploads go wrong with: truncated files of
// every format, wrong headers, zero length, absurd rates, huge declared
// sizes, bytes that are not audio, and a valid container with no audio.
func badInputs(t *testing.T) map[string][]byte {
	t.Helper()
	corpus := map[string][]byte{
		"zero length":     {},
		"text":            []byte("Dear patient, your appointment is on Tuesday.\n"),
		"jpeg":            append([]byte{0xFF, 0xD8, 0xFF, 0xE0, 0, 0x10, 'J', 'F', 'I', 'F', 0}, bytes.Repeat([]byte{0x55}, 500)...),
		"pdf":             []byte("%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\n"),
		"zip":             append([]byte("PK\x03\x04"), bytes.Repeat([]byte{1}, 200)...),
		"riff not wave":   []byte("RIFF\x10\x00\x00\x00AVI LIST\x00\x00\x00\x00"),
		"wav rate 10 Hz":  wav(wavPCM, 1, 10, 16, make([]byte, 100), false),
		"wav rate 10 MHz": wav(wavPCM, 1, 10_000_000, 16, make([]byte, 100), false),
		"wav 0 channels":  wav(wavPCM, 0, 16000, 16, make([]byte, 100), false),
		"wav huge data": func() []byte {
			b := wav(wavPCM, 1, 16000, 16, make([]byte, 100), false)
			binary.LittleEndian.PutUint32(b[40:], 0xFFFFFFF0) // declares 4 GB, holds 100 bytes
			return b
		}(),
		"flac rate 0": func() []byte {
			b := []byte("fLaC\x00\x00\x00\x22")
			si := make([]byte, 34)
			binary.BigEndian.PutUint64(si[10:], 0<<44|1<<41|15<<36|100)
			return append(b, si...)
		}(),
		"flac huge sample count": func() []byte {
			b := []byte("fLaC\x80\x00\x00\x22")
			si := make([]byte, 34)
			binary.BigEndian.PutUint16(si[0:], 4096)
			binary.BigEndian.PutUint16(si[2:], 4096)
			binary.BigEndian.PutUint64(si[10:], 16000<<44|0<<41|15<<36|(1<<36-1))
			return append(append(b, si...), bytes.Repeat([]byte{0xFF, 0xF8}, 300)...)
		}(),
		"mp3 sync garbage": append([]byte{0xFF, 0xFB, 0x90, 0x64}, bytes.Repeat([]byte{0xFF, 0xFB}, 400)...),
		"id3 only":         append([]byte("ID3\x04\x00\x00\x00\x00\x01\x00"), make([]byte, 128)...),
		"ogg header only":  []byte("OggS\x00\x02\x00\x00\x00\x00\x00\x00\x00\x00"),
		"mp4 ftyp only":    []byte("\x00\x00\x00\x18ftypM4A \x00\x00\x00\x00M4A mp42isom"),
	}
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		return corpus
	}
	// Real files, cut short at several points.
	dir := t.TempDir()
	for _, f := range []struct {
		ext  string
		args []string
	}{
		{"wav", []string{"-c:a", "pcm_s16le"}}, {"flac", []string{"-c:a", "flac"}}, {"mp3", []string{"-c:a", "libmp3lame"}},
		{"ogg", []string{"-c:a", "libopus"}}, {"m4a", []string{"-c:a", "aac"}}, {"webm", []string{"-c:a", "libopus"}},
	} {
		out := filepath.Join(dir, "x."+f.ext)
		args := append([]string{"-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "sine=f=300:d=3"}, f.args...)
		if b, err := exec.CommandContext(t.Context(), "ffmpeg", append(args, out)...).CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg: %v %s", err, b)
		}
		b, _ := os.ReadFile(out)
		for _, frac := range []float64{0.01, 0.3, 0.9} {
			corpus[f.ext+" truncated at "+strconv.FormatFloat(frac, 'f', -1, 64)] = b[:int(float64(len(b))*frac)]
		}
		corrupt := append([]byte(nil), b...)
		for i := len(corrupt) / 3; i < len(corrupt); i += 97 {
			corrupt[i] ^= 0x5A
		}
		corpus[f.ext+" with bytes flipped"] = corrupt
	}
	video := filepath.Join(dir, "video.mp4")
	if b, err := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "color=c=black:s=64x64:d=1",
		"-c:v", "mpeg4", video).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, b)
	}
	corpus["mp4 with video only"], _ = os.ReadFile(video)
	return corpus
}

// Each bad input ends in a FormatError (a permanent, descriptive error:
// corrupt or unsupported, naming the format) or, for a truncated file, in
// the samples before the cut; none panics, hangs, allocates without bound
// or leaves an ffmpeg process behind.
func TestBadInputs(t *testing.T) {
	for name, b := range badInputs(t) {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			clip, err := DecodeContext(ctx, b, nil, PathFFmpeg())
			runtime.ReadMemStats(&after)
			if d := time.Since(start); d > 20*time.Second {
				t.Errorf("took %v", d)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Errorf("allocated %d MB for %d bytes of input", grew>>20, len(b))
			}
			var fe *FormatError
			switch {
			case err == nil && strings.Contains(name, "truncated") || err == nil && strings.Contains(name, "flipped"):
				if len(clip.Samples) > 3*48000 {
					t.Errorf("%d samples from a 3 s recording", len(clip.Samples))
				}
			case err == nil:
				t.Errorf("decoded %d samples at %d Hz, want an error", len(clip.Samples), clip.Rate)
			case !errors.As(err, &fe) || fe.Reason == "" || fe.Format == "":
				t.Errorf("not a descriptive FormatError: %v", err)
			}
			if _, err := Probe(b[:min(len(b), 1<<20)], int64(len(b))); err != nil {
				if !errors.As(err, &fe) && !errors.Is(err, ErrHeaderBeyondPrefix) {
					t.Errorf("Probe: %v", err)
				}
			}
		})
	}
	out, _ := exec.Command("pgrep", "-P", itoa(os.Getpid()), "ffmpeg").Output()
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("ffmpeg processes left: %s", out)
	}
}
