package audio

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// stereoWAV is 16-bit stereo at rate: a 0.5 amplitude tone on the left,
// a tenth of it on the right, n frames.
func stereoWAV(rate, n int) []byte {
	b := make([]byte, 44+4*n)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+4*n))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], 2)
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(4*rate))
	binary.LittleEndian.PutUint16(b[32:], 4)
	binary.LittleEndian.PutUint16(b[34:], 16)
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(4*n))
	for i := range n {
		v := math.Sin(2 * math.Pi * 440 * float64(i) / float64(rate))
		binary.LittleEndian.PutUint16(b[44+4*i:], uint16(int16(16384*v)))
		binary.LittleEndian.PutUint16(b[46+4*i:], uint16(int16(1638*v)))
	}
	return b
}

func peak(t *testing.T, s Stream) (float64, int) {
	t.Helper()
	defer s.Close()
	buf := make([]float32, 4096)
	top, n := 0.0, 0
	for {
		k, err := s.Read(buf)
		for _, v := range buf[:k] {
			top = max(top, math.Abs(float64(v)))
		}
		n += k
		if errors.Is(err, io.EOF) {
			return top, n
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// Each channel of a stereo recording decodes alone, in Go for WAV and
// through ffmpeg for FLAC; the stream says how many channels there are; a
// channel past them is refused.
func TestOpenChannel(t *testing.T) {
	wav := stereoWAV(16000, 16000)
	inputs := map[string][]byte{"wav": wav}
	if bin, err := exec.LookPath("ffmpeg"); err == nil {
		dir := t.TempDir()
		in, out := filepath.Join(dir, "in.wav"), filepath.Join(dir, "out.flac")
		if err := os.WriteFile(in, wav, 0o644); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.CommandContext(t.Context(), bin, "-nostdin", "-loglevel", "error", "-i", in, out).CombinedOutput(); err != nil {
			t.Fatalf("ffmpeg: %v %s", err, b)
		}
		inputs["flac"], _ = os.ReadFile(out)
	}
	ff := PathFFmpeg()
	for name, b := range inputs {
		for ch, want := range []float64{0.5, 0.05} {
			s, err := OpenChannel(context.Background(), bytes.NewReader(b), int64(len(b)), ff, ch)
			if err != nil {
				t.Fatalf("%s channel %d: %v", name, ch, err)
			}
			if got := ChannelCount(s); got != 2 {
				t.Errorf("%s: %d channels, want 2", name, got)
			}
			if top, n := peak(t, s); math.Abs(top-want) > 0.01 || n != 16000 {
				t.Errorf("%s channel %d: peak %.3f over %d samples, want %.2f over 16000", name, ch, top, n, want)
			}
		}
		if _, err := OpenChannel(context.Background(), bytes.NewReader(b), int64(len(b)), ff, 2); !errors.Is(err, ErrNoSuchChannel) {
			t.Errorf("%s channel 2 of 2: %v, want ErrNoSuchChannel", name, err)
		}
	}
	// Mixed down, as ever: the mean of the two.
	s, err := OpenStream(context.Background(), bytes.NewReader(wav), int64(len(wav)), ff)
	if err != nil {
		t.Fatal(err)
	}
	if top, _ := peak(t, s); math.Abs(top-0.275) > 0.01 {
		t.Errorf("mixed down: peak %.3f, want 0.275", top)
	}
}
