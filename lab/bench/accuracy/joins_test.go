//go:build accuracy

package accuracy_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/wer"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
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
	if *accuracyParams != "" {
		params := map[string]string{}
		if err := modelspec.AddParameters(params, strings.Split(*accuracyParams, ",")); err != nil {
			t.Fatalf("-accuracy-params: %v", err)
		}
		cpu = cpu.WithParameters(params)
	}
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
	names := lowerWords(hyp)
	align := wer.Align(ref, names)
	count := func(t float64, words, errs int) {
		if nearAJoin(t, joins) {
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

func TestWordErrorsChargesEachReferenceWord(t *testing.T) {
	w := func(s string) contract.Word { return contract.Word{Word: s} }
	ref := []string{"a", "b", "c", "d", "e"}
	// x inserted before a (charged to a), b heard as y, c as said, then
	// d and e heard as e and z: one error each, whether aligned as two
	// substitutions or as d deleted and z inserted after e.
	hyp := []contract.Word{w("x"), w("A"), w("y"), w("c"), w("e"), w("z")}
	got := wordErrors(ref, hyp)
	if want := []int{1, 1, 0, 1, 1}; !slices.Equal(got, want) {
		t.Errorf("errors %v, want %v", got, want)
	}
}

func TestJoinCostPairsTheSameWords(t *testing.T) {
	times := []float64{1, 10, 20, 30}
	errsA := []int{1, 2, 0, 1}
	errsB := []int{0, 1, 1, 1}
	// Word 1 is near A's join (10) and away from B's (20): joined 2, not 1.
	// Word 2 is near B's join: joined 1 (B), not 0 (A). Word 3 is near
	// both and word 0 near neither: not paired.
	words, joined, unjoined := joinCost(times, errsA, errsB, []float64{10, 30}, []float64{20, 30.5})
	if words != 2 || joined != 3 || unjoined != 1 {
		t.Errorf("paired %d words, %d joined errors, %d not; want 2, 3, 1", words, joined, unjoined)
	}
}

// Continuous noisy speech, with no pause to cut at: chunks overlap by a
// second and their words are joined there. The error rate within 1.5 s of
// a join, against elsewhere, shows what the joins cost; but the chunker
// cuts at the quietest points between sentences, and which sentences (which
// voices, how hard) lie near joins is not chance. So the same recording is
// also transcribed in 11-s chunks, whose joins fall elsewhere (chunkers
// cutting at the same lengths fall into step after their first common cut):
// a word near a join of one run is compared with itself away from every
// join of the other, both ways (the paired figures).
func TestJoinAccuracy(t *testing.T) {
	// Five minutes at most, uploaded as WAV (the emulator takes single
	// uploads up to 11 MiB), in 15 s chunks: about 20 joins.
	const chunkSeconds, otherSeconds = 15, 11
	minutes := min(*accuracyMinutes, 5)
	srv := cpuTriton(t)

	rng := rand.New(rand.NewPCG(27, 1))
	dir := t.TempDir()
	voices := []string{"rms", "slt", "kal16"}
	var x []float32
	var texts []string
	var starts []int // where each sentence starts in x
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
		starts = append(starts, len(x))
		x = append(x, y[lo:hi]...)
		texts = append(texts, s)
	}
	for i := range x {
		x[i] += float32(rng.NormFloat64() * 0.01) // noise about 20 dB below the speech, throughout
	}
	e := newEnv(t, "joins-"+*accuracyJoin, 3, []string{srv.Addr}, 5*time.Minute)
	wav := audio.EncodeWAV(audio.Clip{Rate: 16000, Samples: x})
	transcribe := func(key string, seconds float64) contract.Transcript {
		cfg := e.config()
		cfg.Audio.ChunkSeconds = seconds
		cfg.Audio.OverlapJoin = *accuracyJoin
		return e.transcribe(key, wav, cfg)
	}
	tr := transcribe("noisy.wav", chunkSeconds)
	tr2 := transcribe("noisy-other.wav", otherSeconds)
	// The joins are where the chunker cuts the samples the worker decodes.
	sent, err := audio.DecodeWAV(wav)
	if err != nil {
		t.Fatal(err)
	}
	joins, overlapped := joinsOf(sent.Samples, chunkSeconds)
	joins2, _ := joinsOf(sent.Samples, otherSeconds)
	var ref []string
	var times []float64 // each reference word's time in x, spread evenly over its sentence
	var voice []string  // each reference word's voice
	for i, s := range texts {
		words := wer.Normalize(s)
		end := len(x)
		if i+1 < len(starts) {
			end = starts[i+1]
		}
		for k := range words {
			times = append(times, (float64(starts[i])+(float64(k)+0.5)*float64(end-starts[i])/float64(len(words)))/16000)
			voice = append(voice, voices[i%len(voices)])
		}
		ref = append(ref, words...)
	}
	ne, nw, fe, fw := joinErrors(ref, tr.Words, joins)
	all, words := wer.Errors(strings.Join(texts, " "), tr.Text)
	errs := wordErrors(ref, tr.Words)
	errs2 := wordErrors(ref, tr2.Words)
	pw, pj, pu := joinCost(times, errs, errs2, joins, joins2)
	// Which voice the words near this run's joins are: the chunker cuts
	// at the quietest frames, which need not fall evenly among them.
	nearVoice := map[string]int{}
	nearAll := 0
	for i, at := range times {
		if nearAJoin(at, joins) {
			nearVoice[voice[i]]++
			nearAll++
		}
	}
	t.Logf("words within %.1f s of a join, by voice: %s %d, %s %d, %s %d (of %d; each voice speaks a third of the sentences)",
		joinWindow, voices[0], nearVoice[voices[0]], voices[1], nearVoice[voices[1]], voices[2], nearVoice[voices[2]], nearAll)
	t.Logf("%.1f min, %d chunks, %d joins (%d overlapped): WER %.3f; within %.1f s of a join %.3f (%d words), elsewhere %.3f (%d words); "+
		"paired with %g-s chunks: %d words near a join of one run and away from the other's: %.3f joined, %.3f not (%.2fx)",
		float64(len(x))/16000/60, tr.Chunks, len(joins), overlapped, float64(all)/float64(words), joinWindow,
		float64(ne)/float64(max(nw, 1)), nw, float64(fe)/float64(max(fw, 1)), fw,
		float64(otherSeconds), pw, float64(pj)/float64(max(pw, 1)), float64(pu)/float64(max(pw, 1)), float64(pj)/float64(max(pu, 1)))
	fmt.Printf("RESULT engine=%s join=%s minutes=%.1f joins=%d overlapped=%d wer=%.3f wer_near_joins=%.3f wer_elsewhere=%.3f words_near=%d "+
		"paired_words=%d wer_joined=%.3f wer_same_words_unjoined=%.3f join_cost=%.2f\n",
		*accuracyEngine, *accuracyJoin, float64(len(x))/16000/60, len(joins), overlapped, float64(all)/float64(words), float64(ne)/float64(max(nw, 1)), float64(fe)/float64(max(fw, 1)), nw,
		pw, float64(pj)/float64(max(pw, 1)), float64(pu)/float64(max(pw, 1)), float64(pj)/float64(max(pu, 1)))
	_ = os.Remove(filepath.Join(dir, "s.wav"))
}

// joinsOf is where the worker's chunker cuts samples with an overlap: the
// middle of each overlap, in seconds; and how many chunks overlap their
// predecessor.
func joinsOf(samples []float32, chunkSeconds float64) (joins []float64, overlapped int) {
	for _, c := range audio.Split(samples, audio.ChunkSplit(modelspec.SampleRate, chunkSeconds, audio.StitchOverlap)) {
		if c.Offset > 0 {
			joins = append(joins, (float64(c.Offset)+float64(c.Overlap)/2)/16000)
		}
		if c.Overlap > 0 {
			overlapped++
		}
	}
	return joins, overlapped
}

// wordErrors charges each reference word with its errors in hyp: one where
// it was not heard as said (substituted or deleted), and one for each word
// inserted after the hypothesis word it was heard as (before the first, to
// the first reference word).
func wordErrors(ref []string, hyp []contract.Word) []int {
	names := lowerWords(hyp)
	errs := make([]int, len(ref))
	owner := make([]int, len(hyp)) // the reference word a hypothesis word was aligned with, or -1
	for j := range owner {
		owner[j] = -1
	}
	for i, j := range wer.Align(ref, names) {
		if j < 0 || names[j] != ref[i] {
			errs[i]++
		}
		if j >= 0 {
			owner[j] = i
		}
	}
	last := 0
	for _, i := range owner {
		if i >= 0 {
			last = i
		} else if len(errs) > 0 {
			errs[last]++
		}
	}
	return errs
}

// joinCost pairs the reference words (at times) near a join of one
// recording and further than joinWindow from every join of the other:
// their errors where joined (errsA near joinsA, or errsB near joinsB)
// against the same words' errors in the other recording.
func joinCost(times []float64, errsA, errsB []int, joinsA, joinsB []float64) (words, joined, unjoined int) {
	for i, t := range times {
		a, b := nearAJoin(t, joinsA), nearAJoin(t, joinsB)
		switch {
		case a && !b:
			words, joined, unjoined = words+1, joined+errsA[i], unjoined+errsB[i]
		case b && !a:
			words, joined, unjoined = words+1, joined+errsB[i], unjoined+errsA[i]
		}
	}
	return words, joined, unjoined
}

// nearAJoin is whether t is within joinWindow seconds of one of joins.
func nearAJoin(t float64, joins []float64) bool {
	for _, j := range joins {
		if math.Abs(t-j) <= joinWindow {
			return true
		}
	}
	return false
}

// lowerWords is hyp's words in lower case, as the reference is.
func lowerWords(hyp []contract.Word) []string {
	names := make([]string, len(hyp))
	for i, w := range hyp {
		names[i] = strings.ToLower(w.Word)
	}
	return names
}
