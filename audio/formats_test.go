package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// encode makes a recording with ffmpeg: flite speech, at rate and
// channels, in the format ffmpeg's arguments select, and the same speech
// as 16-bit WAV at that rate, mixed to mono, as the reference.
func encode(t *testing.T, rate, channels int, ext string, args ...string) (encoded, reference []byte) {
	t.Helper()
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg not installed (make deps installs it)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "src.wav")
	run := func(a ...string) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "ffmpeg", append([]string{"-nostdin", "-loglevel", "error", "-y"}, a...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg %v: %v\n%s", a, err, out)
		}
	}
	run("-f", "lavfi", "-i", "flite=text='the patient reports mild chest pain since tuesday morning':voice=slt",
		"-ar", itoa(rate), "-ac", itoa(channels), "-c:a", "pcm_s16le", src)
	out := filepath.Join(dir, "out."+ext)
	run(append(append([]string{"-i", src}, args...), out)...)
	ref := filepath.Join(dir, "ref.wav")
	run("-i", src, "-ac", "1", "-c:a", "pcm_s16le", ref)
	e, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := os.ReadFile(ref)
	if err != nil {
		t.Fatal(err)
	}
	return e, r
}

func itoa(n int) string { return strconv.Itoa(n) }

func rms(x []float32) float64 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return math.Sqrt(s / float64(max(len(x), 1)))
}

// Every common upload format decodes to the same speech: FLAC exactly,
// lossy formats to the same length and level; each is recognised by its
// content, and Probe gives its length before download.
func TestFormatsDecodeToTheSameSpeech(t *testing.T) {
	cases := []struct {
		name, ext      string
		rate, channels int
		args           []string
		exact          bool
		probeTolerance float64 // seconds; <0: an estimate (ffmpeg formats)
	}{
		{"flac 44.1 kHz stereo", "flac", 44100, 2, []string{"-c:a", "flac"}, true, 0.001},
		{"flac 16 kHz mono", "flac", 16000, 1, []string{"-c:a", "flac"}, true, 0.001},
		{"mp3 44.1 kHz stereo CBR", "mp3", 44100, 2, []string{"-c:a", "libmp3lame", "-b:a", "128k"}, false, 0.15},
		{"mp3 16 kHz mono VBR", "mp3", 16000, 1, []string{"-c:a", "libmp3lame", "-q:a", "4"}, false, 0.15},
		{"m4a (aac)", "m4a", 44100, 2, []string{"-c:a", "aac", "-b:a", "96k"}, false, -1},
		{"ogg (opus)", "ogg", 48000, 1, []string{"-c:a", "libopus", "-b:a", "24k"}, false, -1},
		{"webm (opus)", "webm", 48000, 2, []string{"-c:a", "libopus", "-b:a", "32k"}, false, -1},
		{"ogg (vorbis)", "oga", 22050, 1, []string{"-c:a", "libvorbis", "-f", "ogg"}, false, -1},
		{"wav (IMA ADPCM)", "wav", 16000, 1, []string{"-c:a", "adpcm_ima_wav"}, false, -1},
		{"wav (MS ADPCM) 44.1 kHz stereo", "wav", 44100, 2, []string{"-c:a", "adpcm_ms"}, false, -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			enc, ref := encode(t, c.rate, c.channels, c.ext, c.args...)
			want, err := Decode(ref)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Decode(enc)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			wantSecs := float64(len(want.Samples)) / float64(want.Rate)
			gotSecs := float64(len(got.Samples)) / float64(got.Rate)
			if math.Abs(gotSecs-wantSecs) > 0.12 {
				t.Errorf("decoded %.3f s, the source is %.3f s", gotSecs, wantSecs)
			}
			if r, w := rms(got.Samples), rms(want.Samples); math.Abs(r/w-1) > 0.25 {
				t.Errorf("level %.4f, the source's %.4f", r, w)
			}
			info, err := Probe(enc[:min(len(enc), 1<<20)], int64(len(enc)))
			if err != nil {
				t.Fatalf("probe: %v", err)
			}
			if c.probeTolerance >= 0 {
				if info.Estimated || math.Abs(info.Duration()-wantSecs) > c.probeTolerance {
					t.Errorf("probe says %.3f s (estimated %v), the source is %.3f s", info.Duration(), info.Estimated, wantSecs)
				}
			} else if !info.Estimated || info.Duration() < wantSecs/4 {
				t.Errorf("probe of a format ffmpeg reads: %+v (%.1f s), want a marked estimate not far below %.1f s", info, info.Duration(), wantSecs)
			}
			// Without ffmpeg, the pure Go decoders (FLAC and MP3): FLAC gives
			// back exactly the samples encoded.
			if c.ext != "flac" && c.ext != "mp3" {
				return
			}
			gogot, err := DecodeContext(t.Context(), enc, nil, nil)
			if err != nil {
				t.Fatalf("Go decoder: %v", err)
			}
			if secs := float64(len(gogot.Samples)) / float64(gogot.Rate); math.Abs(secs-wantSecs) > 0.12 {
				t.Errorf("Go decoder: %.3f s, the source is %.3f s", secs, wantSecs)
			}
			if c.exact {
				if gogot.Rate != want.Rate || len(gogot.Samples) != len(want.Samples) {
					t.Fatalf("Go decoder: rate %d, %d samples; want %d, %d", gogot.Rate, len(gogot.Samples), want.Rate, len(want.Samples))
				}
				for i := range gogot.Samples {
					// Mixing down in float can differ from ffmpeg's integer
					// mix by a rounding step.
					if math.Abs(float64(gogot.Samples[i]-want.Samples[i])) > 2.0/32768 {
						t.Fatalf("Go decoder, sample %d: %v, want %v", i, gogot.Samples[i], want.Samples[i])
					}
				}
			}
		})
	}
}

