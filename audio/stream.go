package audio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// Stream is a recording decoded as it is read: mono samples at Rate, a
// block at a time, so that memory is bounded by the block and not by the
// recording.
type Stream interface {
	Rate() int
	// Read decodes the next samples into p; io.EOF after the last.
	Read(p []float32) (int, error)
	// Close stops decoding and frees what the stream holds (a temporary
	// file, an ffmpeg process).
	Close() error
}

// OpenStream starts decoding the recording read from r, an object of size
// bytes, recognised by its content. WAV is decoded as r is read. Other
// formats are first copied to a temporary file (an MP4 may keep its index
// at the end, and ffmpeg seeks to it), then decoded by ffmpeg (ff; nil or
// without a binary: MP3 and FLAC by the Go decoders, others refused as
// unsupported). Errors of r come back as they are (the recording is not
// at fault); the recording's own are *FormatError.
func OpenStream(ctx context.Context, r io.Reader, size int64, ff *FFmpeg) (Stream, error) {
	return openStream(ctx, r, size, ff, 0)
}

// openStream is OpenStream of every channel mixed down (only 0) or of
// channel only-1 alone (OpenChannel).
func openStream(ctx context.Context, r io.Reader, size int64, ff *FFmpeg, only int) (Stream, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	head, err := br.Peek(64)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		return nil, err
	}
	switch {
	case len(head) == 0:
		return nil, corrupt("unknown", "empty object")
	case isWAV(head):
		// The header read from the buffered start, nothing consumed yet:
		// compressed samples (ADPCM, GSM...) are ffmpeg's, from the first
		// byte. Only a header past the buffer is read from br itself.
		start, _ := br.Peek(br.Size())
		h, err := readWAVHeader(bytes.NewReader(start), size)
		switch {
		case forFFmpeg(err):
			return compressedWAVStream(ctx, br, size, ff, err, only)
		case errors.Is(err, errHeaderShort):
			h, err = readWAVHeader(br, size)
		case err == nil:
			_, err = br.Discard(int(h.dataOff))
		}
		if errors.Is(err, errHeaderShort) {
			return nil, corrupt("wav", "the object ends inside its header")
		}
		if err != nil {
			return nil, err
		}
		if err := checkChannel(h.format, only); err != nil {
			return nil, err
		}
		return &wavStream{r: br, f: h.format, left: h.dataLen, only: only}, nil
	}
	name := sniff(head)
	switch {
	case name == "":
		return nil, corrupt("unknown", "unrecognised audio container")
	case !ff.usable() && only > 0:
		return nil, unsupported(name, "splitting its channels needs ffmpeg, which is not installed")
	case !ff.usable() && !hasGoDecoder(name):
		return nil, unsupported(name, "decoding it needs ffmpeg, which is not installed")
	}
	path, err := spool(br, size)
	if err != nil {
		return nil, err
	}
	s, err := openFile(ctx, path, name, ff, only)
	if err != nil {
		_ = os.Remove(path)
		return nil, err
	}
	return s, nil
}

// compressedWAVStream streams a WAV whose samples the Go decoder cannot
// read (refused with err) through ffmpeg. Without ffmpeg, or where ffmpeg
// cannot start on it, err (which names the format tag) stands.
func compressedWAVStream(ctx context.Context, r io.Reader, size int64, ff *FFmpeg, err error, only int) (Stream, error) {
	if !ff.usable() {
		return nil, withoutFFmpeg(err)
	}
	path, serr := spool(r, size)
	if serr != nil {
		return nil, serr
	}
	s, oerr := openFile(ctx, path, "wav", ff, only)
	if oerr != nil {
		_ = os.Remove(path)
		var fe *FormatError
		if errors.As(oerr, &fe) {
			return nil, err // ffmpeg has no decoder for it either
		}
		return nil, oerr
	}
	return s, nil
}

// streamReadFrames bounds the frames one Read of a stream decodes, and so
// its buffers, however large the caller's.
const streamReadFrames = 1 << 15

func isWAV(b []byte) bool {
	return len(b) >= 12 && string(b[0:4]) == "RIFF" && string(b[8:12]) == "WAVE"
}

func hasGoDecoder(format string) bool { return format == "mp3" || format == "flac" }

