package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// Errors wrapped by FormatError.
var (
	ErrCorrupt     = errors.New("corrupt audio")
	ErrUnsupported = errors.New("unsupported audio")
)

// FormatError describes why a recording cannot be decoded.
type FormatError struct {
	Kind   error // ErrCorrupt or ErrUnsupported
	Format string
	Reason string

	forFFmpeg bool // a WAV whose samples ffmpeg may read where Go cannot
}

func (e *FormatError) Error() string { return fmt.Sprintf("%v (%s): %s", e.Kind, e.Format, e.Reason) }

// Unwrap returns the error kind.
func (e *FormatError) Unwrap() error { return e.Kind }

func corrupt(format, f string, args ...any) error {
	return &FormatError{Kind: ErrCorrupt, Format: format, Reason: fmt.Sprintf(f, args...)}
}

func unsupported(format, f string, args ...any) error {
	return &FormatError{Kind: ErrUnsupported, Format: format, Reason: fmt.Sprintf(f, args...)}
}

// Clip is decoded mono audio.
type Clip struct {
	Rate    int       // samples per second
	Samples []float32 // mono, nominally in [-1, 1]
}

// Duration returns the clip length in seconds.
func (c Clip) Duration() float64 {
	if c.Rate == 0 {
		return 0
	}
	return float64(len(c.Samples)) / float64(c.Rate)
}

const (
	wavPCM        = 1
	wavFloat      = 3
	wavALaw       = 6 // G.711 A-law, 8 bits a sample
	wavMuLaw      = 7 // G.711 μ-law, 8 bits a sample
	wavExtensible = 0xFFFE
)

type wavFormat struct {
	tag        uint16
	channels   int
	rate       int
	blockAlign int
	bits       int
}

// DecodeWAV decodes a RIFF/WAVE file with integer PCM (8, 16, 24 or 32 bit),
// IEEE float (32 or 64 bit) or G.711 μ-law and A-law (telephony) samples,
// plain or WAVE_FORMAT_EXTENSIBLE,
// and mixes its channels down to mono. A data chunk whose declared size
// runs past the end of the file (a stream that was never finalised) is read
// up to the last whole frame.
func DecodeWAV(b []byte) (Clip, error) { return decodeWAV(b, nil) }

func decodeWAV(b []byte, buf []float32) (Clip, error) {
	h, err := readWAVHeader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return Clip{}, err // (never short: the reader holds all size bytes)
	}
	data := b[h.dataOff : h.dataOff+h.dataLen]
	frames := len(data) / h.format.blockAlign
	samples := buf[:0]
	if cap(samples) < frames {
		samples = make([]float32, frames)
	}
	samples = samples[:frames]
	decodeFrames(samples, data, h.format)
	return Clip{Rate: h.format.rate, Samples: samples}, nil
}

// decodePCM16 is the common case (16-bit PCM, what phones and browsers
// mostly write) without a call per sample: mono and stereo have loops of
// their own.
func decodePCM16(out []float32, data []byte, channels int) {
	const scale = 1.0 / 32768
	s16 := func(i int) float32 { return float32(int16(uint16(data[i]) | uint16(data[i+1])<<8)) }
	switch channels {
	case 1:
		pcm16Mono(out, data[:2*len(out)])
	case 2:
		eL, eR, eS := pcm16Stereo(out, data[:4*len(out)])
		keepLouder(out, float64(eL), float64(eR), float64(eS)/4, func(i int) (float32, float32) { return s16(4*i) * scale, s16(4*i+2) * scale })
	case 6:
		mixFrames(out, 6, func(i, c int) float32 { return s16(12*i+2*c) * scale })
	default:
		inv := scale / float32(channels)
		for i := range out {
			j := 2 * channels * i
			var sum float32
			for c := range channels {
				sum += s16(j + 2*c)
			}
			out[i] = sum * inv
		}
	}
}

// riffUnfinalised reports a RIFF size field left at 0 or 0xFFFFFFFF, as
// streaming or crashed recorders leave it.
func riffUnfinalised(b []byte) bool {
	s := binary.LittleEndian.Uint32(b[4:])
	return s == 0 || s == 0xFFFFFFFF
}

// dataSizeUnknown reports a data chunk whose size field was never filled
// in: 0xFFFFFFFF, or 0 in a file whose RIFF size is unfinalised too.
func dataSizeUnknown(size int64, unfinalised bool) bool {
	return size == 0xFFFFFFFF || size == 0 && unfinalised
}

// Info describes a recording from its header, before it is decoded.
type Info struct {
	Format   string
	Rate     int
	Channels int
	Frames   int64 // sample frames, from the data size (or the object size for an unfinalised stream)
	// Estimated: Frames is a guess from the object's size (a compressed
	// container ffmpeg reads, whose length is not in its first bytes), an
	// overestimate for most recordings; a duration limit applies after
	// decoding instead.
	Estimated bool
}

