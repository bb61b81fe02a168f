package worker_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// expectedText is the transcript of rec read whole, as a recording that
// fits in its first read is: decoded, resampled, cut and levelled, each
// chunk answered with its fingerprint (tritontest.Fingerprint).
func expectedText(t *testing.T, rec []byte, cfg worker.Config) string {
	t.Helper()
	clip, err := audio.DecodeContext(t.Context(), rec, nil, &audio.FFmpeg{Bin: "ffmpeg", MaxSeconds: 3600})
	if err != nil {
		t.Fatal(err)
	}
	x := audio.Resample(clip.Samples, clip.Rate, modelspec.SampleRate)
	var parts []string
	for _, c := range audio.Split(x, audio.SplitConfig{Max: int(cfg.Audio.ChunkSeconds * modelspec.SampleRate), Frame: modelspec.SampleRate * 30 / 1000, Overlap: modelspec.SampleRate}) {
		s := append([]float32(nil), c.Samples...)
		_, _ = audio.Normalize(s)
		parts = append(parts, tritontest.Fingerprint(s))
	}
	return strings.Join(parts, " ")
}

// speechWAV is 44.1 kHz stereo 16-bit of bursts of noise with pauses, and
// a stretch without any (so chunks are cut at pauses and, there, overlap).
func speechWAV(seconds float64, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, 3))
	n := int(seconds * 44100)
	x := make([]float32, n)
	for i := range x {
		x[i] = float32(rng.NormFloat64() * 0.05)
		if i < n/2 && (i/30000)%6 == 5 {
			x[i] *= 0.001
		}
	}
	b := audio.EncodeWAV(audio.Clip{Rate: 44100, Samples: x})
	// Make it stereo: each sample twice.
	data := b[44:]
	st := make([]byte, 0, 44+2*len(data))
	st = append(st, b[:44]...)
	for i := 0; i+1 < len(data); i += 2 {
		st = append(st, data[i], data[i+1], data[i], data[i+1])
	}
	h := st[:44]
	put32 := func(at int, v uint32) {
		h[at], h[at+1], h[at+2], h[at+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	put32(4, uint32(len(st)-8))
	h[22] = 2
	put32(28, 44100*4)
	h[32] = 4
	put32(40, uint32(2*len(data)))
	return st
}

func toMP3(t *testing.T, wav []byte) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-f", "wav", "-i", "pipe:0", "-c:a", "libmp3lame", "-b:a", "64k", "-f", "mp3", "pipe:1")
	cmd.Stdin = bytes.NewReader(wav)
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("no MP3 encoder: %v", err)
	}
	return out
}

// breakingS3 breaks the first `breaks` bodies of GETs that read on from
// past the first byte after `after` bytes, as a dropped connection does,
// and can replace the object before a GET.
type breakingS3 struct {
	worker.S3API
	mu      sync.Mutex
	breaks  int
	after   int
	ranges  []string
	replace func() // run once, before the first GET past the first byte
}

func (b *breakingS3) GetObject(ctx context.Context, in *s3.GetObjectInput, opts ...func(*s3.Options)) (*s3.GetObjectOutput, error) {
	b.mu.Lock()
	rng := aws.ToString(in.Range)
	b.ranges = append(b.ranges, rng)
	rest := rng != "" && !strings.HasPrefix(rng, "bytes=0-")
	brk := rest && b.breaks > 0
	if brk {
		b.breaks--
	}
	replace := b.replace
	if rest {
		b.replace = nil
	}
	b.mu.Unlock()
	if rest && replace != nil {
		replace()
	}
	out, err := b.S3API.GetObject(ctx, in, opts...)
	if err == nil && brk {
		out.Body = &brokenBody{ReadCloser: out.Body, left: b.after}
	}
	return out, err
}

type brokenBody struct {
	io.ReadCloser
	left int
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		return 0, errors.New("connection reset by peer")
	}
	n, err := b.ReadCloser.Read(p[:min(len(p), b.left)])
	b.left -= n
	return n, err
}

func fingerprintServers(e *env) {
	for _, s := range e.servers {
		s.SetRecognizer(kserve.RecognizerFunc(func(_ context.Context, x []float32, _ bool) (triton.Result, error) {
			return triton.Result{Text: tritontest.Fingerprint(x)}, nil
		}))
	}
}

