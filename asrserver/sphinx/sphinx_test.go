//go:build pocketsphinx

package sphinx_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/asrserver"
	"github.com/fleetscribe/fleetscribe/asrserver/sphinx"
	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/internal/leaktest"
	"github.com/fleetscribe/fleetscribe/internal/wer"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// serve runs the KServe v2 server with pocketsphinx behind it (decoders
// in its pool) until the test ends, and returns a client of it.
func serve(t *testing.T, decoders int) *triton.Client {
	t.Helper()
	rec := recognizer(t, decoders)
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- asrserver.New(triton.DefaultModelIO(), rec, "pocketsphinx").Serve(ctx, lis) }()
	c, err := triton.Dial(lis.Addr().String(), triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(); cancel(); <-done })
	return c
}

// TestRealSpeechOverGRPC synthesises speech with ffmpeg's flite voice,
// resamples it the way the worker does, and recognises it through the
// KServe v2 gRPC server with pocketsphinx behind it.
func TestRealSpeechOverGRPC(t *testing.T) {
	if _, err := exec.LookPath("ffmpeg"); err != nil {
		t.Fatal("ffmpeg is required (make deps installs it)")
	}
	sentences := []string{
		"please schedule a follow up appointment in two weeks",
		"the doctor will call you back this afternoon",
		"the heart rate is normal and the lungs are clear",
	}
	c := serve(t, 2)

	var edits, words int
	for i, s := range sentences {
		// 22.05 kHz, so the worker's resampler is part of what is tested.
		wav := filepath.Join(t.TempDir(), "s.wav")
		out, err := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi",
			"-i", "flite=text='"+s+"':voice=rms", "-ar", "22050", "-ac", "1", wav).CombinedOutput()
		if err != nil {
			t.Fatalf("ffmpeg: %v %s", err, out)
		}
		b, err := os.ReadFile(wav)
		if err != nil {
			t.Fatal(err)
		}
		clip, err := audio.DecodeWAV(b)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Infer(context.Background(), triton.Request{Samples: audio.Resample(clip.Samples, clip.Rate, 16000), Timestamps: true})
		if err != nil {
			t.Fatal(err)
		}
		e, n := wer.Errors(s, res.Text)
		edits, words = edits+e, words+n
		if len(res.Words) < n/2 {
			t.Errorf("sentence %d: %d timed words for %d spoken", i, len(res.Words), n)
		}
		for j := 1; j < len(res.Words); j++ {
			if res.Words[j].Start < res.Words[j-1].End-1e-9 || res.Words[j].End > clip.Duration()+0.05 {
				t.Errorf("sentence %d: word timings out of order or past the end: %+v", i, res.Words)
				break
			}
		}
	}
	if rate := float64(edits) / float64(words); rate > 0.15 {
		t.Errorf("WER %.3f over %d words, want at most 0.15", rate, words)
	}
}

// synth writes flite speech for each text, joined by gaps of silence, as a
// 16 kHz 16-bit mono WAV, and returns its path.
func synth(t *testing.T, gap float64, texts ...string) string {
	t.Helper()
	args := []string{"-nostdin", "-loglevel", "error", "-y"}
	filter := ""
	for i, s := range texts {
		if i > 0 {
			args = append(args, "-f", "lavfi", "-i", fmt.Sprintf("anullsrc=r=16000:cl=mono:d=%g", gap))
			filter += fmt.Sprintf("[%d]", len(args)/4-1)
		}
		args = append(args, "-f", "lavfi", "-i", "flite=text='"+s+"':voice=rms")
	}
	// Inputs alternate speech, silence, speech...; resample each to 16 kHz.
	n := 2*len(texts) - 1
	filter = ""
	for i := range n {
		filter += fmt.Sprintf("[%d]aresample=16000[a%d];", i, i)
	}
	for i := range n {
		filter += fmt.Sprintf("[a%d]", i)
	}
	filter += fmt.Sprintf("concat=n=%d:v=0:a=1", n)
	out := filepath.Join(t.TempDir(), "speech.wav")
	args = append(args, "-filter_complex", filter, "-ar", "16000", "-ac", "1", "-sample_fmt", "s16", out)
	if b, err := exec.CommandContext(t.Context(), "ffmpeg", args...).CombinedOutput(); err != nil {
		t.Fatalf("ffmpeg: %v %s", err, b)
	}
	return out
}

