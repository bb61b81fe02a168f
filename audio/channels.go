package audio

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Channels kept apart, for recordings with one party per channel (a call
// centre's stereo recording: the agent left, the caller right), where each
// channel is the cleanest signal of its speaker there is.

// ErrNoSuchChannel is wrapped by OpenChannel's error for a channel the
// recording does not have.
var ErrNoSuchChannel = errors.New("the recording has no such channel")

// OpenChannel is OpenStream of one channel alone (0 first), not mixed
// down: WAV in Go, every other format through ff (required: the Go MP3 and
// FLAC decoders only mix down). ChannelCount says how many channels the
// stream's recording has.
func OpenChannel(ctx context.Context, r io.Reader, size int64, ff *FFmpeg, channel int) (Stream, error) {
	if channel < 0 {
		return nil, fmt.Errorf("%w: channel %d", ErrNoSuchChannel, channel)
	}
	return openStream(ctx, r, size, ff, channel+1)
}

// ChannelCount returns the number of channels of the recording s decodes,
// as its header says (0: not known).
func ChannelCount(s Stream) int {
	switch v := s.(type) {
	case *wavStream:
		return v.f.channels
	case *ffStream:
		return v.wav.f.channels
	case *fileStream:
		return ChannelCount(v.Stream)
	case closer:
		return ChannelCount(v.Stream)
	}
	return 0
}

// checkChannel refuses a channel (only-1) past f's channels.
func checkChannel(f wavFormat, only int) error {
	if only > f.channels {
		return fmt.Errorf("%w: channel %d of %d", ErrNoSuchChannel, only-1, f.channels)
	}
	return nil
}

// decodeChannel decodes channel c of len(out) frames of data, in format f.
func decodeChannel(out []float32, data []byte, f wavFormat, c int) {
	read := sampleReader(f)
	width := f.bits / 8
	for i := range out {
		out[i] = read(data[i*f.blockAlign+c*width:])
	}
}
