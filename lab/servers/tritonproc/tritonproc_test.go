package tritonproc_test

import (
	"context"
	"errors"
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

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
	"github.com/fleetscribe/fleetscribe/lab/kit/syncbuf"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
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

// requireSpeech skips t without a Triton server to run or ffmpeg to
// synthesise speech, and returns the project's root.
func requireSpeech(t *testing.T) string {
	t.Helper()
	tritonproc.Require(t)
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Skip("ffmpeg is needed to synthesise speech")
	}
	root, err := tritonproc.Root()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// The shipped CPU repository, served by real Triton, recognises speech
// and times every word inside the clip.
func TestCPURepository(t *testing.T) {
	root := requireSpeech(t)
	const text = "please schedule a follow up appointment in two weeks"
	samples := flite(t, text)
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
	// The model says what it runs in Triton's metrics, and the pool reads it.
	pool, err := triton.NewPool(triton.PoolConfig{Addrs: []string{s.Addr}, MetricsAddrs: []string{s.MetricsAddr()}, MaxInflight: 1,
		RequestTimeout: time.Minute, Attempts: 1, EjectAfter: 1, HealthInterval: 10 * time.Second}, triton.DefaultModelIO(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	// A worker collects every health interval; one collection on a busy
	// machine can miss the metrics endpoint's answer.
	want := triton.Engine{Engine: "pocketsphinx", Device: "cpu", Encoder: "none", DecoderGraphs: "none"}
	testwait.Within(t, 30*time.Second, func() bool {
		pool.CollectStats(context.Background())
		return pool.Engines()[s.Addr] == want
	})
	if got := pool.Engines()[s.Addr]; got != want {
		t.Errorf("engine %+v, want %+v", got, want)
	}
	_ = pool.Close()
	r := infer(t, s.Addr, triton.DefaultModelIO(), samples)
	if r.Text != text {
		t.Errorf("recognised %q, want %q", r.Text, text)
	}
	// Real Triton takes the vocabulary input; pocketsphinx refuses it, that
	// request alone, as invalid input (a rejected_by_model record).
	if _, err := inferVocabulary(t, s.Addr, samples, []string{"metoprolol"}); !errors.Is(err, triton.ErrRejected) || !strings.Contains(err.Error(), "takes no vocabulary") {
		t.Errorf("a vocabulary to pocketsphinx: %v, want rejected, taking none", err)
	}
	dur := float64(len(samples)) / 16000
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
	noisy := slices.Clone(samples)
	for i := range noisy { // speech in white noise of the same power: 0 dB
		noisy[i] += float32(rng.NormFloat64()) * rms(samples)
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
	copies := map[string]string{
		filepath.Join(shipped, "config.pbtxt"):  filepath.Join(repo, "asr", "config.pbtxt"),
		filepath.Join(shipped, "1", "model.py"): filepath.Join(version, "model.py"),
	}
	engines, err := filepath.Glob(filepath.Join(shipped, "1", "fleetscribe_asr", "*.py"))
	if err != nil || len(engines) == 0 {
		t.Fatalf("the engines beside model.py: %v %v", engines, err)
	}
	if err := os.MkdirAll(filepath.Join(version, "fleetscribe_asr"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		copies[e] = filepath.Join(version, "fleetscribe_asr", filepath.Base(e))
	}
	for src, dst := range copies {
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

// The pocketsphinx engine as it was before it learned that seg() is None
// where the decoder finds nothing: a chunk of a few samples fails with
// TypeError on every partition.
const buggySphinx = `
import sys

def load(params, device):
    sys.path.insert(0, params["shipped_folder"])
    from fleetscribe_asr import sphinx as shipped

    class Buggy(shipped.SphinxModel):
        def utterance(self, pcm, offset, timestamps):
            d = self.decoder
            d.set_cmn(self.cmn_init)
            d.start_utt()
            for off in range(0, len(pcm), self.BLOCK):
                d.process_raw(pcm[off:off + self.BLOCK].tobytes(), False, False)
            d.end_utt()
            hyp = d.hyp()
            text = hyp.hypstr.strip() if hyp is not None else ""
            words = []
            if timestamps:
                for seg in d.seg():
                    w = shipped.clean_word(seg.word)
                    if w is not None:
                        words.append({"word": w, "start": offset + seg.start_frame / 100, "end": offset + (seg.end_frame + 1) / 100})
            return text, words

    return Buggy()  # the engine's typed options at their defaults
`

// On real Triton, with the engine bug above restored: the poison chunk is
// ErrPoisonInput after one attempt on each of two partitions, which the
// worker records as model_failed, and no partition is ejected.
func TestPoisonInputOnRealTriton(t *testing.T) {
	requireSpeech(t)
	shipped, err := tritonproc.ModelFile()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	module := filepath.Join(dir, "buggy.py")
	if err := os.WriteFile(module, []byte(buggySphinx), 0o644); err != nil {
		t.Fatal(err)
	}
	repo := filepath.Join(dir, "repo")
	if err := tritonproc.WriteRepo(repo, map[string]modelspec.Config{"asr": tritonproc.Model("module").WithParameters(
		map[string]string{"module": module, "shipped_folder": shipped})}); err != nil {
		t.Fatal(err)
	}
	var addrs []string
	for range 2 {
		s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Kill()
		addrs = append(addrs, s.Addr)
	}
	reg := prometheus.NewRegistry()
	pool, err := triton.NewPool(triton.PoolConfig{Addrs: addrs, MaxInflight: 4, RequestTimeout: time.Minute, Attempts: 5,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, EjectAfter: 1, HealthInterval: time.Hour,
		PoisonWait: 30 * time.Second}, triton.DefaultModelIO(), reg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	speech := flite(t, "the heart rate is normal and the lungs are clear")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if r, err := pool.Transcribe(ctx, triton.Request{Samples: speech, Timestamps: true}); err != nil || r.Text == "" {
		t.Fatalf("speech: %+v, %v", r, err)
	}
	_, err = pool.Transcribe(ctx, triton.Request{Samples: make([]float32, 1000), Timestamps: true})
	if !errors.Is(err, triton.ErrPoisonInput) || !strings.Contains(err.Error(), "'NoneType' object is not iterable") {
		t.Fatalf("1,000 samples: %v, want ErrPoisonInput naming the engine's error", err)
	}
	faults := 0.0
	mfs, _ := reg.Gather()
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			switch mf.GetName() {
			case "fleetscribe_triton_requests_total":
				for _, l := range m.GetLabel() {
					if l.GetName() == "outcome" && l.GetValue() == "fault" {
						faults += m.GetCounter().GetValue()
					}
				}
			case "fleetscribe_triton_partition_healthy":
				if m.GetGauge().GetValue() != 1 {
					t.Errorf("partition %s ejected", m.GetLabel()[0].GetValue())
				}
			}
		}
	}
	if faults != 2 {
		t.Errorf("%v faulted attempts, want 2: one on each partition", faults)
	}
}

// flite synthesises text as 16 kHz samples with ffmpeg's flite voice.
func flite(t *testing.T, text string) []float32 {
	t.Helper()
	wav := filepath.Join(t.TempDir(), "s.wav")
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
	return dec.Samples
}

// The neural CPU repository (Whisper tiny.en through faster-whisper),
// served by real Triton: cased, punctuated speech with every word timed
// inside the clip, in order, with a confidence; and nothing over silence.
func TestCPUWhisperRepository(t *testing.T) {
	root := requireSpeech(t)
	s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: filepath.Join(root, "deploy", "triton", "cpu-whisper")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	const text = "the heart rate is normal and the lungs are clear"
	samples := flite(t, text)
	r := infer(t, s.Addr, triton.DefaultModelIO(), samples)
	if r.Text != "The heart rate is normal and the lungs are clear." {
		t.Errorf("recognised %q", r.Text)
	}
	dur := float64(len(samples)) / 16000
	if len(r.Words) != len(strings.Fields(text)) {
		t.Fatalf("%d words timed, want %d: %+v", len(r.Words), len(strings.Fields(text)), r.Words)
	}
	for i, w := range r.Words {
		if w.Start < 0 || w.End < w.Start || w.End > dur+0.01 || i > 0 && w.Start < r.Words[i-1].End-1e-6 || w.Confidence <= 0 || w.Confidence > 1 {
			t.Errorf("word %+v outside the %.2f s clip, out of order or without a confidence", w, dur)
		}
	}
	if r := infer(t, s.Addr, triton.DefaultModelIO(), make([]float32, 5*16000)); r.Text != "" || len(r.Words) != 0 {
		t.Errorf("silence: %+v, want nothing", r)
	}
	// A vocabulary through real Triton to Whisper: taken (its effect is
	// measured by make bench-vocabulary).
	if r, err := inferVocabulary(t, s.Addr, samples, []string{"lungs", "heart rate"}); err != nil || r.Text == "" {
		t.Errorf("with a vocabulary: %+v, %v", r, err)
	}
}

// inferVocabulary sends samples with a vocabulary.
func inferVocabulary(t *testing.T, addr string, samples []float32, vocabulary []string) (triton.Result, error) {
	t.Helper()
	c, err := triton.Dial(addr, triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Infer(ctx, triton.Request{Samples: samples, Timestamps: true, Vocabulary: vocabulary})
}

// A misspelt model parameter stops the server at start, its log naming
// the key and the engine's known ones, instead of serving the default.
func TestMisspeltParameterRefusesToLoad(t *testing.T) {
	tritonproc.Require(t)
	repo := filepath.Join(t.TempDir(), "repo")
	if err := tritonproc.WriteRepo(repo, map[string]modelspec.Config{"asr": tritonproc.Model("echo").WithParameters(
		map[string]string{"batch_dlay_ms": "20"})}); err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo, Log: &log})
	if err == nil {
		s.Kill()
		t.Fatal("the server started with a misspelt parameter")
	}
	if want := "unknown asr model parameter(s) batch_dlay_ms for engine echo; known: batch_delay_ms, engine, fail_file"; !strings.Contains(log.String(), want) {
		t.Fatalf("%v; the log does not say %q:\n%s", err, want, log.String())
	}
}
