package audio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// FFmpeg decodes the formats with no pure Go decoder here (Ogg/Opus,
// MP4/M4A/AAC, WebM/Matroska, AMR, CAF, WMA, AIFF...), and MP3 and FLAC
// faster than the Go decoders, through an ffmpeg subprocess that writes
// 16-bit samples at the recording's own rate and channels: mixed down and
// resampled here, as every other format is.
type FFmpeg struct {
	// Bin is the ffmpeg binary ("" or not found: such formats are refused
	// as unsupported, naming the format and the missing ffmpeg).
	Bin string
	// Timeout bounds how long ffmpeg may go without output (a stall, while
	// it is being read; a reader that is slow to take the output does not
	// count); the process is killed past it.
	Timeout time.Duration
	// MaxSeconds bounds the decoded length; past it ffmpeg is stopped and
	// the recording refused (a decompression bomb, or a recording past the
	// caller's limit).
	MaxSeconds float64
}

// PathFFmpeg is ffmpeg from PATH, looked up when called, with generous
// limits (10 minutes, 24 hours of audio); nil where PATH has none, which
// the decoders take as "formats without a Go decoder are unsupported". The
// worker names its own (-ffmpeg, with the job's limits) and says when it
// has none.
func PathFFmpeg() *FFmpeg {
	p, err := exec.LookPath("ffmpeg")
	if err != nil {
		return nil
	}
	return &FFmpeg{Bin: p, Timeout: 10 * time.Minute, MaxSeconds: 24 * 3600}
}

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
	if !f.usable() {
		return Clip{}, unsupported(format, "decoding it needs ffmpeg, which is not installed")
	}
	path, err := spool(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return Clip{}, err
	}
	defer func() { _ = os.Remove(path) }()
	s, err := f.open(ctx, path, format)
	if err != nil {
		return Clip{}, err
	}
	return readAll(s, buf)
}

// open starts ffmpeg decoding the file at path (format is the sniffed
// container, for error messages) and reads the header of its output.
func (f *FFmpeg) open(ctx context.Context, path, format string) (*ffStream, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	// Out as 16-bit WAV with the channels and rate as they are: mixed down
	// and resampled here, as WAV, FLAC and MP3 are. ffmpeg's own rematrix
	// moves mono and stereo by 3 dB and would hide channels that cancel;
	// resampling after the mix-down is one channel's work, not every
	// channel's (measured on stereo MP3 and FLAC: less CPU in all, ffmpeg
	// and this process together, than ffmpeg resampling both channels),
	// with the same filter for every format. 16 bits,
	// not float: half the bytes through the pipe, and 96 dB of range,
	// past what speech recognition can use. The WAV header says how many
	// channels and what rate: no ffprobe first. Written in full buffers,
	// not a write a packet (ffmpeg's default for a pipe): a tenth of the
	// wake-ups.
	args := []string{"-nostdin", "-hide_banner", "-loglevel", "error", "-threads", "1", "-filter_threads", "1",
		"-i", path, "-vn", "-sn", "-dn", "-c:a", "pcm_s16le", "-flush_packets", "0", "-f", "wav", "pipe:1"}
	cmd := exec.CommandContext(ctx, f.Bin, args...)
	// Its own process group, killed whole on timeout or cancel, and never
	// left behind: Wait reaps it on every path.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	s := &ffStream{cmd: cmd, ctx: ctx, cancel: cancel, format: format, path: path,
		maxSeconds: f.MaxSeconds}
	s.stderr.limit = 4 << 10
	cmd.Stderr = &s.stderr
	out, err := cmd.StdoutPipe()
	if err == nil {
		err = cmd.Start()
	}
	if err != nil {
		cancel(nil)
		return nil, fmt.Errorf("start ffmpeg: %w", err)
	}
	growPipe(out)
	r := &stallReader{r: bufio.NewReaderSize(out, 64<<10), timeout: f.Timeout, cancel: cancel}
	// (A stream of unknown length: read to its end.)
	h, err := readWAVHeader(r, math.MaxInt64)
	if err != nil {
		if errors.Is(err, errHeaderShort) {
			err = nil // ffmpeg gave up before its output began: its exit says why
		} else {
			err = fmt.Errorf("read ffmpeg output: %w", err)
		}
		return nil, s.finish(err)
	}
	s.wav = &wavStream{r: r, f: h.format, left: h.dataLen}
	s.max = int64(math.Min(f.MaxSeconds*float64(h.format.rate), maxDecodedFrames))
	return s, nil
}

