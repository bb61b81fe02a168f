package audio

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
)

// wavHeader is what precedes a WAV file's samples.
type wavHeader struct {
	format  wavFormat
	dataOff int64 // where the samples start
	dataLen int64 // bytes of samples: the declared size, cut to the object
}

// errHeaderShort: the reader ended before the data chunk began.
var errHeaderShort = errors.New("wav header continues past the bytes given")

// maxFmtChunk bounds the bytes of a fmt chunk read (its fields take 40;
// the rest of an absurd declared size is skipped, not held).
const maxFmtChunk = 1 << 10

// readWAVHeader reads a RIFF/WAVE header from r, an object of size bytes,
// up to the first byte of its samples, skipping chunks other than fmt and
// data. It returns errHeaderShort when r ends before size bytes and before
// the data chunk (a prefix of the object was given), a *FormatError for a
// header Decode refuses, and r's own errors as they are.
func readWAVHeader(r io.Reader, size int64) (wavHeader, error) {
	const name = "wav"
	// failed maps a read that stopped early.
	failed := func(err error) error {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return errHeaderShort
		}
		return err
	}
	var riff [12]byte
	if size < int64(len(riff)) {
		return wavHeader{}, corrupt(name, "%d bytes is too short for a RIFF header", size)
	}
	if _, err := io.ReadFull(r, riff[:]); err != nil {
		return wavHeader{}, failed(err)
	}
	if string(riff[0:4]) != "RIFF" || string(riff[8:12]) != "WAVE" {
		return wavHeader{}, corrupt(name, "missing RIFF/WAVE signature")
	}
	unfinalised := riffUnfinalised(riff[:])
	var (
		f   *wavFormat
		off = int64(len(riff))
		ch  [8]byte
	)
	for {
		if off+int64(len(ch)) > size {
			if f == nil {
				return wavHeader{}, corrupt(name, "no fmt chunk")
			}
			return wavHeader{}, corrupt(name, "no data chunk")
		}
		if _, err := io.ReadFull(r, ch[:]); err != nil {
			return wavHeader{}, failed(err)
		}
		id := string(ch[0:4])
		csize := int64(binary.LittleEndian.Uint32(ch[4:]))
		off += int64(len(ch))
		if id == "data" {
			if f == nil {
				return wavHeader{}, corrupt(name, "data chunk before fmt chunk")
			}
			n := max(0, size-off)
			if !dataSizeUnknown(csize, unfinalised) {
				n = min(n, csize) // past the end: a stream never finalised
			}
			return wavHeader{format: *f, dataOff: off, dataLen: n}, nil
		}
		if off+csize > size {
			return wavHeader{}, corrupt(name, "chunk %q of %d bytes runs past the end of the file", id, csize)
		}
		skip := min(csize+csize%2, size-off) // chunks are word-aligned
		if id == "fmt " {
			body := make([]byte, min(csize, maxFmtChunk))
			if _, err := io.ReadFull(r, body); err != nil {
				return wavHeader{}, failed(err)
			}
			wf, err := parseWAVFormat(body)
			if err != nil {
				return wavHeader{}, err
			}
			f = &wf
			skip -= int64(len(body))
		}
		if _, err := io.CopyN(io.Discard, r, skip); err != nil {
			return wavHeader{}, failed(err)
		}
		off += csize + csize%2
	}
}

// decodeFrames decodes len(out) frames of data, in format f, to mono.
func decodeFrames(out []float32, data []byte, f wavFormat) {
	switch {
	case f.tag == wavPCM && f.bits == 16 && f.blockAlign == 2*f.channels:
		decodePCM16(out, data[:len(out)*f.blockAlign], f.channels)
		return
	case f.tag == wavFloat && f.bits == 32 && f.channels <= 2:
		// What audio editors often write.
		decodeFloat32(out, data[:len(out)*f.blockAlign], f.channels)
		return
	}
	read := sampleReader(f)
	width := f.bits / 8
	mixFrames(out, f.channels, func(i, c int) float32 { return read(data[i*f.blockAlign+c*width:]) })
}

// wavStream decodes a WAV file's samples as they are read, a block at a
// time. Stereo's cancelling channels (see mixFrames) are judged per block
// of about a second.
type wavStream struct {
	r    io.Reader
	f    wavFormat
	only int   // 0: channels mixed down; n: channel n-1 alone (OpenChannel)
	left int64 // bytes of samples not yet read
	buf  []byte
	err  error
}

func (s *wavStream) Rate() int { return s.f.rate }

func (s *wavStream) Read(p []float32) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	frames := min(int64(len(p)), streamReadFrames, s.left/int64(s.f.blockAlign))
	if frames == 0 {
		s.err = io.EOF
		return 0, s.err
	}
	want := int(frames) * s.f.blockAlign
	if cap(s.buf) < want {
		s.buf = make([]byte, want)
	}
	n, err := io.ReadFull(s.r, s.buf[:want])
	s.left -= int64(n)
	if err != nil {
		if !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
			s.err = err // the reader failed: not the recording's fault
			return 0, err
		}
		// Shorter than declared: up to the last whole frame, as decodeWAV.
		s.left = 0
	}
	frames = int64(n / s.f.blockAlign)
	if s.only > 0 {
		decodeChannel(p[:frames], s.buf, s.f, s.only-1)
	} else {
		decodeFrames(p[:frames], s.buf, s.f)
	}
	if frames == 0 {
		s.err = io.EOF
		return 0, s.err
	}
	return int(frames), nil
}

func (s *wavStream) Close() error { return nil }

// decodeFloat32 is decodeFrames for mono and stereo 32-bit float, without
// a call per sample.
func decodeFloat32(out []float32, data []byte, channels int) {
	at := func(i int) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(data[i:])) }
	if channels == 1 {
		for i := range out {
			out[i] = at(4 * i)
		}
		return
	}
	var eL, eR, eM float64
	for i := range out {
		j := 8 * i
		_ = data[j+7]
		l, r := at(j), at(j+4)
		m := (l + r) / 2
		out[i] = m
		eL += float64(l) * float64(l)
		eR += float64(r) * float64(r)
		eM += float64(m) * float64(m)
	}
	keepLouder(out, eL, eR, eM, func(i int) (float32, float32) { return at(8 * i), at(8*i + 4) })
}