// ffmpeg is bounded: past MaxSeconds it is stopped and the recording
// refused with ErrTooLong, past Timeout it is killed, and on every path
// the process is reaped; a file with no audio stream is corrupt, by name.
func TestFFmpegBoundsAndErrors(t *testing.T) {
	enc, _ := encode(t, 16000, 1, "ogg", "-c:a", "libopus")
	ff := &FFmpeg{Bin: pathBin(), Timeout: time.Minute, MaxSeconds: 1}
	if _, err := ff.Decode(t.Context(), enc, "ogg"); !errors.Is(err, ErrTooLong) {
		t.Errorf("past MaxSeconds: %v", err)
	}
	ff = &FFmpeg{Bin: pathBin(), Timeout: time.Nanosecond, MaxSeconds: 3600}
	if _, err := ff.Decode(t.Context(), enc, "ogg"); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past Timeout: %v", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := PathFFmpeg().Decode(ctx, enc, "ogg"); err == nil {
		t.Error("cancelled: want an error")
	}
	// A video-only WebM: a valid container with no audio stream.
	dir := t.TempDir()
	video := filepath.Join(dir, "video.webm")
	if out, err := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "color=c=black:s=64x64:d=1",
		"-c:v", "libvpx-vp9", video).CombinedOutput(); err != nil {
		t.Skipf("no VP9 encoder: %v %s", err, out)
	}
	b, _ := os.ReadFile(video)
	_, err := Decode(b)
	var fe *FormatError
	if !errors.As(err, &fe) || !errors.Is(err, ErrCorrupt) || fe.Format != "webm" {
		t.Errorf("no audio stream: %v", err)
	}
	// Nothing is left running (Decode waits for ffmpeg on every path): no
	// ffmpeg child of this process.
	out, _ := exec.Command("pgrep", "-P", itoa(os.Getpid()), "ffmpeg").Output()
	if len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("ffmpeg processes left: %s", out)
	}
}