// Duration returns the recording's length in seconds.
func (i Info) Duration() float64 {
	if i.Rate == 0 {
		return 0
	}
	return float64(i.Frames) / float64(i.Rate)
}

// ErrHeaderBeyondPrefix means the header could not be read from the
// prefix given to Probe: more bytes are needed.
var ErrHeaderBeyondPrefix = errors.New("audio header lies beyond the bytes read")

// Probe reads a recording's format and length from its first bytes
// (head) and the object's total size, without decoding samples. Errors
// are *FormatError for recordings Decode would refuse, or
// ErrHeaderBeyondPrefix.
func Probe(head []byte, size int64) (Info, error) {
	if len(head) == 0 {
		return Info{}, corrupt("unknown", "empty object")
	}
	if !(len(head) >= 12 && string(head[0:4]) == "RIFF" && string(head[8:12]) == "WAVE") {
		switch name := sniff(head); name {
		case "flac":
			return probeFLAC(head, size)
		case "mp3":
			return probeMP3(head, size)
		case "":
			return Info{}, corrupt("unknown", "unrecognised audio container")
		default:
			return ffmpegEstimate(name, size), nil
		}
	}
	h, err := readWAVHeader(bytes.NewReader(head), size)
	switch {
	case errors.Is(err, errHeaderShort):
		return Info{}, ErrHeaderBeyondPrefix
	case forFFmpeg(err):
		return ffmpegEstimate("wav", size), nil // refused at decode where there is no ffmpeg
	case err != nil:
		return Info{}, err
	}
	return Info{Format: "wav", Rate: h.format.rate, Channels: h.format.channels, Frames: h.dataLen / int64(h.format.blockAlign)}, nil
}

// ffmpegEstimate is the Info of a recording ffmpeg will read, whose header
// is not read here: at 48 kHz (Opus always; AAC mostly 44.1 or 48), mixed
// to mono, as long as the object would be at 32 kbit/s (more than speech
// is usually encoded at). Its length is checked as it decodes.
func ffmpegEstimate(format string, size int64) Info {
	return Info{Format: format, Rate: 48000, Channels: 1, Frames: size * 8 / 32000 * 48000, Estimated: true}
}

// forFFmpeg reports an error of the WAV decoder for a WAV that ffmpeg may
// read (compressed samples).
func forFFmpeg(err error) bool {
	var fe *FormatError
	return errors.As(err, &fe) && fe.forFFmpeg
}

// withoutFFmpeg is err, a WAV refused for ffmpeg to read, where there is no
// ffmpeg.
func withoutFFmpeg(err error) error {
	var fe *FormatError
	if !errors.As(err, &fe) {
		return err
	}
	return &FormatError{Kind: fe.Kind, Format: fe.Format, Reason: fe.Reason + "; decoding it needs ffmpeg, which is not installed"}
}

func parseWAVFormat(b []byte) (wavFormat, error) {
	const name = "wav"
	if len(b) < 16 {
		return wavFormat{}, corrupt(name, "fmt chunk of %d bytes is too short", len(b))
	}
	f := wavFormat{
		tag:        binary.LittleEndian.Uint16(b[0:]),
		channels:   int(binary.LittleEndian.Uint16(b[2:])),
		rate:       int(binary.LittleEndian.Uint32(b[4:])),
		blockAlign: int(binary.LittleEndian.Uint16(b[12:])),
		bits:       int(binary.LittleEndian.Uint16(b[14:])),
	}
	if f.tag == wavExtensible {
		if len(b) < 26 {
			return wavFormat{}, corrupt(name, "extensible fmt chunk of %d bytes is too short", len(b))
		}
		f.tag = binary.LittleEndian.Uint16(b[24:]) // first two bytes of the sub-format GUID
	}
	switch {
	case f.channels < 1 || f.channels > 32:
		return wavFormat{}, corrupt(name, "%d channels", f.channels)
	case f.rate < 1000 || f.rate > 768000:
		return wavFormat{}, corrupt(name, "sample rate %d Hz", f.rate)
	case f.tag == wavPCM && f.bits != 8 && f.bits != 16 && f.bits != 24 && f.bits != 32:
		return wavFormat{}, unsupported(name, "%d-bit integer PCM", f.bits)
	case f.tag == wavFloat && f.bits != 32 && f.bits != 64:
		return wavFormat{}, unsupported(name, "%d-bit float", f.bits)
	case (f.tag == wavALaw || f.tag == wavMuLaw) && f.bits != 8:
		return wavFormat{}, corrupt(name, "G.711 with %d bits a sample (it has 8)", f.bits)
	case f.tag != wavPCM && f.tag != wavFloat && f.tag != wavALaw && f.tag != wavMuLaw:
		return wavFormat{}, &FormatError{Kind: ErrUnsupported, Format: name, forFFmpeg: true,
			Reason: fmt.Sprintf("format tag 0x%04x (compressed WAV: ADPCM, GSM and the like)", f.tag)}
	case f.blockAlign != f.channels*f.bits/8:
		return wavFormat{}, corrupt(name, "block align %d does not match %d channels of %d bits", f.blockAlign, f.channels, f.bits)
	}
	return f, nil
}

