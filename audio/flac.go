package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"

	"github.com/mewkiz/flac"
)

// decodeFLAC decodes FLAC (pure Go).
func decodeFLAC(b []byte, buf []float32) (Clip, error) {
	s, err := openFLAC(bytes.NewReader(b))
	if err != nil {
		return Clip{}, err
	}
	return readAll(s, buf)
}

// flacStream decodes FLAC (pure Go) a frame at a time, mixing channels
// down as WAV does.
type flacStream struct {
	s       *flac.Stream
	scale   float32
	pending []float32 // the decoded frame's samples not yet read
	frame   []float32
	samples int
	err     error
}

func openFLAC(r io.Reader) (s Stream, err error) {
	const name = "flac"
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, corrupt(name, "decoder failed: %v", r)
		}
	}()
	stream, err := flac.New(r)
	if err != nil {
		return nil, corrupt(name, "%v", err)
	}
	info := stream.Info
	if info.SampleRate == 0 || info.NChannels == 0 || info.BitsPerSample == 0 {
		return nil, corrupt(name, "stream info without rate, channels or sample size")
	}
	if err := checkRate(name, int(info.SampleRate)); err != nil {
		return nil, err
	}
	return &flacStream{s: stream, scale: 1 / float32(int64(1)<<(info.BitsPerSample-1))}, nil
}

func (s *flacStream) Rate() int { return int(s.s.Info.SampleRate) }

func (s *flacStream) Close() error { return nil }

func (s *flacStream) Read(p []float32) (n int, err error) {
	for len(s.pending) == 0 {
		if s.err != nil {
			return 0, s.err
		}
		s.err = s.next()
	}
	n = copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

// next decodes the next frame into pending; io.EOF at the end.
func (s *flacStream) next() (err error) {
	const name = "flac"
	defer func() {
		if r := recover(); r != nil {
			err = corrupt(name, "decoder failed: %v", r)
		}
	}()
	f, err := s.s.ParseNext()
	switch {
	case errors.Is(err, io.EOF), s.samples > 0 && errors.Is(err, io.ErrUnexpectedEOF):
		return io.EOF // (truncated: keep what decoded)
	case err != nil:
		return corrupt(name, "frame: %v", err)
	case len(f.Subframes) == 0:
		return nil
	}
	n := len(f.Subframes[0].Samples)
	if s.samples+n > maxDecodedFrames {
		return corrupt(name, "more than %d samples", maxDecodedFrames)
	}
	if total := s.s.Info.NSamples; total > 0 && uint64(s.samples+n) > total {
		// Never more than STREAMINFO declares: admission trusted it.
		n = int(total) - s.samples
	}
	for _, sf := range f.Subframes {
		if len(sf.Samples) < n {
			return corrupt(name, "subframes of different lengths")
		}
	}
	if cap(s.frame) < n {
		s.frame = make([]float32, n)
	}
	s.pending = s.frame[:n]
	sub, scale := f.Subframes, s.scale
	mixFrames(s.pending, len(sub), func(i, c int) float32 { return float32(sub[c].Samples[i]) * scale })
	s.samples += n
	return nil
}

// probeFLAC reads STREAMINFO, the first metadata block: rate, channels
// and the total sample count.
func probeFLAC(head []byte, size int64) (Info, error) {
	const name = "flac"
	// "fLaC", then a 4-byte block header (type 0, length 34), then the
	// 34-byte STREAMINFO.
	if len(head) < 8+34 {
		if int64(len(head)) >= size {
			return Info{}, corrupt(name, "%d bytes is too short for STREAMINFO", size)
		}
		return Info{}, ErrHeaderBeyondPrefix
	}
	if head[4]&0x7F != 0 || int(head[5])<<16|int(head[6])<<8|int(head[7]) < 34 {
		return Info{}, corrupt(name, "first metadata block is not STREAMINFO")
	}
	si := head[8:]
	v := binary.BigEndian.Uint64(si[10:18])
	rate := int(v >> 44)
	channels := int(v>>41&0x7) + 1
	total := int64(v & (1<<36 - 1))
	estimated := false
	if total == 0 {
		// Length unknown to the encoder: a frame per byte, a guess.
		total, estimated = size, true
	}
	if rate == 0 {
		return Info{}, corrupt(name, "sample rate 0")
	}
	if err := checkRate(name, rate); err != nil {
		return Info{}, err
	}
	return Info{Format: name, Rate: rate, Channels: channels, Frames: total, Estimated: estimated}, nil
}