// Formats ffmpeg decodes come out at their own rate, as 16-bit samples,
// and are resampled here: flat to 7 kHz and clean above 8 kHz at 16 kHz.
func TestFFmpegResamplingQuality(t *testing.T) {
	if pathBin() == "" {
		t.Skip("ffmpeg not installed (make deps installs it)")
	}
	tone := func(f float64) Clip {
		t.Helper()
		out := filepath.Join(t.TempDir(), "tone.flac")
		if b, err := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi",
			"-i", "sine=frequency="+strconv.FormatFloat(f, 'f', 0, 64)+":sample_rate=44100:duration=1", "-c:a", "flac", out).CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg: %v %s", err, b)
		}
		b, _ := os.ReadFile(out)
		c, err := Decode(b)
		if err != nil || c.Rate != 44100 {
			t.Fatalf("decode: rate %d, %v", c.Rate, err)
		}
		c.Samples = Resample(c.Samples, c.Rate, 16000)
		c.Samples = c.Samples[len(c.Samples)/4 : 3*len(c.Samples)/4]
		return c
	}
	ref := amplitudeAt(tone(1000).Samples, 16000, 1000)
	if g := 20 * math.Log10(amplitudeAt(tone(7000).Samples, 16000, 7000)/ref); math.Abs(g) > 0.5 {
		t.Errorf("7 kHz at %.2f dB against 1 kHz", g)
	}
	if a := 20 * math.Log10(amplitudeAt(tone(9000).Samples, 16000, 7000)/ref); a > -60 {
		t.Errorf("9 kHz aliases to 7 kHz at %.1f dB", a)
	}
}

// A WAV of compressed samples (ADPCM here) without ffmpeg: refused as
// unsupported, naming its format tag and the missing ffmpeg, whole or
// streamed.
func TestCompressedWAVWithoutFFmpeg(t *testing.T) {
	enc, _ := encode(t, 16000, 1, "wav", "-c:a", "adpcm_ima_wav")
	_, err := DecodeContext(t.Context(), enc, nil, nil)
	_, serr := OpenStream(t.Context(), bytes.NewReader(enc), int64(len(enc)), nil)
	for _, err := range []error{err, serr} {
		var fe *FormatError
		if !errors.Is(err, ErrUnsupported) || !errors.As(err, &fe) ||
			!strings.Contains(fe.Reason, "0x0011") || !strings.Contains(fe.Reason, "ffmpeg") {
			t.Errorf("got %v, want unsupported audio naming tag 0x0011 and ffmpeg", err)
		}
	}
}

// pathBin is PATH's ffmpeg, or "" where there is none.
func pathBin() string {
	if f := PathFFmpeg(); f != nil {
		return f.Bin
	}
	return ""
}

// PathFFmpeg looks ffmpeg up when called, not when the package loads: a
// process whose PATH has none gets nil (formats without a Go decoder are
// then refused as unsupported), never a stale binary or an empty one.
func TestPathFFmpegIsLookedUpWhenCalled(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	if f := PathFFmpeg(); f != nil {
		t.Fatalf("PATH without ffmpeg: %+v, want nil", f)
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "ffmpeg")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if f := PathFFmpeg(); f == nil || f.Bin != fake {
		t.Fatalf("PATH with ffmpeg in %s: %+v", dir, f)
	}
}

// An MP3 whose Xing header claims far more frames than its bytes can hold
// (20 s saying 5 hours) is probed no longer than its size allows at the
// lowest bit rate, so it is not refused as too long; a true header is
// believed.
func TestMP3XingCountBoundedBySize(t *testing.T) {
	enc, _ := encode(t, 16000, 1, "mp3", "-c:a", "libmp3lame", "-q:a", "4")
	i := bytes.Index(enc, []byte("Xing"))
	if i < 0 {
		i = bytes.Index(enc, []byte("Info"))
	}
	if i < 0 {
		t.Fatal("no Xing/Info header in a VBR MP3")
	}
	honest, err := Probe(enc, int64(len(enc)))
	if err != nil {
		t.Fatal(err)
	}
	forged := bytes.Clone(enc)
	binary.BigEndian.PutUint32(forged[i+8:], uint32(5*3600*16000/576))
	lying, err := Probe(forged, int64(len(forged)))
	if err != nil {
		t.Fatal(err)
	}
	// 16 kHz is MPEG-2: its lowest bit rate is 8 kbit/s.
	bound := float64(len(enc)) * 8 / 8000
	if lying.Duration() > bound+0.01 || lying.Duration() < honest.Duration() {
		t.Errorf("a header claiming 5 h: probed %.0f s, want at most %.0f s (the file at 8 kbit/s) and at least the true %.1f s", lying.Duration(), bound, honest.Duration())
	}
	if honest.Duration() < 1 || honest.Duration() > bound {
		t.Errorf("a true header: %.1f s", honest.Duration())
	}
}
