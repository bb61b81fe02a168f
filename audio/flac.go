package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"

	"github.com/mewkiz/flac"
)

// decodeFLAC decodes FLAC (pure Go), mixing channels down as WAV does.
func decodeFLAC(b []byte, buf []float32) (c Clip, err error) {
	const name = "flac"
	defer func() {
		// A malformed stream can make the decoder index past its tables.
		if r := recover(); r != nil {
			c, err = Clip{}, corrupt(name, "decoder failed: %v", r)
		}
	}()
	stream, err := flac.New(bytes.NewReader(b))
	if err != nil {
		return Clip{}, corrupt(name, "%v", err)
	}
	info := stream.Info
	if info.SampleRate == 0 || info.NChannels == 0 || info.BitsPerSample == 0 {
		return Clip{}, corrupt(name, "stream info without rate, channels or sample size")
	}
	if err := checkRate(name, int(info.SampleRate)); err != nil {
		return Clip{}, err
	}
	samples := buf[:0]
	// Room for what STREAMINFO declares, but not past what the bytes can
	// plausibly hold: the header is untrusted until the frames bear it out.
	if n := int(min(info.NSamples, uint64(4*len(b)+4096))); cap(samples) < n {
		samples = make([]float32, 0, n)
	}
	scale := 1 / float32(int64(1)<<(info.BitsPerSample-1))
	for {
		f, err := stream.ParseNext()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if len(samples) > 0 && errors.Is(err, io.ErrUnexpectedEOF) {
				break // truncated: keep what decoded
			}
			return Clip{}, corrupt(name, "frame: %v", err)
		}
		if len(f.Subframes) == 0 {
			continue
		}
		n := len(f.Subframes[0].Samples)
		if len(samples)+n > maxDecodedFrames {
			return Clip{}, corrupt(name, "more than %d samples", maxDecodedFrames)
		}
		if info.NSamples > 0 && uint64(len(samples)+n) > info.NSamples {
			// Never more than STREAMINFO declares: admission trusted it.
			n = int(info.NSamples) - len(samples)
		}
		for _, sf := range f.Subframes {
			if len(sf.Samples) < n {
				return Clip{}, corrupt(name, "subframes of different lengths")
			}
		}
		at := len(samples)
		samples = append(samples, make([]float32, n)...)
		sub := f.Subframes
		mixFrames(samples[at:], len(sub), func(i, c int) float32 { return float32(sub[c].Samples[i]) * scale })
	}
	return Clip{Rate: int(info.SampleRate), Samples: samples}, nil
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
