package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FFmpeg decodes the formats with no pure Go decoder here (Ogg/Opus,
// MP4/M4A/AAC, WebM/Matroska, AMR, CAF, WMA, AIFF...), and MP3 and FLAC
// faster than the Go decoders, through an ffmpeg subprocess that writes
// 16 kHz float32 (resampled by SoX's resampler where ffmpeg has it), mixed
// down here.
type FFmpeg struct {
	// Bin is the ffmpeg binary ("" or not found: such formats are refused
	// as unsupported, naming the format and the missing ffmpeg).
	Bin string
	// Timeout bounds one decode; the process is killed past it.
	Timeout time.Duration
	// MaxSeconds bounds the decoded length; past it ffmpeg is stopped and
	// the recording refused (a decompression bomb, or a recording past the
	// caller's limit).
	MaxSeconds float64

	soxrOnce sync.Once
	soxr     bool
}

// DefaultFFmpeg uses ffmpeg from PATH, if there is one.
var DefaultFFmpeg = &FFmpeg{Bin: lookFFmpeg(), Timeout: 10 * time.Minute, MaxSeconds: 24 * 3600}

func lookFFmpeg() string {
	p, err := exec.LookPath("ffmpeg")
	if err != nil {
		return ""
	}
	return p
}

// ffmpegRate is the rate ffmpeg is asked to write: the model's, so no
// resampling follows.
const ffmpegRate = 16000

// ErrTooLong is wrapped by the error of a decode stopped at MaxSeconds.
var ErrTooLong = errors.New("recording longer than the limit")

// Decode runs ffmpeg on b (written to a temporary file: MP4 files with
// their index at the end need a seekable input) and returns its output.
// format is the sniffed container, for error messages.
func (f *FFmpeg) Decode(ctx context.Context, b []byte, format string) (Clip, error) {
	return f.decodeInto(ctx, b, nil, format)
}

// decodeInto is Decode writing the samples into buf when its capacity
// suffices.
func (f *FFmpeg) decodeInto(ctx context.Context, b []byte, buf []float32, format string) (Clip, error) {
	if f == nil || f.Bin == "" {
		return Clip{}, unsupported(format, "decoding it needs ffmpeg, which is not installed")
	}
	tmp, err := os.CreateTemp("", "fleetscribe-audio-*")
	if err != nil {
		return Clip{}, fmt.Errorf("ffmpeg input: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return Clip{}, fmt.Errorf("ffmpeg input: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return Clip{}, fmt.Errorf("ffmpeg input: %w", err)
	}
	if f.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.Timeout)
		defer cancel()
	}
	// Mono and stereo come out as they are and are mixed down here, as
	// WAV, FLAC and MP3 are (ffmpeg's own rematrix moves mono and stereo
	// by 3 dB); more channels get ffmpeg's standard down-mix to stereo
	// first, which keeps the centre channel, where speech is, at -3 dB.
	channels := f.channels(ctx, tmp.Name())
	if channels < 1 || channels > 2 {
		channels = 2
	}
	// 16 kHz out, through the SoX resampler where this ffmpeg has it
	// (flat to 7 kHz, aliases below what Resample leaves, and fast), else
	// ffmpeg's own.
	rate := ffmpegRate
	args := []string{"-nostdin", "-hide_banner", "-loglevel", "error",
		"-i", tmp.Name(), "-vn", "-sn", "-dn", "-ac", fmt.Sprint(channels)}
	if f.hasSoxr() {
		args = append(args, "-af", fmt.Sprintf("aresample=%d:resampler=soxr", rate))
	}
	args = append(args, "-ar", fmt.Sprint(rate), "-f", "f32le", "pipe:1")
	cmd := exec.CommandContext(ctx, f.Bin, args...)
	// Its own process group, killed whole on timeout or cancel, and never
	// left behind: Wait reaps it on every path.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stderr limitedBuffer
	stderr.limit = 4 << 10
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Clip{}, err
	}
	if err := cmd.Start(); err != nil {
		return Clip{}, fmt.Errorf("start ffmpeg: %w", err)
	}
	maxSamples := int(math.Min(f.MaxSeconds*float64(rate), float64(maxDecodedFrames)))
	samples, readErr := readF32(out, channels, maxSamples, buf[:0])
	if readErr != nil {
		_ = cmd.Cancel()
	}
	waitErr := cmd.Wait()
	switch {
	case errors.Is(readErr, ErrTooLong):
		return Clip{}, fmt.Errorf("%w: the %s recording decodes to more than %.0f s", ErrTooLong, format, f.MaxSeconds)
	case readErr != nil:
		return Clip{}, fmt.Errorf("read ffmpeg output: %w", readErr)
	case ctx.Err() != nil:
		return Clip{}, fmt.Errorf("ffmpeg %s decode: %w", format, ctx.Err())
	case waitErr != nil:
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:] // the last line says what failed
		}
		msg = strings.ReplaceAll(msg, tmp.Name(), "input")
		return Clip{}, corrupt(format, "ffmpeg: %s", firstNonEmpty(msg, waitErr.Error()))
	case len(samples) == 0:
		return Clip{}, corrupt(format, "no audio stream, or no samples in it")
	}
	return Clip{Rate: rate, Samples: samples}, nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// hasSoxr reports, once, whether ffmpeg's resampler can use libsoxr.
func (f *FFmpeg) hasSoxr() bool {
	f.soxrOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		err := exec.CommandContext(ctx, f.Bin, "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "sine=d=0.01",
			"-af", "aresample=16000:resampler=soxr", "-f", "null", "-").Run()
		f.soxr = err == nil
	})
	return f.soxr
}

// channels asks ffprobe how many channels the first audio stream has (0:
// unknown).
func (f *FFmpeg) channels(ctx context.Context, path string) int {
	probe := filepath.Join(filepath.Dir(f.Bin), "ffprobe")
	if _, err := os.Stat(probe); err != nil {
		if probe, err = exec.LookPath("ffprobe"); err != nil {
			return 0
		}
	}
	cmd := exec.CommandContext(ctx, probe, "-v", "error", "-select_streams", "a:0", "-show_entries", "stream=channels", "-of", "csv=p=0", path)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}

// readF32 appends to out little-endian float32 frames of channels (1 or
// 2) until EOF, at most max, each mixed down to the mean of its channels.
func readF32(r io.Reader, channels, max int, out []float32) ([]float32, error) {
	buf := make([]byte, 64<<10)
	carry := 0
	frame := 4 * channels
	for {
		n, err := r.Read(buf[carry:])
		n += carry
		whole := n - n%frame
		if len(out)+whole/frame > max {
			return nil, ErrTooLong
		}
		for i := 0; i < whole; i += frame {
			v := math.Float32frombits(binary.LittleEndian.Uint32(buf[i:]))
			if channels == 2 {
				v = (v + math.Float32frombits(binary.LittleEndian.Uint32(buf[i+4:]))) / 2
			}
			out = append(out, v)
		}
		carry = copy(buf, buf[whole:n])
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// limitedBuffer keeps the first limit bytes written to it.
type limitedBuffer struct {
	bytes.Buffer
	limit int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.limit - l.Len(); room > 0 {
		l.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
