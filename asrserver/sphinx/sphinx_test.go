//go:build pocketsphinx

package sphinx_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/fleetscribe/fleetscribe/asrserver"
	"github.com/fleetscribe/fleetscribe/asrserver/sphinx"
	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/internal/leaktest"
	"github.com/fleetscribe/fleetscribe/internal/wer"
	"github.com/fleetscribe/fleetscribe/triton"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

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
	cfg := sphinx.DefaultConfig()
	cfg.Decoders = 2
	rec, err := sphinx.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer rec.Close()
	lis, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- asrserver.New(triton.DefaultModelIO(), rec, "pocketsphinx").Serve(ctx, lis) }()
	defer func() { cancel(); <-done }()
	c, err := triton.Dial(lis.Addr().String(), triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

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
		res, err := c.Infer(context.Background(), audio.Resample(clip.Samples, clip.Rate, 16000), true)
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