// cliWords runs pocketsphinx's own command-line recogniser on a WAV and
// returns its timed words (fillers dropped).
func cliWords(t *testing.T, wav string) []triton.Word {
	t.Helper()
	if _, err := exec.LookPath("pocketsphinx_continuous"); err != nil {
		t.Fatal("pocketsphinx_continuous is required (make deps installs the pocketsphinx package)")
	}
	out, err := exec.CommandContext(t.Context(), "pocketsphinx_continuous", "-infile", wav, "-time", "yes", "-logfn", "/dev/null").Output()
	if err != nil {
		t.Fatalf("pocketsphinx_continuous: %v", err)
	}
	var words []triton.Word
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 4 {
			continue
		}
		start, err1 := strconv.ParseFloat(f[1], 64)
		end, err2 := strconv.ParseFloat(f[2], 64)
		if err1 != nil || err2 != nil || strings.HasPrefix(f[0], "<") || strings.HasPrefix(f[0], "[") {
			continue
		}
		w, _, _ := strings.Cut(f[0], "(")
		words = append(words, triton.Word{Word: w, Start: start, End: end})
	}
	return words
}

func readClip(t *testing.T, path string) audio.Clip {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	clip, err := audio.DecodeWAV(b)
	if err != nil {
		t.Fatal(err)
	}
	return clip
}

// Every request is independent of the ones before it: the same clip sent
// many times to one decoder, with other clips in between, gets the same
// words at the same times, and those times agree with pocketsphinx's own
// command-line output, pauses included.
func TestWordTimesAreIndependentAndMatchCLI(t *testing.T) {
	rec := recognizer(t, 1)
	paused := synth(t, 3, "please schedule a follow up appointment", "the doctor will call you back")
	other := readClip(t, synth(t, 0, "the heart rate is normal and the lungs are clear"))
	clip := readClip(t, paused)
	want := cliWords(t, paused)
	if len(want) < 8 {
		t.Fatalf("the command-line recogniser found only %d words: %+v", len(want), want)
	}
	var first triton.Result
	for i := range 6 {
		res, err := rec.Recognize(context.Background(), clip.Samples, true)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := rec.Recognize(context.Background(), other.Samples, true); err != nil {
			t.Fatal(err)
		}
		for j, w := range res.Words {
			if w.Start < 0 || w.End > clip.Duration()+0.01 || w.End < w.Start || j > 0 && w.Start < res.Words[j-1].End-1e-9 {
				t.Fatalf("request %d: word %d %+v outside the %.2f s clip or out of order", i, j, w, clip.Duration())
			}
		}
		if i == 0 {
			first = res
			continue
		}
		if res.Text != first.Text || len(res.Words) != len(first.Words) {
			t.Fatalf("request %d: %q, first request: %q", i, res.Text, first.Text)
		}
		for j := range res.Words {
			if res.Words[j] != first.Words[j] {
				t.Fatalf("request %d: word %d %+v, first request %+v", i, j, res.Words[j], first.Words[j])
			}
		}
	}
	// Match words in order and compare their start times.
	matched, k := 0, 0
	for _, w := range want {
		for ; k < len(first.Words); k++ {
			if first.Words[k].Word == w.Word {
				if d := math.Abs(first.Words[k].Start - w.Start); d > 0.25 {
					t.Errorf("%q starts at %.2f s, the command line says %.2f s", w.Word, first.Words[k].Start, w.Start)
				}
				matched++
				k++
				break
			}
		}
	}
	if matched < len(want)*3/4 {
		t.Errorf("only %d of %d command-line words found in %+v", matched, len(want), first.Words)
	}
}

