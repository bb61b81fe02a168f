package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"testing"
)

// wav builds a WAV with an arbitrary fmt chunk and data.
func wav(tag uint16, channels, rate, bits int, data []byte, extensible bool) []byte {
	fmtLen := 16
	if extensible {
		fmtLen = 40
	}
	b := []byte("RIFF\x00\x00\x00\x00WAVE")
	b = append(b, "fmt "...)
	b = binary.LittleEndian.AppendUint32(b, uint32(fmtLen))
	outer := tag
	if extensible {
		outer = wavExtensible
	}
	b = binary.LittleEndian.AppendUint16(b, outer)
	b = binary.LittleEndian.AppendUint16(b, uint16(channels))
	b = binary.LittleEndian.AppendUint32(b, uint32(rate))
	b = binary.LittleEndian.AppendUint32(b, uint32(rate*channels*bits/8))
	b = binary.LittleEndian.AppendUint16(b, uint16(channels*bits/8))
	b = binary.LittleEndian.AppendUint16(b, uint16(bits))
	if extensible {
		b = binary.LittleEndian.AppendUint16(b, 22)
		b = binary.LittleEndian.AppendUint16(b, uint16(bits))
		b = binary.LittleEndian.AppendUint32(b, 3) // channel mask
		b = binary.LittleEndian.AppendUint16(b, tag)
		b = append(b, make([]byte, 14)...) // rest of the GUID
	}
	b = append(b, "LIST\x03\x00\x00\x00abc\x00"...) // odd-sized chunk with pad byte
	b = append(b, "data"...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
	b = append(b, data...)
	binary.LittleEndian.PutUint32(b[4:], uint32(len(b)-8))
	return b
}

func TestDecodeWAVFormats(t *testing.T) {
	cases := []struct {
		name string
		file []byte
		want []float32
	}{
		{"pcm16 mono", wav(wavPCM, 1, 16000, 16, []byte{0x00, 0x40, 0x00, 0xC0}, false), []float32{0.5, -0.5}},
		{"pcm16 stereo mixes down", wav(wavPCM, 2, 8000, 16, []byte{0x00, 0x40, 0x00, 0x00}, false), []float32{0.25}},
		{"pcm8 unsigned", wav(wavPCM, 1, 8000, 8, []byte{128, 192}, false), []float32{0, 0.5}},
		{"pcm24", wav(wavPCM, 1, 48000, 24, []byte{0x00, 0x00, 0x40, 0x00, 0x00, 0xC0}, false), []float32{0.5, -0.5}},
		{"pcm32", wav(wavPCM, 1, 48000, 32, []byte{0, 0, 0, 0x40}, false), []float32{0.5}},
		{"float32", wav(wavFloat, 1, 44100, 32, binary.LittleEndian.AppendUint32(nil, math.Float32bits(0.25)), false), []float32{0.25}},
		{"float64", wav(wavFloat, 1, 44100, 64, binary.LittleEndian.AppendUint64(nil, math.Float64bits(-0.75)), false), []float32{-0.75}},
		{"extensible pcm16", wav(wavPCM, 2, 16000, 16, []byte{0x00, 0x40, 0x00, 0x40}, true), []float32{0.5}},
	}
	for _, c := range cases {
		clip, err := Decode(c.file)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if len(clip.Samples) != len(c.want) {
			t.Errorf("%s: %d samples, want %d", c.name, len(clip.Samples), len(c.want))
			continue
		}
		for i := range c.want {
			if math.Abs(float64(clip.Samples[i]-c.want[i])) > 1e-6 {
				t.Errorf("%s: sample %d = %v, want %v", c.name, i, clip.Samples[i], c.want[i])
			}
		}
	}
}

func TestDecodeWAVTruncatedStream(t *testing.T) {
	f := wav(wavPCM, 1, 16000, 16, []byte{0, 0x40, 0, 0x40, 0}, false) // odd byte: partial frame
	binary.LittleEndian.PutUint32(f[len(f)-5-4:], 0xFFFFFFFF)          // size never finalised
	clip, err := DecodeWAV(f)
	if err != nil || len(clip.Samples) != 2 {
		t.Fatalf("got %d samples, %v; want the 2 whole frames", len(clip.Samples), err)
	}
}

func TestDecodeErrors(t *testing.T) {
	cases := map[string]struct {
		file []byte
		kind error
	}{
		"empty":          {nil, ErrCorrupt},
		"random":         {[]byte("hello world, not audio"), ErrCorrupt},
		"riff no chunks": {[]byte("RIFF\x04\x00\x00\x00WAVE"), ErrCorrupt},
		"fmt too short":  {append([]byte("RIFF\x10\x00\x00\x00WAVEfmt \x04\x00\x00\x00"), 1, 0, 1, 0), ErrCorrupt},
		"chunk overruns": {append([]byte("RIFF\x10\x00\x00\x00WAVEfmt \xff\x00\x00\x00"), 1, 0), ErrCorrupt},
		"zero channels":  {wav(wavPCM, 0, 16000, 16, nil, false), ErrCorrupt},
		"absurd rate":    {wav(wavPCM, 1, 10, 16, nil, false), ErrCorrupt},
		"12-bit":         {wav(wavPCM, 1, 16000, 12, nil, false), ErrUnsupported},
		"adpcm":          {wav(0x11, 1, 16000, 4, nil, false), ErrUnsupported},
		"truncated flac": {[]byte("fLaC\x00\x00\x00\x22"), ErrCorrupt},
		"truncated mp3":  {[]byte("ID3\x03\x00\x00\x00\x00"), ErrCorrupt},
	}
	for name, c := range cases {
		_, err := Decode(c.file)
		var fe *FormatError
		if !errors.Is(err, c.kind) || !errors.As(err, &fe) || fe.Reason == "" {
			t.Errorf("%s: got %v, want a FormatError of kind %v", name, err, c.kind)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(wav(wavPCM, 1, 16000, 16, []byte{1, 2, 3, 4}, false))
	f.Add(wav(wavFloat, 2, 44100, 32, make([]byte, 16), true))
	f.Add([]byte("RIFF\x00\x00\x00\x00WAVEdata\x00\x00\x00\x00"))
	for _, name := range []string{"testdata/seed.flac", "testdata/seed.mp3"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// The Go decoders only (no ffmpeg subprocess per input).
		clip, err := DecodeContext(t.Context(), b, nil, nil)
		if err != nil {
			var fe *FormatError
			if !errors.As(err, &fe) {
				t.Fatalf("error is not a FormatError: %v", err)
			}
			return
		}
		if clip.Rate < minRate || clip.Rate > maxRate || len(clip.Samples) > maxDecodedFrames {
			t.Fatalf("implausible clip: rate %d, %d samples from %d bytes", clip.Rate, len(clip.Samples), len(b))
		}
		if sniff(b) == "" && len(clip.Samples) > len(b) { // WAV: at least a byte a sample
			t.Fatalf("%d samples from %d bytes of WAV", len(clip.Samples), len(b))
		}
	})
}

func sine(rate int, freq float64, seconds float64) []float32 {
	x := make([]float32, int(float64(rate)*seconds))
	for i := range x {
		x[i] = float32(0.5 * math.Sin(2*math.Pi*freq*float64(i)/float64(rate)))
	}
	return x
}

// amplitudeAt measures the amplitude of freq in x by correlation.
func amplitudeAt(x []float32, rate int, freq float64) float64 {
	var re, im float64
	for i, v := range x {
		ph := 2 * math.Pi * freq * float64(i) / float64(rate)
		re += float64(v) * math.Cos(ph)
		im += float64(v) * math.Sin(ph)
	}
	return 2 * math.Hypot(re, im) / float64(len(x))
}

func TestResampleKeepsPassbandAndRejectsAliases(t *testing.T) {
	for _, from := range []int{8000, 22050, 44100, 48000} {
		x := sine(from, 1000, 1)
		y := Resample(x, from, 16000)
		if want := (len(x)*16000 + from - 1) / from; len(y) != want {
			t.Errorf("%d Hz: %d samples out, want %d", from, len(y), want)
		}
		mid := y[len(y)/4 : 3*len(y)/4] // away from edge effects
		if a := amplitudeAt(mid, 16000, 1000); math.Abs(a-0.5) > 0.01 {
			t.Errorf("%d Hz: 1 kHz amplitude %.4f after resampling, want 0.5", from, a)
		}
	}
	// 12 kHz is above the 8 kHz output Nyquist: it must be filtered, not
	// folded to 4 kHz.
	y := Resample(sine(48000, 12000, 1), 48000, 16000)
	if a := amplitudeAt(y[len(y)/4:3*len(y)/4], 16000, 4000); a > 0.005 {
		t.Errorf("12 kHz aliased to 4 kHz with amplitude %.4f", a)
	}
	if got := Resample([]float32{1, 2}, 16000, 16000); len(got) != 2 || got[1] != 2 {
		t.Errorf("same-rate resample changed the signal: %v", got)
	}
}

func TestSplitCutsAtSilence(t *testing.T) {
	rate := 16000
	// 4 s tone, 0.5 s silence, 4 s tone, 0.5 s silence, 2 s tone.
	var x []float32
	for _, seg := range []struct {
		sec  float64
		loud bool
	}{{4, true}, {0.5, false}, {4, true}, {0.5, false}, {2, true}} {
		s := sine(rate, 300, seg.sec)
		if !seg.loud {
			s = make([]float32, len(s))
		}
		x = append(x, s...)
	}
	chunks := Split(x, SplitConfig{Max: 6 * rate, Frame: rate * 30 / 1000})
	if len(chunks) != 3 {
		t.Fatalf("%d chunks, want 3", len(chunks))
	}
	next := 0
	for i, c := range chunks {
		if c.Offset != next || len(c.Samples) > 6*rate {
			t.Fatalf("chunk %d: offset %d (want %d), %d samples", i, c.Offset, next, len(c.Samples))
		}
		next += len(c.Samples)
	}
	if next != len(x) {
		t.Fatalf("chunks cover %d samples of %d", next, len(x))
	}
	for i, cut := range []float64{4.25, 8.75} {
		got := float64(chunks[i+1].Offset) / float64(rate)
		if got < cut-0.25 || got > cut+0.25 {
			t.Errorf("cut %d at %.2fs, want inside the silence around %.2fs", i, got, cut)
		}
	}
	if one := Split(x[:rate], SplitConfig{Max: 6 * rate}); len(one) != 1 || len(one[0].Samples) != rate {
		t.Errorf("short input should be one chunk")
	}
}

// A cut is made in the last pause of the window, not its quietest point:
// a chunk then fills as much of -chunk-seconds as the speech allows (the
// compiled encoder pads every chunk to it). A quiet span shorter than a
// pause (a stop consonant's closure) is not cut at.
func TestSplitCutsAtTheLastPause(t *testing.T) {
	rate := 16000
	// tone to 3.2 s, digital silence to 3.7 s (the quietest), tone to
	// 5.2 s, a quieter room tone to 5.6 s (a pause, louder than the
	// silence), tone with a 60-ms gap at 5.8 s, to 10 s.
	x := sine(rate, 300, 10)
	quiet := func(from, to, amp float64) {
		for i := int(from * float64(rate)); i < int(to*float64(rate)); i++ {
			x[i] *= float32(amp)
		}
	}
	quiet(3.2, 3.7, 0)
	quiet(5.2, 5.6, 0.02)
	quiet(5.8, 5.86, 0)
	chunks := Split(x, SplitConfig{Max: 6 * rate, Frame: rate * 30 / 1000, Overlap: rate / 4})
	if len(chunks) < 2 {
		t.Fatalf("%d chunks, want at least 2", len(chunks))
	}
	end := float64(len(chunks[0].Samples)) / float64(rate)
	if end < 5.2 || end > 5.6 {
		t.Errorf("first chunk ends at %.2f s, want inside the last pause (5.2-5.6 s), not the deeper silence at 3.2-3.7 s or the gap at 5.8 s", end)
	}
	if chunks[1].Overlap != 0 {
		t.Errorf("a cut in a pause overlaps the next chunk by %d samples, want none", chunks[1].Overlap)
	}
}

// A WAV whose writer never came back to fill in the sizes (RIFF and data
// size 0, as a crashed or streaming recorder leaves it) is decoded from the
// data that is there.
func TestDecodeWAVUnfinalisedSizes(t *testing.T) {
	data := make([]byte, 2*16000) // one second of 16-bit mono
	for i := range 16000 {
		binary.LittleEndian.PutUint16(data[2*i:], uint16(int16(8000*math.Sin(float64(i)/10))))
	}
	f := wav(wavPCM, 1, 16000, 16, data, false)
	binary.LittleEndian.PutUint32(f[4:], 0)                  // RIFF size
	binary.LittleEndian.PutUint32(f[len(f)-len(data)-4:], 0) // data size
	clip, err := DecodeWAV(f)
	if err != nil || len(clip.Samples) != 16000 {
		t.Fatalf("got %d samples, %v; want 16000", len(clip.Samples), err)
	}
	info, err := Probe(f[:100], int64(len(f)))
	if err != nil || info.Frames != 16000 || info.Rate != 16000 {
		t.Fatalf("probe: %+v, %v", info, err)
	}
	// A finalised file whose data chunk is empty has no samples.
	empty := wav(wavPCM, 1, 16000, 16, nil, false)
	if clip, err := DecodeWAV(empty); err != nil || len(clip.Samples) != 0 {
		t.Fatalf("empty data chunk: %d samples, %v", len(clip.Samples), err)
	}
}

func TestProbe(t *testing.T) {
	f := wav(wavPCM, 2, 44100, 16, make([]byte, 4*44100*3), false)
	info, err := Probe(f[:64], int64(len(f)))
	if err != nil || info.Frames != 3*44100 || info.Channels != 2 || math.Abs(info.Duration()-3) > 1e-9 {
		t.Fatalf("%+v, %v", info, err)
	}
	if _, err := Probe(f[:20], int64(len(f))); !errors.Is(err, ErrHeaderBeyondPrefix) {
		t.Errorf("short prefix: %v", err)
	}
	if _, err := Probe([]byte("fLaC\x00\x00\x00\x22"), 100); !errors.Is(err, ErrHeaderBeyondPrefix) {
		t.Errorf("flac, header beyond the prefix: %v", err)
	}
	if _, err := Probe([]byte("fLaC\x00\x00\x00\x22"), 8); !errors.Is(err, ErrCorrupt) {
		t.Errorf("flac, truncated object: %v", err)
	}
	if _, err := Probe([]byte("garbage bytes here"), 100); !errors.Is(err, ErrCorrupt) {
		t.Errorf("garbage: %v", err)
	}
	// The declared data size wins over a longer object (trailing chunks).
	g := append(wav(wavPCM, 1, 8000, 8, make([]byte, 800), false), "LIST\x04\x00\x00\x00abcd"...)
	if info, err := Probe(g, int64(len(g))); err != nil || info.Frames != 800 {
		t.Errorf("%+v, %v", info, err)
	}
}

// FuzzProbe checks that Probe never panics and that, for a file both Probe
// and Decode accept, Probe's frame count bounds what Decode returns: the
// worker admits jobs by that count.
func FuzzProbe(f *testing.F) {
	f.Add(wav(wavPCM, 1, 16000, 16, []byte{1, 2, 3, 4}, false))
	f.Add([]byte("RIFF\x00\x00\x00\x00WAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\x40\x1f\x00\x00\x80\x3e\x00\x00\x02\x00\x10\x00data\x00\x00\x00\x00\x01\x02\x03\x04"))
	for _, name := range []string{"testdata/seed.flac", "testdata/seed.mp3"} {
		if b, err := os.ReadFile(name); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Probe(b, int64(len(b)))
		if err != nil {
			return
		}
		if info.Estimated || info.Format == "mp3" {
			return // a length from the size or the bit rate, not a bound
		}
		clip, err := DecodeContext(t.Context(), b, nil, nil)
		if err == nil && int64(len(clip.Samples)) > info.Frames {
			t.Fatalf("Probe says %d frames, Decode returned %d", info.Frames, len(clip.Samples))
		}
	})
}

// The 16-bit fast path agrees with the general per-sample reader for
// every channel count, on random data.
func TestFastPathsMatchTheGeneralReader(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, ch := range []int{1, 2, 3, 6} {
		for _, inverted := range []bool{false, true} {
			data := make([]byte, 2*ch*1001)
			for i := range data {
				data[i] = byte(rng.UintN(256))
			}
			if inverted && ch == 2 { // right = -left: the mean cancels
				for i := 0; i < len(data); i += 4 {
					v := -int16(uint16(data[i]) | uint16(data[i+1])<<8)
					data[i+2], data[i+3] = byte(v), byte(uint16(v)>>8)
				}
			}
			got := make([]float32, 1001)
			decodePCM16(got, data, ch)
			read := sampleReader(wavFormat{tag: wavPCM, bits: 16, channels: ch, blockAlign: 2 * ch})
			want := make([]float32, 1001)
			mixFrames(want, ch, func(i, c int) float32 { return read(data[2*ch*i+2*c:]) })
			for i := range got {
				if math.Abs(float64(got[i]-want[i])) > 1e-6 {
					t.Fatalf("%d channels (inverted %v), frame %d: %v, want %v", ch, inverted, i, got[i], want[i])
				}
			}
			if ch > 2 {
				continue
			}
			// The same samples as 32-bit float (decodeFloat32's fast path).
			f32 := make([]byte, 0, 4*ch*1001)
			for i := 0; i < len(data); i += 2 {
				v := float32(int16(uint16(data[i])|uint16(data[i+1])<<8)) / 32768
				f32 = binary.LittleEndian.AppendUint32(f32, math.Float32bits(v))
			}
			got = make([]float32, 1001)
			decodeFrames(got, f32, wavFormat{tag: wavFloat, bits: 32, channels: ch, blockAlign: 4 * ch})
			for i := range got {
				if math.Abs(float64(got[i]-want[i])) > 1e-6 {
					t.Fatalf("float, %d channels (inverted %v), frame %d: %v, want %v", ch, inverted, i, got[i], want[i])
				}
			}
		}
	}
}

// The resampler to the model's 16 kHz, measured at the frequencies that
// matter: flat within 0.5 dB up to 7 kHz, and tones above the output
// Nyquist frequency (8 kHz) rejected, not folded back (a 9 kHz tone at
// least 60 dB down where it would alias, at 7 kHz).
func TestResampleQuality(t *testing.T) {
	db := func(a float64) float64 { return 20 * math.Log10(math.Max(a, 1e-12)/0.5) }
	for _, from := range []int{22050, 32000, 44100, 48000} {
		for _, f := range []float64{1000, 3000, 5000, 6000, 7000} {
			y := Resample(sine(from, f, 1), from, 16000)
			if g := db(amplitudeAt(y[len(y)/4:3*len(y)/4], 16000, f)); math.Abs(g) > 0.5 {
				t.Errorf("%d Hz in: %.0f Hz comes out at %.2f dB, want within 0.5 dB", from, f, g)
			}
		}
		limits := map[float64]float64{9000: -60, 9500: -60, 10000: -60, 12000: -60}
		if from > 22050 {
			limits[8500] = -15 // inside the transition band: partly rejected
		}
		for f, limit := range limits {
			if f >= float64(from)/2 {
				continue
			}
			y := Resample(sine(from, f, 1), from, 16000)
			alias := 16000 - f
			if alias < 0 {
				continue
			}
			if a := db(amplitudeAt(y[len(y)/4:3*len(y)/4], 16000, alias)); a > limit {
				t.Errorf("%d Hz in: a %.0f Hz tone aliases to %.0f Hz at %.1f dB, want at most %.0f dB", from, f, alias, a, limit)
			}
		}
	}
}

// Speech survives the down-mix: a stereo recording with one channel
// inverted does not cancel to silence, and 5.1 with the voice in the
// centre arrives at -3 dB, not at a sixth.
func TestDownMixKeepsSpeech(t *testing.T) {
	voice := sine(16000, 300, 1)
	level := func(x []float32) float64 { return rms(x) / rms(voice) }
	interleave := func(ch int, f func(i, c int) float32) []byte {
		data := make([]byte, 0, 2*ch*len(voice))
		for i := range voice {
			for c := range ch {
				v := int16(math.Round(float64(f(i, c)) * 32767))
				data = append(data, byte(v), byte(uint16(v)>>8))
			}
		}
		return data
	}
	inverted := wav(wavPCM, 2, 16000, 16, interleave(2, func(i, c int) float32 {
		if c == 1 {
			return -voice[i]
		}
		return voice[i]
	}), false)
	c, err := Decode(inverted)
	if err != nil || level(c.Samples) < 0.95 {
		t.Errorf("stereo, one channel inverted: level %.3f, %v (averaging gives 0)", level(c.Samples), err)
	}
	centre := wav(wavPCM, 6, 16000, 16, interleave(6, func(i, c int) float32 {
		if c == 2 {
			return voice[i]
		}
		return 0
	}), false)
	c, err = Decode(centre)
	if err != nil || math.Abs(level(c.Samples)-0.707) > 0.01 {
		t.Errorf("5.1, voice in the centre: level %.3f, %v, want 0.707 (averaging gives 0.167)", level(c.Samples), err)
	}
	// 24-bit goes through the general reader: the same rules.
	c, err = Decode(wav(wavPCM, 2, 16000, 24, func() []byte {
		var b []byte
		for i := range voice {
			v := int32(math.Round(float64(voice[i]) * 8388607))
			for _, s := range []int32{v, -v} {
				b = append(b, byte(s), byte(s>>8), byte(s>>16))
			}
		}
		return b
	}(), false))
	if err != nil || level(c.Samples) < 0.95 {
		t.Errorf("24-bit stereo, one channel inverted: level %.3f, %v", level(c.Samples), err)
	}
}

// Normalize brings quiet and loud speech to -20 dBFS without clipping,
// leaves silence alone and does not lift noise past +60 dB.
func TestNormalize(t *testing.T) {
	// +600 dB: a float recording scaled far past full scale, whose frame
	// energies overflowed float32 (the gain became 0 and the chunk silent).
	for _, db := range []float64{-50, -40, -20, -6, 60, 600} {
		x := sine(16000, 300, 1)
		g := float32(1e30)
		if db < 600 {
			g = float32(math.Pow(10, db/20))
		}
		for i := range x {
			x[i] *= g
			if (i/4000)%2 == 1 {
				x[i] = 0 // pauses
			}
		}
		if _, err := Normalize(x); err != nil {
			t.Fatal(err)
		}
		var speech []float32
		peak := 0.0
		for i, v := range x {
			if (i/4000)%2 == 0 {
				speech = append(speech, v)
			}
			peak = math.Max(peak, math.Abs(float64(v)))
		}
		if r := 20 * math.Log10(rms(speech)); math.Abs(r+20) > 1 || peak > normPeak+1e-6 {
			t.Errorf("%g dB in: speech at %.1f dBFS (peak %.3f), want -20", db, r, peak)
		}
	}
	silence := make([]float32, 16000)
	if g, err := Normalize(silence); g != 1 || err != nil {
		t.Errorf("silence: gain %v, %v", g, err)
	}
	faint := make([]float32, 16000)
	for i := range faint {
		faint[i] = 1e-6 * float32(i%7-3)
	}
	if g, _ := Normalize(faint); g > normMaxGain {
		t.Errorf("faint noise: gain %v, over the limit", g)
	}
	for _, bad := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		x := sine(16000, 300, 1)
		x[8000] = bad
		before := slices.Clone(x)
		if _, err := Normalize(x); !errors.Is(err, ErrNonFinite) {
			t.Errorf("a %v sample: %v, want ErrNonFinite", bad, err)
		}
		if !slices.EqualFunc(x, before, func(a, b float32) bool { return a == b || a != a && b != b }) {
			t.Errorf("a %v sample: the chunk was changed", bad)
		}
	}
}

