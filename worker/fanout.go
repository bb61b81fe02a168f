package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/subtitle"
	"github.com/fleetscribe/fleetscribe/triton"
)

// chunkSpan is where a chunk lies in the recording, in samples at
// modelRate: what stitching needs once its samples are gone.
type chunkSpan struct{ offset, length, overlap int }

// fanout sends a recording's chunks to the partitions as they come, at most
// ChunkParallelism at once (send blocks beyond that, which holds back the
// decoding that feeds it), and collects their results in order.
type fanout struct {
	w       *Worker
	ctx     context.Context
	cancel  context.CancelCauseFunc
	g       *errgroup.Group
	infer   inference
	spans   []chunkSpan
	results []*triton.Result // each written by its request alone
	diar    *diarization     // nil: no speakers asked for
}

func (w *Worker) newFanout(ctx context.Context, infer inference) *fanout {
	ctx, cancel := context.WithCancelCause(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(w.cfg.Audio.ChunkParallelism)
	return &fanout{w: w, ctx: gctx, cancel: cancel, g: g, infer: infer}
}

// samplesFrom says where a chunk's samples came from: fromPool, getFloats
// (the fanout's to level in place, back to the pool after the request), or
// fromRecording, a slice of the recording.
type samplesFrom bool

const (
	fromPool      samplesFrom = true
	fromRecording samplesFrom = false
)

// chunkPlace says whether a chunk is the recording's last: diarization
// then asks for the final labels with it (one request fewer).
type chunkPlace bool

const (
	lastChunk  chunkPlace = true
	moreChunks chunkPlace = false
)

// send transcribes chunk c in its own goroutine. Samples from the pool are
// levelled in place and go back to the pool after the request; a slice of
// the recording is levelled in place unless shared (another chunk overlaps
// it), then on a copy. place says whether c is the recording's last.
func (f *fanout) send(c audio.Chunk, from samplesFrom, shared bool, place chunkPlace) error {
	pooled := from == fromPool
	i := len(f.spans)
	f.spans = append(f.spans, chunkSpan{offset: c.Offset, length: len(c.Samples), overlap: c.Overlap})
	r := new(triton.Result)
	f.results = append(f.results, r)
	if len(c.Samples) == 0 {
		if pooled {
			putFloats(c.Samples)
		}
		return nil
	}
	if err := f.ctx.Err(); err != nil {
		// A chunk has failed, or the job was cancelled: send no more.
		if pooled {
			putFloats(c.Samples)
		}
		if err := f.g.Wait(); err != nil {
			return err
		}
		return context.Cause(f.ctx)
	}
	if f.diar != nil {
		// Diarization hears the chunk once: not the second of audio it
		// shares with the chunk before. A pooled chunk is levelled in place
		// by its request: diarization gets a copy.
		var err error
		if rest := c.Samples[c.Overlap:]; pooled {
			err = f.diar.pushCopy(c.Offset+c.Overlap, rest, place)
		} else {
			err = f.diar.push(diarizeChunk{offset: c.Offset + c.Overlap, samples: rest, last: place == lastChunk})
		}
		if err != nil {
			if pooled {
				putFloats(c.Samples)
			}
			return err
		}
	}
	f.g.Go(func() error {
		if pooled {
			defer putFloats(c.Samples)
		}
		// Samples diarization reads as well are levelled on a copy.
		return f.w.inferChunk(f.ctx, f.infer, i, c.Samples, r, !pooled && (shared || f.diar != nil))
	})
	return nil
}

// wait returns once every request has, with the first error.
func (f *fanout) wait() error {
	defer f.cancel(nil)
	return f.g.Wait()
}

// inferChunk levels samples (on a copy when copyFirst) and transcribes
// them into r.
func (w *Worker) inferChunk(ctx context.Context, infer inference, i int, samples []float32, r *triton.Result, copyFirst bool) (err error) {
	// errgroup does not recover: a panic here would end the process with
	// every job in hand.
	defer func() {
		if p := recover(); p != nil {
			err = recoverError(p)
		}
	}()
	if w.cfg.Audio.Normalize {
		if copyFirst {
			samples = append([]float32(nil), samples...)
		}
		if _, err := audio.Normalize(samples); err != nil {
			return Permanent(contract.ClassCorruptAudio, fmt.Errorf("chunk %d: %w", i, err))
		}
	}
	res, err := w.tr.Transcribe(ctx, triton.Request{Samples: samples, Timestamps: w.cfg.Audio.Timestamps, Model: infer.model, Priority: infer.priority, Vocabulary: infer.vocabulary})
	if err != nil {
		switch {
		case errors.Is(err, triton.ErrRejected):
			return Permanent(contract.ClassRejected, fmt.Errorf("chunk %d: %w", i, err))
		case errors.Is(err, triton.ErrPoisonInput):
			// The model's own message names what failed; it carries no
			// audio and no transcript.
			return Permanent(contract.ClassModelFailed, fmt.Errorf("chunk %d (%.2f s of audio): %w", i, float64(len(samples))/modelRate, err))
		case errors.Is(err, triton.ErrServerFault) && ctx.Err() == nil:
			if _, ok := w.tr.(inferenceProber); ok {
				// Faults on every attempt: the partitions may all be
				// down; the job waits on the canary's verdict.
				err = &unreachableError{dep: depInference, key: strconv.Itoa(i), err: err}
			}
		}
		return fmt.Errorf("transcribe chunk %d: %w", i, err)
	}
	*r = res
	infer.prog.done.Add(1)
	return nil
}

// splitConfig is how this worker cuts recordings (audio.ChunkSplit):
// chunks overlap where no pause was found only when word times let the
// overlap be resolved.
func (w *Worker) splitConfig() audio.SplitConfig {
	var overlap time.Duration
	if w.cfg.Audio.Timestamps {
		overlap = audio.StitchOverlap
	}
	return audio.ChunkSplit(modelRate, w.cfg.Audio.ChunkSeconds, overlap)
}

// transcribeSamples splits samples (at modelRate) at quiet points, transcribes
// the chunks in parallel and stitches the results in order with absolute
// timestamps; a job that asks for speakers has them diarized meanwhile.
func (w *Worker) transcribeSamples(ctx context.Context, samples []float32, infer inference) (contract.Transcript, spoken, error) {
	chunks := audio.Split(samples, w.splitConfig())
	infer.prog.total.Store(int64(len(chunks)))
	// The recording is in memory: diarization may queue every chunk, and
	// transcription never waits for it.
	d := w.startDiarization(ctx, infer, len(chunks))
	tr, err := w.inferChunks(ctx, samples, chunks, infer, d)
	return tr, d.end(infer, err), err
}

func (w *Worker) inferChunks(ctx context.Context, samples []float32, chunks []audio.Chunk, infer inference, d *diarization) (contract.Transcript, error) {
	if len(chunks) == 1 {
		// A short recording: no goroutine for its one chunk.
		var r triton.Result
		if len(samples) > 0 {
			if d != nil {
				if err := d.push(diarizeChunk{samples: samples, last: true}); err != nil {
					return contract.Transcript{}, err
				}
			}
			if err := w.inferChunk(ctx, infer, 0, samples, &r, d != nil); err != nil {
				return contract.Transcript{}, err
			}
		}
		return stitch([]chunkSpan{{length: len(samples)}}, []*triton.Result{&r}, len(samples), w.cfg.Audio.OverlapJoin), nil
	}
	f := w.newFanout(ctx, infer)
	f.diar = d
	for i, c := range chunks {
		// Overlapping chunks share samples and are sent at once: each
		// levels its own copy.
		shared := c.Overlap > 0 || i+1 < len(chunks) && chunks[i+1].Overlap > 0
		place := moreChunks
		if i == len(chunks)-1 {
			place = lastChunk
		}
		if err := f.send(c, fromRecording, shared, place); err != nil {
			return contract.Transcript{}, f.abort(err)
		}
	}
	if err := f.wait(); err != nil {
		return contract.Transcript{}, err
	}
	return stitch(f.spans, f.results, len(samples), w.cfg.Audio.OverlapJoin), nil
}

// How two overlapping chunks' words are joined (-overlap-join).
const (
	// JoinAlign aligns the words both chunks heard in the overlap and hands
	// over at a word both heard (joinOverlap).
	JoinAlign = "align"
	// JoinMiddle keeps each chunk's words on its side of the overlap's
	// middle: the rule before alignment, kept to measure against.
	JoinMiddle = "middle"
)

// stitch joins the chunks' results into one transcript of total samples,
// with times from the recording's start; overlapping chunks are joined by
// rule (JoinAlign or JoinMiddle).
func stitch(spans []chunkSpan, results []*triton.Result, total int, rule string) contract.Transcript {
	t := contract.Transcript{Schema: contract.TranscriptSchema, Chunks: len(spans), DurationSec: float64(total) / modelRate}
	// Each chunk's words in recording time, and which of them it keeps:
	// [from[i], to[i]). Where two chunks overlap, the join decides.
	words := make([][]triton.Word, len(results))
	from, to := make([]int, len(results)), make([]int, len(results))
	for i, r := range results {
		off := float64(spans[i].offset) / modelRate
		words[i] = make([]triton.Word, len(r.Words))
		for k, wd := range r.Words {
			wd.Start += off
			wd.End += off
			words[i][k] = wd
		}
		to[i] = len(words[i])
	}
	for i := 0; i+1 < len(results); i++ {
		if spans[i+1].overlap > 0 {
			start := float64(spans[i+1].offset) / modelRate
			end := start + float64(spans[i+1].overlap)/modelRate
			if rule == JoinMiddle {
				to[i], from[i+1] = joinAtMiddle(words[i], words[i+1], (start+end)/2)
			} else {
				to[i], from[i+1] = joinOverlap(words[i], words[i+1], start, end)
			}
		}
	}
	var texts []string
	for i, r := range results {
		c := spans[i]
		kept := words[i][from[i]:max(from[i], to[i])] // a short chunk's joins may cross
		for _, wd := range kept {
			t.Words = append(t.Words, contract.Word{Word: wd.Word, Start: wd.Start, End: wd.End, Confidence: wd.Confidence})
		}
		text := strings.TrimSpace(r.Text)
		joined := c.overlap > 0 || i+1 < len(spans) && spans[i+1].overlap > 0
		if len(r.Words) > 0 && joined {
			// The chunk's own text would repeat the overlap.
			names := make([]string, len(kept))
			for k, wd := range kept {
				names[k] = wd.Word
			}
			text = strings.Join(names, " ")
		}
		if text != "" {
			texts = append(texts, text)
		}
		if len(r.Words) == 0 && text != "" {
			// No timings from the model: one segment per chunk.
			off := float64(c.offset) / modelRate
			t.Segments = append(t.Segments, contract.Segment{Start: off, End: off + float64(c.length)/modelRate, Text: text})
		}
	}
	t.Text = strings.Join(texts, " ")
	if len(t.Words) > 0 {
		t.Segments = subtitle.BuildSegments(t.Words)
	} else {
		t.Segments = subtitle.SplitSegments(t.Segments)
	}
	if t.Segments == nil {
		t.Segments = []contract.Segment{}
	}
	return t
}

// joinSlack is how far apart two chunks may time the same word (their
// middles, in seconds) and still be taken as one: each chunk hears the
// word in a different context, and recognisers time it differently by a
// tenth of a second or more.
const joinSlack = 0.5

// joinOverlap decides where two chunks that overlap in [lo, hi) (seconds
// of the recording) hand over: the first keeps a[:keepA], the second
// b[fromB:]. The words each heard around the overlap are aligned by text,
// a pair matching only where their times are within joinSlack; the
// handover is at the matched pair nearest the overlap's middle, the first
// chunk keeping that word and the second everything after its copy, so a
// word both heard is kept once whatever times each gave it. Where no word
// matches, each keeps the words whose middle lies on its side of the
// overlap's middle.
func joinOverlap(a, b []triton.Word, lo, hi float64) (keepA, fromB int) {
	mid := (lo + hi) / 2
	wmid := func(w triton.Word) float64 { return (w.Start + w.End) / 2 }
	// The words near the overlap: a's from the first ending past lo-slack,
	// b's up to the last starting before hi+slack.
	a0 := len(a)
	for a0 > 0 && a[a0-1].End > lo-joinSlack {
		a0--
	}
	b1 := 0
	for b1 < len(b) && b[b1].Start < hi+joinSlack {
		b1++
	}
	ta, tb := a[a0:], b[:b1]
	// Longest common subsequence of the two runs, by word and time.
	same := func(x, y triton.Word) bool {
		return sameWord(x.Word, y.Word) && math.Abs(wmid(x)-wmid(y)) <= joinSlack
	}
	n, m := len(ta), len(tb)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			switch {
			case same(ta[i], tb[j]):
				lcs[i][j] = lcs[i+1][j+1] + 1
			case lcs[i+1][j] >= lcs[i][j+1]:
				lcs[i][j] = lcs[i+1][j]
			default:
				lcs[i][j] = lcs[i][j+1]
			}
		}
	}
	bestA, bestB, bestD := -1, -1, math.Inf(1)
	for i, j := 0, 0; i < n && j < m; {
		switch {
		case same(ta[i], tb[j]) && lcs[i][j] == lcs[i+1][j+1]+1:
			if d := math.Abs((wmid(ta[i])+wmid(tb[j]))/2 - mid); d < bestD {
				bestA, bestB, bestD = i, j, d
			}
			i, j = i+1, j+1
		case lcs[i+1][j] >= lcs[i][j+1]:
			i++
		default:
			j++
		}
	}
	if bestA >= 0 {
		return a0 + bestA + 1, bestB + 1
	}
	return joinAtMiddle(a, b, mid)
}

// joinAtMiddle hands over at mid: the first chunk keeps the words whose
// middle lies before it, the second those from it on.
func joinAtMiddle(a, b []triton.Word, mid float64) (keepA, fromB int) {
	wmid := func(w triton.Word) float64 { return (w.Start + w.End) / 2 }
	keepA = len(a)
	for keepA > 0 && wmid(a[keepA-1]) >= mid {
		keepA--
	}
	for fromB < len(b) && wmid(b[fromB]) < mid {
		fromB++
	}
	return keepA, fromB
}

// sameWord reports whether two recognised words are one, whatever their
// case and the punctuation a recogniser attaches ("clear." and "Clear").
func sameWord(x, y string) bool {
	trim := func(s string) string {
		return strings.TrimFunc(s, func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
	}
	return strings.EqualFold(trim(x), trim(y))
}