// The CPU server runs a batch across its decoder pool: two recordings of
// different lengths in one bucket-padded request, each cut to its true
// length, come back as two transcripts in order.
func TestBatchAcrossDecoders(t *testing.T) {
	rec := recognizer(t, 2)
	io := triton.DefaultModelIO()
	srv := asrserver.New(io, rec, "pocketsphinx")
	srv.Batch = asrserver.BatchConfig{MaxBatchSize: 2, Instances: 1}
	texts := []string{"the doctor will call you back", "please schedule a follow up appointment in two weeks"}
	var clips [][]float32
	longest := 0
	for _, s := range texts {
		c := readClip(t, synth(t, 0, s))
		clips = append(clips, c.Samples)
		longest = max(longest, len(c.Samples))
	}
	// One request of two rows, padded to the longer one, with true lengths.
	raw := make([]byte, 0, 8*longest)
	lengths := make([]int32, len(clips))
	for i, c := range clips {
		padded := make([]float32, longest)
		copy(padded, c)
		raw = append(raw, triton.EncodeFP32(padded)...)
		lengths[i] = int32(len(c))
	}
	req := &pb.ModelInferRequest{
		ModelName: io.Model,
		Inputs: []*pb.ModelInferRequest_InferInputTensor{
			{Name: io.AudioInput, Datatype: triton.TypeFP32, Shape: []int64{2, int64(longest)}},
			{Name: io.LengthInput, Datatype: triton.TypeInt32, Shape: []int64{2, 1}},
		},
		RawInputContents: [][]byte{raw, triton.EncodeInt32(lengths...)},
		Outputs:          []*pb.ModelInferRequest_InferRequestedOutputTensor{{Name: io.TextOutput}},
	}
	resp, err := srv.ModelInfer(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := triton.DecodeBytes(resp.GetRawOutputContents()[0])
	if err != nil || len(got) != 2 || resp.GetOutputs()[0].GetShape()[0] != 2 {
		t.Fatalf("outputs %v, %v", resp.GetOutputs(), err)
	}
	for i, s := range texts {
		if e, n := wer.Errors(s, string(got[i])); float64(e)/float64(n) > 0.2 {
			t.Errorf("row %d: %q for %q", i, got[i], s)
		}
	}
}

// recognizer loads a pool of decoders for the test.
func recognizer(t *testing.T, decoders int) *sphinx.Recognizer {
	t.Helper()
	cfg := sphinx.DefaultConfig()
	cfg.Decoders = decoders
	rec, err := sphinx.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rec.Close)
	return rec
}

// A recording 40 dB below normal (a phone far from the speaker): raw, the
// recogniser hears little; after the worker's per-chunk level
// normalisation, it is recognised as at a normal level.
func TestQuietSpeechAfterNormalize(t *testing.T) {
	sentences := []string{
		"please schedule a follow up appointment in two weeks",
		"the heart rate is normal and the lungs are clear",
	}
	c := serve(t, 1)
	var rawEdits, normEdits, words int
	for _, s := range sentences {
		b, err := os.ReadFile(synth(t, 0, s))
		if err != nil {
			t.Fatal(err)
		}
		clip, err := audio.DecodeWAV(b)
		if err != nil {
			t.Fatal(err)
		}
		quiet := make([]float32, len(clip.Samples))
		for i, v := range clip.Samples {
			quiet[i] = v * 0.01 // -40 dB
		}
		raw, err := c.Infer(context.Background(), triton.Request{Samples: quiet})
		if err != nil {
			t.Fatal(err)
		}
		norm := append([]float32(nil), quiet...)
		gain := audio.Normalize(norm)
		got, err := c.Infer(context.Background(), triton.Request{Samples: norm})
		if err != nil {
			t.Fatal(err)
		}
		e, n := wer.Errors(s, raw.Text)
		rawEdits, words = rawEdits+e, words+n
		e, _ = wer.Errors(s, got.Text)
		normEdits += e
		t.Logf("gain %.0f dB; raw %q; normalised %q", 20*math.Log10(gain), raw.Text, got.Text)
	}
	t.Logf("WER at -40 dB: %.2f raw, %.2f normalised", float64(rawEdits)/float64(words), float64(normEdits)/float64(words))
	if rate := float64(normEdits) / float64(words); rate > 0.15 {
		t.Errorf("WER %.2f after normalisation, want at most 0.15", rate)
	}
}
