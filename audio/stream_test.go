package audio

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
)

// choppy reads at most a random 1..max bytes at a time, as a network body
// does, and fails with err (if any) after failAt bytes.
type choppy struct {
	r      io.Reader
	rng    *rand.Rand
	max    int
	n      int
	failAt int
	err    error
}

func (c *choppy) Read(p []byte) (int, error) {
	if c.err != nil && c.n >= c.failAt {
		return 0, c.err
	}
	k := min(len(p), 1+c.rng.IntN(c.max))
	if c.err != nil {
		k = min(k, c.failAt-c.n)
	}
	n, err := c.r.Read(p[:k])
	c.n += n
	return n, err
}

func newChoppy(b []byte, seed uint64) *choppy {
	return &choppy{r: bytes.NewReader(b), rng: rand.New(rand.NewPCG(seed, 1)), max: 70000}
}

// readBlocks reads s to its end in blocks of random sizes.
func readBlocks(t *testing.T, s Stream, rng *rand.Rand) []float32 {
	t.Helper()
	var out []float32
	for {
		p := make([]float32, 1+rng.IntN(50000))
		n, err := s.Read(p)
		out = append(out, p[:n]...)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func noise(n int, seed uint64) []float32 {
	rng := rand.New(rand.NewPCG(seed, 2))
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.2)
	}
	return x
}

// A Resampler fed a stream in blocks of any size gives exactly the samples
// Resample gives for the whole, at every rate the worker meets.
func TestResamplerStreamsWhatResampleGives(t *testing.T) {
	x := noise(123457, 1)
	rng := rand.New(rand.NewPCG(3, 4))
	for _, from := range []int{8000, 11025, 16000, 22050, 44100, 48000, 96000, 44101} {
		want := Resample(x, from, 16000)
		r := NewResampler(from, 16000)
		var got []float32
		for at := 0; at < len(x); {
			n := min(len(x)-at, rng.IntN(9000)) // 0 at times
			got = r.Write(got, x[at:at+n])
			at += n
		}
		got = r.Flush(got)
		if !slices.Equal(got, want) {
			t.Errorf("%d Hz: the stream's %d samples differ from Resample's %d", from, len(got), len(want))
		}
		if from != 16000 && cap(r.buf) > 4*(9000+2*r.k.taps) {
			t.Errorf("%d Hz: the resampler holds %d samples", from, cap(r.buf))
		}
	}
}

// speechLike is bursts of noise with pauses, and a long stretch without
// any, so that chunks are cut at pauses and, where there is none, overlap.
func speechLike(n int, seed uint64) []float32 {
	x := noise(n, seed)
	for i := range x {
		if i < n/2 && (i/4000)%5 == 4 {
			x[i] *= 0.001 // pauses in the first half only
		}
	}
	return x
}

// A Splitter fed a stream in blocks of any size cuts exactly the chunks
// Split cuts from the whole.
func TestSplitterStreamsWhatSplitGives(t *testing.T) {
	x := speechLike(600000, 5)
	rng := rand.New(rand.NewPCG(6, 7))
	for _, cfg := range []SplitConfig{
		{Max: 48000, Frame: 480, Overlap: 16000},
		{Max: 48000, Frame: 480},
		{Max: 7, Frame: 1, Overlap: 3},
		{Max: 0},
		{Max: len(x)},
	} {
		want := Split(x, cfg)
		got := splitStream(x, cfg, func() int { return rng.IntN(30000) })
		if len(got) != len(want) {
			t.Fatalf("%+v: %d chunks, Split cut %d", cfg, len(got), len(want))
		}
		overlapped := false
		for i := range got {
			if got[i].Offset != want[i].Offset || got[i].Overlap != want[i].Overlap || !slices.Equal(got[i].Samples, want[i].Samples) {
				t.Fatalf("%+v: chunk %d at %d+%d (overlap %d), Split's at %d+%d (overlap %d)", cfg, i,
					got[i].Offset, len(got[i].Samples), got[i].Overlap, want[i].Offset, len(want[i].Samples), want[i].Overlap)
			}
			overlapped = overlapped || got[i].Overlap > 0
		}
		if cfg.Overlap > 0 && cfg.Max > 1000 && !overlapped {
			t.Errorf("%+v: no overlapping chunk: the test signal does not test overlaps", cfg)
		}
	}
}

// sameBits compares samples bit for bit (NaN equals NaN).
func sameBits(a, b []float32) bool {
	return slices.EqualFunc(a, b, func(x, y float32) bool { return math.Float32bits(x) == math.Float32bits(y) })
}

// splitStream cuts x with a Splitter fed blocks of block() samples (0 at
// times), each chunk's samples copied (they are the splitter's until its
// next Write).
func splitStream(x []float32, cfg SplitConfig, block func() int) []Chunk {
	s := NewSplitter(cfg)
	var got []Chunk
	for at := 0; ; {
		n := min(len(x)-at, block())
		s.Write(x[at : at+n])
		at += n
		for {
			c, ok := s.Next(at == len(x))
			if !ok {
				break
			}
			c.Samples = slices.Clone(c.Samples)
			got = append(got, c)
		}
		if at == len(x) {
			return got
		}
	}
}

func pcm16(x []float32, channels int) []byte {
	var b []byte
	for _, v := range x {
		for range channels {
			b = binary16(b, v)
		}
	}
	return b
}

func binary16(b []byte, v float32) []byte {
	s := int16(max(-32768, min(32767, math.Round(float64(v)*32767))))
	return append(b, byte(s), byte(uint16(s)>>8))
}