func (f *FFmpeg) usable() bool { return f != nil && f.Bin != "" }

// spool copies the size bytes of r to a new temporary file.
func spool(r io.Reader, size int64) (string, error) {
	tmp, err := os.CreateTemp("", "fleetscribe-audio-*")
	if err != nil {
		return "", fmt.Errorf("temporary file: %w", err)
	}
	_, err = io.Copy(tmp, io.LimitReader(r, size))
	if cerr := tmp.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("temporary file: %w", cerr)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return "", err
	}
	return tmp.Name(), nil
}

// openFile decodes the file at path, which the stream removes when it is
// closed: through ffmpeg where there is one, and for MP3 and FLAC through
// the Go decoders where there is not, or where ffmpeg fails before its
// first sample.
func openFile(ctx context.Context, path, format string, ff *FFmpeg, only int) (Stream, error) {
	s := &fileStream{ctx: ctx, path: path, format: format, only: only}
	if ff.usable() {
		fs, err := ff.open(ctx, path, format)
		if err == nil && only > 0 {
			if err = checkChannel(fs.wav.f, only); err != nil {
				_ = fs.Close()
				return nil, err
			}
			fs.wav.only = only
		}
		if err == nil {
			s.Stream, s.viaFFmpeg = fs, true
			return s, nil
		}
		if !hasGoDecoder(format) || ctx.Err() != nil || only > 0 {
			return nil, err
		}
	}
	g, err := openGo(path, format)
	if err != nil {
		return nil, err
	}
	s.Stream = g
	return s, nil
}

// fileStream is a stream of a temporary file.
type fileStream struct {
	Stream
	ctx          context.Context
	path, format string
	viaFFmpeg    bool
	only         int // a channel alone: no Go decoder to fall back on
	samples      int64
}

func (s *fileStream) Read(p []float32) (int, error) {
	n, err := s.Stream.Read(p)
	if err != nil && s.samples == 0 && n == 0 && s.viaFFmpeg && hasGoDecoder(s.format) && s.only == 0 &&
		!errors.Is(err, io.EOF) && !errors.Is(err, ErrTooLong) && s.ctx.Err() == nil {
		// ffmpeg refused it before its first sample: the Go decoder's turn.
		_ = s.Stream.Close()
		s.viaFFmpeg = false
		g, gerr := openGo(s.path, s.format)
		if gerr != nil {
			s.Stream = failedStream{gerr}
			return 0, gerr
		}
		s.Stream = g
		return s.Read(p)
	}
	s.samples += int64(n)
	return n, err
}

func (s *fileStream) Close() error {
	err := s.Stream.Close()
	if rerr := os.Remove(s.path); err == nil && rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
		err = rerr
	}
	return err
}

// failedStream answers every Read with its error.
type failedStream struct{ err error }

func (f failedStream) Rate() int                   { return 0 }
func (f failedStream) Read([]float32) (int, error) { return 0, f.err }
func (f failedStream) Close() error                { return nil }

// openGo opens the Go decoder of format (MP3 or FLAC) on the file at path.
func openGo(path, format string) (Stream, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("temporary file: %w", err)
	}
	var s Stream
	if format == "mp3" {
		s, err = openMP3(f)
	} else {
		s, err = openFLAC(bufio.NewReaderSize(f, 64<<10))
	}
	if err != nil {
		_ = f.Close()
		return nil, err
	}
	return closer{s, f}, nil
}

// closer closes a stream and the file under it.
type closer struct {
	Stream
	f *os.File
}

func (c closer) Close() error {
	err := c.Stream.Close()
	if ferr := c.f.Close(); err == nil {
		err = ferr
	}
	return err
}

// readAll reads s to its end into buf (grown when too small) and closes it.
func readAll(s Stream, buf []float32) (Clip, error) {
	defer func() { _ = s.Close() }()
	out := buf[:0]
	for {
		if len(out) == cap(out) {
			out = append(out, make([]float32, max(16<<10, cap(out)))...)[:len(out)]
		}
		n, err := s.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		switch {
		case errors.Is(err, io.EOF):
			return Clip{Rate: s.Rate(), Samples: out}, nil
		case err != nil:
			return Clip{}, err
		}
	}
}