func sampleReader(f wavFormat) func([]byte) float32 {
	switch {
	case f.tag == wavMuLaw:
		return func(b []byte) float32 { return muLaw[b[0]] }
	case f.tag == wavALaw:
		return func(b []byte) float32 { return aLaw[b[0]] }
	case f.tag == wavFloat && f.bits == 32:
		return func(b []byte) float32 { return math.Float32frombits(binary.LittleEndian.Uint32(b)) }
	case f.tag == wavFloat:
		return func(b []byte) float32 { return float32(math.Float64frombits(binary.LittleEndian.Uint64(b))) }
	case f.bits == 8: // unsigned
		return func(b []byte) float32 { return (float32(b[0]) - 128) / 128 }
	case f.bits == 16:
		return func(b []byte) float32 { return float32(int16(binary.LittleEndian.Uint16(b))) / 32768 }
	case f.bits == 24:
		return func(b []byte) float32 {
			v := int32(uint32(b[0])<<8|uint32(b[1])<<16|uint32(b[2])<<24) >> 8
			return float32(v) / 8388608
		}
	default:
		return func(b []byte) float32 { return float32(int32(binary.LittleEndian.Uint32(b))) / 2147483648 }
	}
}

// G.711 (ITU-T) expands each 8-bit code to a 16-bit linear value; the
// tables hold those values scaled to [-1, 1).
var muLaw, aLaw = g711Tables()

func g711Tables() (mu, a [256]float32) {
	for i := range 256 {
		// μ-law: codes are stored inverted; 3 exponent and 4 mantissa bits
		// over a bias of 0x84.
		u := ^byte(i)
		t := (int(u&0x0F)<<3 + 0x84) << (u & 0x70 >> 4)
		if u&0x80 != 0 {
			mu[i] = float32(0x84-t) / 32768
		} else {
			mu[i] = float32(t-0x84) / 32768
		}
		// A-law: even bits are inverted (xor 0x55); the sign bit set means
		// positive.
		v := byte(i) ^ 0x55
		m := int(v&0x0F) << 4
		switch seg := int(v & 0x70 >> 4); seg {
		case 0:
			m += 8
		default:
			m = (m + 0x108) << (seg - 1)
		}
		if v&0x80 == 0 {
			m = -m
		}
		a[i] = float32(m) / 32768
	}
	return mu, a
}

// EncodeWAV writes 16-bit PCM mono WAV, for tests, tools and fixtures.
func EncodeWAV(c Clip) []byte {
	n := len(c.Samples) * 2
	b := make([]byte, 44, 44+n)
	copy(b[0:], "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+n))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], wavPCM)
	binary.LittleEndian.PutUint16(b[22:], 1)
	binary.LittleEndian.PutUint32(b[24:], uint32(c.Rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(c.Rate*2))
	binary.LittleEndian.PutUint16(b[32:], 2)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(n))
	for _, s := range c.Samples {
		v := int16(max(-32768, min(32767, math.Round(float64(s)*32767))))
		b = binary.LittleEndian.AppendUint16(b, uint16(v))
	}
	return b
}

// pcm16MonoGeneric is pcm16Mono without vector instructions.
func pcm16MonoGeneric(out []float32, data []byte) {
	const scale = 1.0 / 32768
	data = data[:2*len(out)]
	for i := range out {
		out[i] = float32(int16(binary.LittleEndian.Uint16(data[2*i:]))) * scale
	}
}

// pcm16StereoGeneric is pcm16Stereo without vector instructions. The
// energies are integers, exact (no float dependency chain per frame).
func pcm16StereoGeneric(out []float32, data []byte) (eL, eR, eS int64) {
	const scale = 1.0 / 65536
	data = data[:4*len(out)]
	for i := range out {
		l, r := int64(int16(binary.LittleEndian.Uint16(data[4*i:]))), int64(int16(binary.LittleEndian.Uint16(data[4*i+2:])))
		out[i] = float32(l+r) * scale
		eL += l * l
		eR += r * r
		eS += (l + r) * (l + r)
	}
	return eL, eR, eS
}