// The chunker on any signal and bounds: chunks cover the input, in
// order, each starting where the previous ended less its overlap, none
// longer than Max, none empty unless the input is.
func FuzzSplit(f *testing.F) {
	f.Add([]byte{1, 2, 3, 4, 0, 0, 0, 0, 9, 9}, 4, 2)
	f.Add(make([]byte, 1000), 100, 10)
	f.Add(bytes.Repeat([]byte{0x7f, 0}, 5000), 1000, 30)
	f.Fuzz(func(t *testing.T, raw []byte, maxLen, frame int) {
		x := make([]float32, len(raw))
		for i, b := range raw {
			x[i] = float32(int8(b)) / 128
		}
		maxLen = max(1, maxLen%20000)
		chunks := Split(x, SplitConfig{Max: maxLen, Frame: frame % 2000, Overlap: frame % 500})
		off := 0
		for i, c := range chunks {
			if c.Offset != off-c.Overlap || c.Overlap < 0 || i == 0 && c.Overlap != 0 {
				t.Fatalf("chunk %d at %d with overlap %d, the previous ended at %d", i, c.Offset, c.Overlap, off)
			}
			if len(c.Samples) > maxLen || len(c.Samples) == 0 && len(x) > 0 {
				t.Fatalf("chunk %d of %d samples (max %d)", i, len(c.Samples), maxLen)
			}
			off = c.Offset + len(c.Samples)
		}
		if off != len(x) {
			t.Fatalf("chunks cover %d of %d samples", off, len(x))
		}
		// Streamed in blocks of 1 to 97 samples, the same chunks.
		block := max(1, frame%97+1)
		streamed := splitStream(x, SplitConfig{Max: maxLen, Frame: frame % 2000, Overlap: frame % 500}, func() int { return block })
		if len(streamed) != len(chunks) {
			t.Fatalf("streamed %d chunks, Split cut %d", len(streamed), len(chunks))
		}
		for i, c := range streamed {
			if c.Offset != chunks[i].Offset || len(c.Samples) != len(chunks[i].Samples) || c.Overlap != chunks[i].Overlap {
				t.Fatalf("streamed chunk %d differs from Split's", i)
			}
		}
	})
}

// The worker's split: 30-ms frames, chunks of chunkSeconds, and the
// overlap asked for in samples.
func TestChunkSplit(t *testing.T) {
	if got, want := ChunkSplit(16000, 30, StitchOverlap), (SplitConfig{Max: 480000, Frame: 480, Overlap: 16000}); got != want {
		t.Errorf("with word times: %+v, want %+v", got, want)
	}
	if got, want := ChunkSplit(8000, 12.5, 0), (SplitConfig{Max: 100000, Frame: 240}); got != want {
		t.Errorf("without: %+v, want %+v", got, want)
	}
}