// growPipe asks for a 1 MiB pipe (Linux; elsewhere, or refused, it stays
// as it is): ffmpeg runs ahead of a reader busy with other work instead of
// waking it every 64 KiB.
func growPipe(r io.Reader) {
	f, ok := r.(*os.File)
	if !ok {
		return
	}
	if rc, err := f.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20) })
	}
}

// stallReader reads r, cancelling with a stall past timeout waiting for
// a read (0: no limit). Only time waiting for ffmpeg counts: a consumer
// that reads slowly holds ffmpeg back, which is not a stall.
type stallReader struct {
	r       io.Reader
	timeout time.Duration
	cancel  context.CancelCauseFunc
}

func (s *stallReader) Read(p []byte) (int, error) {
	if s.timeout <= 0 {
		return s.r.Read(p)
	}
	t := time.AfterFunc(s.timeout, func() {
		s.cancel(fmt.Errorf("no output for %v: %w", s.timeout, context.DeadlineExceeded))
	})
	defer t.Stop()
	return s.r.Read(p)
}

// ffStream reads ffmpeg's output as it comes.
type ffStream struct {
	cmd          *exec.Cmd
	ctx          context.Context
	cancel       context.CancelCauseFunc
	wav          *wavStream
	stderr       limitedBuffer
	format, path string
	maxSeconds   float64
	max, samples int64
	done         bool
	err          error
}

func (s *ffStream) Rate() int { return s.wav.f.rate }

func (s *ffStream) Read(p []float32) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	n, err := s.wav.Read(p)
	s.samples += int64(n)
	switch {
	case s.samples > s.max:
		return 0, s.finish(fmt.Errorf("%w: the %s recording decodes to more than %.0f s", ErrTooLong, s.format, s.maxSeconds))
	case errors.Is(err, io.EOF):
		return 0, s.finish(nil)
	case err != nil:
		return 0, s.finish(fmt.Errorf("read ffmpeg output: %w", err))
	}
	return n, nil
}

// finish stops ffmpeg (failed: it has not reached the end) and reaps it,
// and returns the stream's last error: failed, or what ffmpeg's exit says,
// or io.EOF.
func (s *ffStream) finish(failed error) error {
	if s.done {
		return s.err
	}
	s.done = true
	if failed != nil {
		_ = s.cmd.Cancel()
	}
	waitErr := s.cmd.Wait()
	var ctxErr error
	if s.ctx.Err() != nil {
		ctxErr = context.Cause(s.ctx)
	}
	s.cancel(nil)
	switch {
	case failed != nil:
		s.err = failed
	case ctxErr != nil:
		s.err = fmt.Errorf("ffmpeg %s decode: %w", s.format, ctxErr)
	case waitErr != nil:
		msg := strings.TrimSpace(s.stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:] // the last line says what failed
		}
		msg = strings.ReplaceAll(msg, s.path, "input")
		s.err = corrupt(s.format, "ffmpeg: %s", firstNonEmpty(msg, waitErr.Error()))
	case s.samples == 0:
		s.err = corrupt(s.format, "no audio stream, or no samples in it")
	default:
		s.err = io.EOF
	}
	return s.err
}

func (s *ffStream) Close() error {
	if !s.done {
		_ = s.finish(errors.New("closed"))
	}
	return nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
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
