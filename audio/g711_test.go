package audio

import (
	"encoding/binary"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Telephony WAVs (G.711 μ-law and A-law, the call-centre norm) decode to
// exactly the samples ffmpeg's own G.711 decoder gives, for a two-channel
// 8 kHz recording with speech-band tones at several levels; their header
// probes as a plain WAV would.
func TestG711MatchesFFmpeg(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatal("ffmpeg is required (make deps installs it)")
	}
	dir := t.TempDir()
	for _, codec := range []string{"pcm_mulaw", "pcm_alaw"} {
		t.Run(codec, func(t *testing.T) {
			wav := filepath.Join(dir, codec+".wav")
			raw := filepath.Join(dir, codec+".s16")
			src := "aevalsrc=0.9*sin(2*PI*440*t)*exp(-t)|0.05*sin(2*PI*1800*t):s=8000:d=1.5"
			for _, args := range [][]string{
				{"-f", "lavfi", "-i", src, "-c:a", codec, wav},
				{"-i", wav, "-f", "s16le", "-ac", "2", raw},
			} {
				cmd := exec.CommandContext(t.Context(), "ffmpeg", append([]string{"-nostdin", "-loglevel", "error", "-y"}, args...)...)
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("ffmpeg %v: %v\n%s", args, err, out)
				}
			}
			b := readFile(t, wav)
			info, err := Probe(b[:4096], int64(len(b)))
			if err != nil || info.Rate != 8000 || info.Channels != 2 || info.Frames != 12000 {
				t.Fatalf("probe: %+v, %v", info, err)
			}
			clip, err := Decode(b)
			if err != nil {
				t.Fatal(err)
			}
			want := readFile(t, raw)
			if len(clip.Samples)*4 != len(want) {
				t.Fatalf("%d frames, ffmpeg %d", len(clip.Samples), len(want)/4)
			}
			for i := range clip.Samples {
				l := float32(int16(binary.LittleEndian.Uint16(want[4*i:])))
				r := float32(int16(binary.LittleEndian.Uint16(want[4*i+2:])))
				if got, w := clip.Samples[i], (l+r)/2/32768; got != w {
					t.Fatalf("frame %d: %v, ffmpeg %v", i, got, w)
				}
			}
		})
	}
}

// Every G.711 code has its standard value at the ends and the middle.
func TestG711Tables(t *testing.T) {
	for _, c := range []struct {
		table [256]float32
		code  byte
		want  int
	}{
		{muLaw, 0xFF, 0}, {muLaw, 0x7F, 0}, {muLaw, 0x80, 32124}, {muLaw, 0x00, -32124},
		{aLaw, 0xD5, 8}, {aLaw, 0x55, -8}, {aLaw, 0xAA, 32256}, {aLaw, 0x2A, -32256},
	} {
		if got := int(c.table[c.code] * 32768); got != c.want {
			t.Errorf("code 0x%02x: %d, want %d", c.code, got, c.want)
		}
	}
}

// A G.711 header that claims 16 bits a sample is corrupt.
func TestG711WrongWidth(t *testing.T) {
	if _, err := Decode(wav(wavMuLaw, 1, 8000, 16, []byte{1, 2}, false)); err == nil {
		t.Error("16-bit μ-law accepted")
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Containers are named in the error (here, headers with nothing behind
// them: corrupt, whether read in Go or by ffmpeg), and formats that share
// a first byte are told apart. Without ffmpeg, those only it reads are
// unsupported, by name.
func TestContainersAreNamed(t *testing.T) {
	riff := func(magic, form string) []byte {
		return append([]byte(magic+"\x00\x00\x00\x00"+form), make([]byte, 32)...)
	}
	cases := map[string][]byte{
		"rf64":       riff("RF64", "WAVE"),
		"wave64":     append(append([]byte(nil), wave64GUID...), make([]byte, 32)...),
		"caf":        append([]byte("caff\x00\x01\x00\x00"), make([]byte, 32)...),
		"asf (wma)":  append(append([]byte(nil), asfGUID...), make([]byte, 32)...),
		"aac (adts)": {0xFF, 0xF1, 0x50, 0x80, 0x02, 0x1F, 0xFC},
		"mp3":        {0xFF, 0xFB, 0x90, 0x64, 0x00},
		"webm":       append(append([]byte(nil), ebmlMagic...), []byte("\x9f\x42\x86\x81\x01\x42\x82\x84webm")...),
		"matroska":   append(append([]byte(nil), ebmlMagic...), []byte("\x9f\x42\x86\x81\x01\x42\x82\x88matroska")...),
		"aiff":       riff("FORM", "AIFF"),
		"amr":        []byte("#!AMR\n\x3c"),
	}
	for want, b := range cases {
		_, err := Decode(b)
		var fe *FormatError
		if !errors.As(err, &fe) || fe.Format != want || !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", want, err)
		}
		_, err = DecodeContext(t.Context(), b, nil, nil)
		if want != "mp3" && (!errors.As(err, &fe) || fe.Format != want || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "ffmpeg")) {
			t.Errorf("%s without ffmpeg: %v", want, err)
		}
	}
}