// A WAV stream decodes, as it is read in pieces of any size, exactly what
// Decode gives for the whole file, for each sample format, for unfinalised
// sizes and for a header longer than the stream's buffer.
func TestWAVStreamDecodesWhatDecodeGives(t *testing.T) {
	x := noise(100003, 8)
	stereo := pcm16(x, 2)
	unfinalised := wav(wavPCM, 1, 16000, 16, pcm16(x, 1), false)
	copy(unfinalised[4:8], []byte{0, 0, 0, 0})
	data := len(unfinalised) - len(pcm16(x, 1)) - 4
	copy(unfinalised[data:data+4], []byte{0xFF, 0xFF, 0xFF, 0xFF})
	// A header past the reader's 64 KiB buffer: 100 KB of JUNK after fmt.
	plain := wav(wavPCM, 1, 16000, 16, pcm16(x, 1), false)
	junk := binary.LittleEndian.AppendUint32([]byte("JUNK"), 100_000)
	long := slices.Concat(plain[:36], junk, make([]byte, 100_000), plain[36:])
	binary.LittleEndian.PutUint32(long[4:], uint32(len(long)-8))
	files := map[string][]byte{
		"header past the buffer": long,
		"pcm16 mono":             wav(wavPCM, 1, 16000, 16, pcm16(x, 1), false),
		"pcm16 stereo":           wav(wavPCM, 2, 44100, 16, stereo, false),
		"pcm16 5.1":              wav(wavPCM, 6, 48000, 16, pcm16(x[:60000], 6), true),
		"pcm8":                   wav(wavPCM, 1, 8000, 8, stereo, false),
		"pcm24 stereo":           wav(wavPCM, 2, 48000, 24, stereo[:len(stereo)/6*6], false),
		"float32":                wav(wavFloat, 1, 22050, 32, stereo, false),
		"mu-law":                 wav(wavMuLaw, 1, 8000, 8, stereo, false),
		"truncated":              wav(wavPCM, 2, 16000, 16, stereo, false)[:len(stereo)/2+101],
		"unfinalised size":       unfinalised,
	}
	rng := rand.New(rand.NewPCG(9, 10))
	for name, b := range files {
		want, err := Decode(b)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		s, err := OpenStream(t.Context(), newChoppy(b, rng.Uint64()), int64(len(b)), nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := readBlocks(t, s, rng)
		if s.Rate() != want.Rate || !sameBits(got, want.Samples) {
			t.Errorf("%s: %d samples at %d Hz, Decode gives %d at %d Hz", name, len(got), s.Rate(), len(want.Samples), want.Rate)
		}
		_ = s.Close()
	}
}

// Compressed formats stream through ffmpeg (and MP3 and FLAC through the
// Go decoders without it) to exactly what Decode gives, and the temporary
// copy is removed when the stream is closed.
func TestCompressedStreamsDecodeWhatDecodeGives(t *testing.T) {
	cases := []struct {
		ext  string
		args []string
	}{
		{"mp3", []string{"-c:a", "libmp3lame", "-b:a", "64k"}},
		{"flac", []string{"-c:a", "flac"}},
		{"ogg", []string{"-c:a", "libopus"}},
		{"m4a", []string{"-c:a", "aac", "-movflags", "+faststart"}},
		{"wav", []string{"-c:a", "adpcm_ms"}},
	}
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range cases {
		enc, _ := encode(t, 44100, 2, c.ext, c.args...)
		for _, ff := range []*FFmpeg{PathFFmpeg(), nil} {
			if ff == nil && !hasGoDecoder(sniff(enc)) {
				continue
			}
			want, err := DecodeContext(t.Context(), enc, nil, ff)
			if err != nil {
				t.Fatalf("%s: %v", c.ext, err)
			}
			s, err := OpenStream(t.Context(), newChoppy(enc, rng.Uint64()), int64(len(enc)), ff)
			if err != nil {
				t.Fatalf("%s: %v", c.ext, err)
			}
			got := readBlocks(t, s, rng)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s.Rate() != want.Rate || !slices.Equal(got, want.Samples) {
				t.Errorf("%s (ffmpeg %v): %d samples at %d Hz, Decode gives %d at %d Hz", c.ext, ff != nil, len(got), s.Rate(), len(want.Samples), want.Rate)
			}
		}
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

var errNetwork = errors.New("connection reset")

// A body that fails part way is the network's fault, not the recording's:
// the error comes back as it is, never as corrupt audio; a stream closed
// half read leaves no ffmpeg process and no temporary file behind.
func TestStreamReadFailuresAreNotCorruptAudio(t *testing.T) {
	x := noise(200000, 13)
	w := wav(wavPCM, 2, 44100, 16, pcm16(x, 2), false)
	enc, _ := encode(t, 44100, 2, "ogg", "-c:a", "libopus")
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	for name, b := range map[string][]byte{"wav header": w, "wav samples": w, "ogg": enc} {
		failAt := len(b) / 2
		if name == "wav header" {
			failAt = 30
		}
		r := newChoppy(b, 1)
		r.err, r.failAt = errNetwork, failAt
		s, err := OpenStream(t.Context(), r, int64(len(b)), PathFFmpeg())
		if err == nil {
			_, err = readAll(s, nil)
		}
		if !errors.Is(err, errNetwork) || errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v, want the reader's error", name, err)
		}
	}
	s, err := OpenStream(t.Context(), bytes.NewReader(enc), int64(len(enc)), PathFFmpeg())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(make([]float32, 100)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if out, _ := exec.Command("pgrep", "-P", itoa(os.Getpid()), "ffmpeg").Output(); len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("ffmpeg processes left: %s", out)
	}
	if left, _ := filepath.Glob(filepath.Join(tmp, "*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}
