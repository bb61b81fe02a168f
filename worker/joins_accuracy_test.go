//go:build accuracy

package worker_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/tritonproc"
	"github.com/fleetscribe/fleetscribe/lab/wer"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

// cpuTriton serves real Triton with the CPU recogniser of
// -accuracy-engine (Whisper, or pocketsphinx) for the length of a test,
// with two model instances for this machine's two cores.
func cpuTriton(t *testing.T) *tritonproc.Server {
	t.Helper()
	tritonproc.Require(t)
	repo := t.TempDir()
	cpu := tritonproc.Model(*accuracyEngine)
	cpu.Batching.MaxQueueDelay, cpu.Batching.QueueTimeout, cpu.Instances = 2*time.Millisecond, time.Hour, cpuInstances
	if err := tritonproc.WriteRepo(repo, map[string]modelspec.Config{"asr": cpu}); err != nil {
		t.Fatal(err)
	}
	srv, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Kill)
	return srv
}

// cpuInstances is how many model instances cpuTriton runs.
const cpuInstances = 2

// joinWindow is how near a join a word counts as at the join.
const joinWindow = 1.5

// joinErrors splits the word errors of hyp (timed words) against ref into
// those within joinWindow seconds of a join and the rest, with the
// reference words in each: an error is placed at its hypothesis word's
// time (a deleted word between its aligned neighbours).
func joinErrors(ref []string, hyp []contract.Word, joins []float64) (nearErr, nearWords, farErr, farWords int) {
	names := make([]string, len(hyp))
	for i, w := range hyp {
		names[i] = strings.ToLower(w.Word)
	}
	align := wer.Align(ref, names)
	near := func(t float64) bool {
		for _, j := range joins {
			if math.Abs(t-j) <= joinWindow {
				return true
			}
		}
		return false
	}
	count := func(t float64, words, errs int) {
		if near(t) {
			nearWords, nearErr = nearWords+words, nearErr+errs
		} else {
			farWords, farErr = farWords+words, farErr+errs
		}
	}
	used := make([]bool, len(hyp))
	last := 0.0
	for i, j := range align {
		if j < 0 { // deleted: at the time of the last word heard
			count(last, 1, 1)
			continue
		}
		used[j] = true
		last = (hyp[j].Start + hyp[j].End) / 2
		e := 0
		if names[j] != ref[i] {
			e = 1
		}
		count(last, 1, e)
	}
	for j, u := range used {
		if !u { // inserted
			count((hyp[j].Start+hyp[j].End)/2, 0, 1)
		}
	}
	return nearErr, nearWords, farErr, farWords
}

func TestJoinErrorsPlacesErrors(t *testing.T) {
	w := func(s string, at float64) contract.Word { return contract.Word{Word: s, Start: at, End: at + 0.2} }
	ref := []string{"a", "b", "c", "d", "e", "f"}
	hyp := []contract.Word{w("a", 1), w("x", 10), w("c", 10.5), w("e", 20), w("f", 21), w("g", 30)}
	ne, nw, fe, fw := joinErrors(ref, hyp, []float64{10.2})
	// b substituted (x, near), d deleted after c (near), g inserted (far).
	if ne != 2 || nw != 3 || fe != 1 || fw != 3 {
		t.Errorf("near %d/%d, far %d/%d; want 2/3 and 1/3", ne, nw, fe, fw)
	}
}

// Continuous noisy speech, with no pause to cut at: chunks overlap by a
// second and their words are joined there. The error rate within 1.5 s of
// a join, against elsewhere, shows what the joins cost.
func TestJoinAccuracy(t *testing.T) {
	// Five minutes at most, uploaded as WAV (the emulator takes single
	// uploads up to 11 MiB), in 15 s chunks: about 20 joins.
	const chunkSeconds = 15
	minutes := min(*accuracyMinutes, 5)
	srv := cpuTriton(t)

	rng := rand.New(rand.NewPCG(27, 1))
	dir := t.TempDir()
	voices := []string{"rms", "slt", "kal16"}
	var x []float32
	var texts []string
	for _, s := range sentences(rng, 100000) {
		if float64(len(x)) >= minutes*60*16000 {
			break
		}
		y := flite(t, dir, s, voices[len(texts)%len(voices)])
		// Sentences run into each other: their own lead and tail of
		// silence cut off, so the chunker finds no pause to cut at.
		lo, hi := onset(y), len(y)
		for hi > lo && math.Abs(float64(y[hi-1])) < 0.01 {
			hi--
		}
		x = append(x, y[lo:hi]...)
		texts = append(texts, s)
	}
	for i := range x {
		x[i] += float32(rng.NormFloat64() * 0.01) // noise about 20 dB below the speech, throughout
	}
	e := newEnv(t, 0, 3)
	e.startPool([]string{srv.Addr}, 5*time.Minute)
	e.put("noisy.wav", audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: x}))
	e.sendJob("noisy.wav")
	cfg := e.config()
	cfg.Audio.ChunkSeconds = chunkSeconds
	cfg.Audio.OverlapJoin = *accuracyJoin
	cfg.Jobs.Timeout = 30 * time.Minute
	cfg.Queues.VisibilityTimeout = 2 * time.Minute
	e.runFor(cfg, 30*time.Minute)
	tr, ok := e.transcript("noisy.wav")
	if !ok {
		t.Fatal("no transcript")
	}
	// The joins: where the worker's chunker (the same one) cut with an
	// overlap, the middle of each overlap.
	pcm := audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: x})
	clip, err := audio.DecodeWAV(pcm)
	if err != nil {
		t.Fatal(err)
	}
	var joins []float64
	overlapped := 0
	for _, c := range audio.Split(clip.Samples, audio.SplitConfig{Max: chunkSeconds * 16000, Frame: 480, Overlap: 16000}) {
		if c.Offset > 0 {
			joins = append(joins, (float64(c.Offset)+float64(c.Overlap)/2)/16000)
		}
		if c.Overlap > 0 {
			overlapped++
		}
	}
	var ref []string
	for _, s := range texts {
		ref = append(ref, wer.Normalize(s)...)
	}
	ne, nw, fe, fw := joinErrors(ref, tr.Words, joins)
	all, words := wer.Errors(strings.Join(texts, " "), tr.Text)
	t.Logf("%.1f min, %d chunks, %d joins (%d overlapped): WER %.3f; within %.1f s of a join %.3f (%d words), elsewhere %.3f (%d words)",
		float64(len(x))/16000/60, tr.Chunks, len(joins), overlapped, float64(all)/float64(words), joinWindow,
		float64(ne)/float64(max(nw, 1)), nw, float64(fe)/float64(max(fw, 1)), fw)
	fmt.Printf("RESULT engine=%s join=%s minutes=%.1f joins=%d overlapped=%d wer=%.3f wer_near_joins=%.3f wer_elsewhere=%.3f words_near=%d\n",
		*accuracyEngine, *accuracyJoin, float64(len(x))/16000/60, len(joins), overlapped, float64(all)/float64(words), float64(ne)/float64(max(nw, 1)), float64(fe)/float64(max(fw, 1)), nw)
	_ = os.Remove(filepath.Join(dir, "s.wav"))
}
