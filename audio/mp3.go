package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"

	"github.com/hajimehoshi/go-mp3"
)

// decodeMP3 decodes MPEG-1/2 Layer III (pure Go).
func decodeMP3(b []byte, buf []float32) (Clip, error) {
	s, err := openMP3(bytes.NewReader(b))
	if err != nil {
		return Clip{}, err
	}
	return readAll(s, buf)
}

// mp3Stream decodes MP3 (pure Go) as it is read. The decoder gives 16-bit
// stereo (mono is duplicated); the two are mixed down.
type mp3Stream struct {
	d       *mp3.Decoder
	pcm     []byte
	carry   int // bytes of an incomplete frame kept at the start of pcm
	samples int
	err     error
}

func openMP3(r io.Reader) (s Stream, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, corrupt("mp3", "decoder failed: %v", r)
		}
	}()
	d, err := mp3.NewDecoder(r)
	if err != nil {
		return nil, corrupt("mp3", "%v", err)
	}
	if err := checkRate("mp3", d.SampleRate()); err != nil {
		return nil, err
	}
	return &mp3Stream{d: d}, nil
}

func (s *mp3Stream) Rate() int { return s.d.SampleRate() }

func (s *mp3Stream) Close() error { return nil }

func (s *mp3Stream) Read(p []float32) (n int, err error) {
	const name = "mp3"
	if s.err != nil {
		return 0, s.err
	}
	defer func() {
		// A malformed stream can make the decoder index past its tables.
		if r := recover(); r != nil {
			s.err = corrupt(name, "decoder failed: %v", r)
			n, err = 0, s.err
		}
	}()
	p = p[:min(len(p), streamReadFrames)]
	if want := 4 * len(p); len(s.pcm) < want {
		s.pcm = append(s.pcm[:s.carry], make([]byte, want-s.carry)...)
	}
	for {
		m, rerr := s.d.Read(s.pcm[s.carry : 4*len(p)])
		m += s.carry
		whole := m - m%4
		k := whole / 4
		if s.samples+k > maxDecodedFrames {
			s.err = corrupt(name, "more than %d samples", maxDecodedFrames)
			return 0, s.err
		}
		pcm := s.pcm
		mixFrames(p[:k], 2, func(i, c int) float32 {
			return float32(int16(binary.LittleEndian.Uint16(pcm[4*i+2*c:]))) * (1.0 / 32768)
		})
		s.carry = copy(s.pcm, s.pcm[whole:m])
		s.samples += k
		switch {
		case rerr == nil:
		case errors.Is(rerr, io.EOF), s.samples > 0 && errors.Is(rerr, io.ErrUnexpectedEOF):
			// (Truncated: keep what decoded.)
			s.err = io.EOF
			if s.samples == 0 {
				s.err = corrupt(name, "no audio frames")
			}
		default:
			s.err = corrupt(name, "%v", rerr)
		}
		if k > 0 || s.err != nil {
			if k > 0 {
				return k, nil
			}
			return 0, s.err
		}
	}
}

var (
	mp3Bitrates = [2][16]int{ // kbit/s: MPEG-1, MPEG-2/2.5
		{0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 0},
		{0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160, 0},
	}
	mp3Rates = [3][3]int{{44100, 48000, 32000}, {22050, 24000, 16000}, {11025, 12000, 8000}} // MPEG-1, 2, 2.5
)

// probeMP3 estimates an MP3's length from its first frame: the frame
// count of a Xing/Info header where there is one (VBR), else the bit rate
// and the size.
func probeMP3(head []byte, size int64) (Info, error) {
	const name = "mp3"
	off := 0
	if len(head) >= 10 && string(head[:3]) == "ID3" {
		// ID3v2: a 10-byte header with a syncsafe size.
		tag := int(head[6]&0x7F)<<21 | int(head[7]&0x7F)<<14 | int(head[8]&0x7F)<<7 | int(head[9]&0x7F)
		off = 10 + tag
		if head[5]&0x10 != 0 {
			off += 10 // footer
		}
	}
	for ; off+4 <= len(head); off++ {
		if head[off] != 0xFF || head[off+1]&0xE0 != 0xE0 {
			continue
		}
		h := binary.BigEndian.Uint32(head[off:])
		version := h >> 19 & 3 // 3: MPEG-1, 2: MPEG-2, 0: MPEG-2.5
		layer := h >> 17 & 3   // 1: Layer III
		bi, ri := h>>12&0xF, h>>10&3
		if version == 1 || layer != 1 || bi == 0 || bi == 15 || ri == 3 {
			continue // not a Layer III frame header
		}
		v := map[uint32]int{3: 0, 2: 1, 0: 2}[version]
		rate := mp3Rates[v][ri]
		kbps := mp3Bitrates[min(v, 1)][bi]
		mono := h>>6&3 == 3
		perFrame := int64(1152)
		if v > 0 {
			perFrame = 576
		}
		// The Xing/Info header sits after the side information.
		side := map[[2]bool]int{{true, true}: 17, {true, false}: 32, {false, true}: 9, {false, false}: 17}[[2]bool{v == 0, mono}]
		x := off + 4 + side
		if x+12 <= len(head) && (string(head[x:x+4]) == "Xing" || string(head[x:x+4]) == "Info") && head[x+7]&1 != 0 {
			frames := int64(binary.BigEndian.Uint32(head[x+8:]))
			// A header can claim more frames than the file holds: no
			// more than its bytes make at the lowest bit rate of its
			// MPEG version (a 20-s file saying 5 hours is not refused as
			// too long; its decode counts what is there).
			lowest := int64(mp3Bitrates[min(v, 1)][1]) * 1000 / 8 // bytes a second
			most := (size - int64(off)) * int64(rate) / lowest
			return Info{Format: name, Rate: rate, Channels: 2, Frames: min(frames*perFrame, most)}, nil
		}
		seconds := float64(size-int64(off)) * 8 / float64(kbps*1000)
		return Info{Format: name, Rate: rate, Channels: 2, Frames: int64(seconds * float64(rate))}, nil
	}
	if int64(len(head)) < size {
		return Info{}, ErrHeaderBeyondPrefix
	}
	return Info{}, corrupt(name, "no MPEG audio frame header")
}