// Recordings longer than their first read stream (decoded as they are
// read, resampled, cut and sent chunk by chunk) and give exactly the
// transcript of the same recording read whole: a 44.1 kHz stereo WAV read
// as it arrives, and an MP3 copied aside for ffmpeg. Reads that break
// part way resume where they stopped, with If-Match, at most three times.
func TestStreamedRecordingsMatchTheWholeRecording(t *testing.T) {
	e := newEnv(t, 2, 3)
	fingerprintServers(e)
	cfg := e.config()
	wav := speechWAV(62, 1) // 10.9 MB
	mp3 := toMP3(t, speechWAV(150, 2))
	if len(mp3) <= 1<<20 {
		t.Fatalf("the MP3 is %d bytes: it would not stream", len(mp3))
	}
	e.put("long.wav", wav)
	e.put("long.mp3", mp3)
	e.put("broken.wav", wav)
	e.sendJob("long.wav")
	e.sendJob("long.mp3")
	e.runS3(cfg, e.s3)
	for key, rec := range map[string][]byte{"long.wav": wav, "long.mp3": mp3} {
		tr, ok := e.transcript(key)
		if want := expectedText(t, rec, cfg); !ok || tr.Text != want {
			t.Errorf("%s: transcript %q (found %v),\nwant %q", key, tr.Text, ok, want)
		} else if tr.Chunks < 3 {
			t.Errorf("%s: %d chunks", key, tr.Chunks)
		}
	}

	// Two reads break after 1 MB each: resumed, the same transcript.
	e.sendJob("broken.wav")
	b := &breakingS3{S3API: e.s3, breaks: 2, after: 1 << 20}
	e.runS3(cfg, b)
	tr, ok := e.transcript("broken.wav")
	if want := expectedText(t, wav, cfg); !ok || tr.Text != want || tr.Attempt != 1 {
		t.Errorf("resumed: transcript %q of attempt %d (found %v), want %q at the first", tr.Text, tr.Attempt, ok, want)
	}
	var resumed int
	for _, r := range b.ranges {
		if strings.Contains(r, "bytes=") && !strings.HasPrefix(r, "bytes=0-") {
			resumed++
		}
	}
	if resumed != 3 {
		t.Errorf("GETs %q: want the first MiB, then three of the rest (two broken)", b.ranges)
	}
}

// A job whose reads keep breaking fails as retryable (the recording is
// not at fault) and is not recorded as corrupt; an object overwritten
// while it streams is not mixed with the new upload: the read of the rest
// fails its If-Match, the message is retried, and the transcript is of the
// new object alone.
func TestStreamedReadFailuresAreRetried(t *testing.T) {
	e := newEnv(t, 1, 3)
	fingerprintServers(e)
	cfg := e.config()
	old, replacement := speechWAV(40, 3), speechWAV(45, 4)
	e.put("replaced.wav", old)
	e.sendJob("replaced.wav")
	b := &breakingS3{S3API: e.s3, replace: func() { e.put("replaced.wav", replacement) }}
	e.runS3(cfg, b)
	tr, ok := e.transcript("replaced.wav")
	if want := expectedText(t, replacement, cfg); !ok || tr.Text != want {
		t.Errorf("replaced: transcript %q (found %v), want the new object's %q", tr.Text, ok, want)
	}
	if tr.Attempt < 2 {
		t.Errorf("replaced: transcript of attempt %d; the first should have failed", tr.Attempt)
	}

	e.put("flaky.wav", old)
	e.sendJob("flaky.wav")
	cfg.Queues.MaxReceives = 1
	e.runS3(cfg, &breakingS3{S3API: e.s3, breaks: 100, after: 100 << 10})
	rec, ok := e.errorRecord("flaky.wav")
	if !ok || rec.Class == contract.ClassCorruptAudio || !strings.Contains(rec.Message, "connection reset") {
		t.Errorf("flaky: record %+v (found %v), want a retryable read failure", rec, ok)
	}
}

// A recording whose length its header does not say (Ogg: admitted on a
// length guessed from its size) is measured as it streams, and refused as
// too_large, for good, once it passes -max-audio-seconds.
func TestStreamedRecordingPastTheLimitIsTooLarge(t *testing.T) {
	e := newEnv(t, 1, 3)
	cmd := exec.CommandContext(t.Context(), "ffmpeg", "-nostdin", "-loglevel", "error", "-f", "wav", "-i", "pipe:0",
		"-c:a", "libopus", "-b:a", "160k", "-f", "ogg", "pipe:1")
	cmd.Stdin = bytes.NewReader(speechWAV(120, 5))
	ogg, err := cmd.Output()
	if err != nil {
		t.Skipf("no Opus encoder: %v", err)
	}
	if len(ogg) <= 1<<20 {
		t.Fatalf("the Ogg is %d bytes: it would not stream", len(ogg))
	}
	e.put("long.ogg", ogg)
	e.sendJob("long.ogg")
	cfg := e.config()
	cfg.Inputs.MaxAudioSeconds = 60
	e.runS3(cfg, e.s3)
	rec, ok := e.errorRecord("long.ogg")
	if !ok || rec.Class != contract.ClassTooLarge || !rec.Final || !strings.Contains(rec.Message, "60 s") {
		t.Errorf("record %+v (found %v), want a final too_large", rec, ok)
	}
	if _, ok := e.transcript("long.ogg"); ok {
		t.Error("a transcript of a recording past the limit")
	}
}
