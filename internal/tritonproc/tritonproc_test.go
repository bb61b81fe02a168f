package tritonproc_test

import (
	"context"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/internal/leaktest"
	"github.com/fleetscribe/fleetscribe/internal/syncbuf"
	"github.com/fleetscribe/fleetscribe/internal/tritonproc"
	"github.com/fleetscribe/fleetscribe/triton"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

func infer(t *testing.T, addr string, io triton.ModelIO, samples []float32) triton.Result {
	t.Helper()
	c, err := triton.Dial(addr, io)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r, err := c.Infer(ctx, triton.Request{Samples: samples, Timestamps: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The shipped CPU repository, served by real Triton, recognises speech
// and times every word inside the clip.
func TestCPURepository(t *testing.T) {
	tritonproc.Require(t)
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is needed to synthesise speech")
	}
	root, err := tritonproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	wav := filepath.Join(t.TempDir(), "s.wav")
	const text = "please schedule a follow up appointment in two weeks"
	out, err := exec.Command("ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i", "flite=text='"+text+"':voice=rms",
		"-ar", "16000", "-ac", "1", wav).CombinedOutput()
	if err != nil {
		t.Fatalf("ffmpeg: %v: %s", err, out)
	}
	b, err := os.ReadFile(wav)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := audio.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: filepath.Join(root, "deploy", "triton", "cpu"), Log: &log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	// The server is the release the project says it is tested against
	// (it prints its version in its option table once ready).
	if !regexp.MustCompile(`server_version\s*\|\s*` + regexp.QuoteMeta(tritonproc.Version) + `\s`).MatchString(log.String()) {
		t.Errorf("the server's log names no server_version %s", tritonproc.Version)
	}
	r := infer(t, s.Addr, triton.DefaultModelIO(), dec.Samples)
	if r.Text != text {
		t.Errorf("recognised %q, want %q", r.Text, text)
	}
	dur := float64(len(dec.Samples)) / 16000
	if len(r.Words) != len(strings.Fields(text)) {
		t.Errorf("%d words timed, want %d: %+v", len(r.Words), len(strings.Fields(text)), r.Words)
	}
	for i, w := range r.Words {
		if w.Start < 0 || w.End < w.Start || w.End > dur+0.01 || i > 0 && w.Start < r.Words[i-1].End-1e-6 {
			t.Errorf("word %+v outside the %.2f s clip or out of order", w, dur)
		}
	}
	// Inputs in which the recogniser hears nothing are answered, not
	// failed: a fault here costs the worker every retry on every partition.
	rng := rand.New(rand.NewPCG(3, 4))
	noisy := slices.Clone(dec.Samples)
	for i := range noisy { // speech in white noise of the same power: 0 dB
		noisy[i] += float32(rng.NormFloat64()) * rms(dec.Samples)
	}
	for name, samples := range map[string][]float32{
		"one sample":                 {0},
		"1,000 samples":              make([]float32, 1000),
		"5 s of silence":             make([]float32, 5*16000),
		"speech in 0 dB white noise": noisy,
	} {
		c, err := triton.Dial(s.Addr, triton.DefaultModelIO())
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		r, err := c.Infer(ctx, triton.Request{Samples: samples, Timestamps: true})
		cancel()
		_ = c.Close()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		d := float64(len(samples)) / 16000
		for _, w := range r.Words {
			if w.Start < 0 || w.End > d+0.01 {
				t.Errorf("%s: word %+v outside the %.2f s input", name, w, d)
			}
		}
	}
}

func rms(x []float32) float32 {
	var s float64
	for _, v := range x {
		s += float64(v) * float64(v)
	}
	return float32(math.Sqrt(s / float64(max(1, len(x)))))
}

// A stand-in for NeMo: nemo.collections.asr.models.ASRModel whose model
// transcribes n samples as "parakeet n", with two timed words, and records
// the device it was loaded on.
const fakeNeMo = `
class Hyp:
    def __init__(self, text, words):
        self.text = text
        self.timestamp = {"word": words}

class Model:
    def __init__(self, device):
        self.device = device
    def eval(self):
        return self
    def transcribe(self, audio, batch_size, timestamps, verbose):
        assert batch_size == len(audio)
        out = []
        for a in audio:
            d = a.size / 16000
            words = [{"word": "parakeet", "start": 0.0, "end": d / 2}, {"word": self.device, "start": d / 2, "end": d}]
            out.append(Hyp("parakeet %d" % a.size, words if timestamps else []))
        return out

class ASRModel:
    @staticmethod
    def from_pretrained(model_name, map_location):
        return Model(str(map_location))
    @staticmethod
    def restore_from(restore_path, map_location):
        return Model(str(map_location))
`

// The shipped GPU repository (Parakeet through NeMo) loads on a host
// without GPUs and serves the contract through real Triton, with a
// stand-in NeMo: the same config.pbtxt and model.py, placed beside a fake
// nemo package on the model's import path.
func TestParakeetRepositoryOnCPU(t *testing.T) {
	tritonproc.Require(t)
	root, err := tritonproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	repo := t.TempDir()
	version := filepath.Join(repo, "asr", "1")
	pkg := filepath.Join(version, "nemo", "collections", "asr")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	shipped := filepath.Join(root, "deploy", "triton", "models", "asr")
	for src, dst := range map[string]string{
		filepath.Join(shipped, "config.pbtxt"):  filepath.Join(repo, "asr", "config.pbtxt"),
		filepath.Join(shipped, "1", "model.py"): filepath.Join(version, "model.py"),
	} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(version, "nemo", "__init__.py"), filepath.Join(version, "nemo", "collections", "__init__.py")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(pkg, "__init__.py"), []byte("from . import models\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(pkg, "models.py"), []byte(fakeNeMo), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	r := infer(t, s.Addr, triton.DefaultModelIO(), make([]float32, 8000))
	if r.Text != "parakeet 8000" || len(r.Words) != 2 || r.Words[1].Word != "cpu" || r.Words[1].End != 0.5 {
		t.Errorf("result %+v, want parakeet 8000 with two words, the second naming device cpu", r)
	}
	// Bucket mode: the padding past audio_length is never transcribed.
	io := triton.DefaultModelIO()
	io.Buckets = []int{16000}
	if r := infer(t, s.Addr, io, make([]float32, 12345)); r.Text != "parakeet 12345" {
		t.Errorf("bucket-padded chunk: %q, want parakeet 12345", r.Text)
	}
}
