package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/triton"
)

// chunkSpan is where a chunk lies in the recording, in samples at
// ModelRate: what stitching needs once its samples are gone.
type chunkSpan struct{ offset, length, overlap int }

// fanout sends a recording's chunks to the partitions as they come, at most
// ChunkParallelism at once (send blocks beyond that, which holds back the
// decoding that feeds it), and collects their results in order.
type fanout struct {
	w       *Worker
	ctx     context.Context
	cancel  context.CancelCauseFunc
	g       *errgroup.Group
	model   string
	job     jobValues
	spans   []chunkSpan
	results []*triton.Result // each written by its request alone
}

func (w *Worker) newFanout(ctx context.Context, model string) *fanout {
	ctx, cancel := context.WithCancelCause(ctx)
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(w.cfg.ChunkParallelism)
	return &fanout{w: w, ctx: gctx, cancel: cancel, g: g, model: model, job: jobFrom(ctx)}
}

// send transcribes chunk c in its own goroutine. pooled: c.Samples came
// from getFloats, is the fanout's to level in place, and goes back to the
// pool after the request. Otherwise c.Samples is levelled in place unless
// shared (another chunk overlaps it), then on a copy.
func (f *fanout) send(c audio.Chunk, pooled, shared bool) error {
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
	f.g.Go(func() error {
		if pooled {
			defer putFloats(c.Samples)
		}
		return f.w.transcribeChunk(f.ctx, f.job, i, c.Samples, f.model, r, !pooled && shared)
	})
	return nil
}

// wait returns once every request has, with the first error.
func (f *fanout) wait() error {
	defer f.cancel(nil)
	return f.g.Wait()
}

// transcribeChunk levels samples (on a copy when copyFirst) and transcribes
// them into r.
func (w *Worker) transcribeChunk(ctx context.Context, job jobValues, i int, samples []float32, model string, r *triton.Result, copyFirst bool) (err error) {
	// errgroup does not recover: a panic here would end the process with
	// every job in hand.
	defer func() {
		if p := recover(); p != nil {
			err = recoverError(p)
		}
	}()
	if w.cfg.Normalize {
		if copyFirst {
			samples = append([]float32(nil), samples...)
		}
		if _, err := audio.Normalize(samples); err != nil {
			return Permanent(ClassCorruptAudio, fmt.Errorf("chunk %d: %w", i, err))
		}
	}
	res, err := w.tr.Transcribe(ctx, triton.Request{Samples: samples, Timestamps: w.cfg.Timestamps, Model: model, Priority: job.priority})
	if err != nil {
		if errors.Is(err, triton.ErrRejected) {
			return Permanent(ClassRejected, fmt.Errorf("chunk %d: %w", i, err))
		}
		return fmt.Errorf("transcribe chunk %d: %w", i, err)
	}
	*r = res
	job.prog.done.Add(1)
	return nil
}

// splitConfig is how recordings are cut: at pauses, into chunks of at most
// ChunkSeconds, overlapping by a second where no pause was found to cut at
// when word times let the overlap be resolved (stitch keeps each word
// once).
func (w *Worker) splitConfig() audio.SplitConfig {
	overlap := 0
	if w.cfg.Timestamps {
		overlap = ModelRate
	}
	return audio.SplitConfig{Max: int(w.cfg.ChunkSeconds * ModelRate), Frame: ModelRate * 30 / 1000, Overlap: overlap}
}

// transcribe splits samples (at ModelRate) at quiet points, transcribes
// the chunks in parallel and stitches the results in order with absolute
// timestamps.
func (w *Worker) transcribe(ctx context.Context, samples []float32, model string) (Transcript, error) {
	chunks := audio.Split(samples, w.splitConfig())
	job := jobFrom(ctx)
	job.prog.total.Store(int64(len(chunks)))
	if len(chunks) == 1 {
		// A short recording: no goroutine for its one chunk.
		var r triton.Result
		if len(samples) > 0 {
			if err := w.transcribeChunk(ctx, job, 0, samples, model, &r, false); err != nil {
				return Transcript{}, err
			}
		}
		return stitch([]chunkSpan{{length: len(samples)}}, []*triton.Result{&r}, len(samples)), nil
	}
	f := w.newFanout(ctx, model)
	for i, c := range chunks {
		// Overlapping chunks share samples and are sent at once: each
		// levels its own copy.
		shared := c.Overlap > 0 || i+1 < len(chunks) && chunks[i+1].Overlap > 0
		if err := f.send(c, false, shared); err != nil {
			return Transcript{}, err
		}
	}
	if err := f.wait(); err != nil {
		return Transcript{}, err
	}
	return stitch(f.spans, f.results, len(samples)), nil
}

// stitch joins the chunks' results into one transcript of total samples,
// with times from the recording's start.
func stitch(spans []chunkSpan, results []*triton.Result, total int) Transcript {
	t := Transcript{Schema: TranscriptSchema, Chunks: len(spans), DurationSec: float64(total) / ModelRate}
	var texts []string
	for i, r := range results {
		c := spans[i]
		off := float64(c.offset) / ModelRate
		// Where chunks overlap, each keeps the words whose middle lies on
		// its side of the overlap's middle: none doubled, none lost.
		lo, hi := math.Inf(-1), math.Inf(1)
		if c.overlap > 0 {
			lo = (float64(c.offset) + float64(c.overlap)/2) / ModelRate
		}
		if i+1 < len(spans) && spans[i+1].overlap > 0 {
			hi = (float64(spans[i+1].offset) + float64(spans[i+1].overlap)/2) / ModelRate
		}
		var kept []string
		for _, wd := range r.Words {
			wd.Start += off
			wd.End += off
			if mid := (wd.Start + wd.End) / 2; mid < lo || mid >= hi {
				continue
			}
			t.Words = append(t.Words, wd)
			kept = append(kept, wd.Word)
		}
		text := strings.TrimSpace(r.Text)
		if len(r.Words) > 0 && (lo > math.Inf(-1) || hi < math.Inf(1)) {
			text = strings.Join(kept, " ") // the chunk's own text would repeat the overlap
		}
		if text != "" {
			texts = append(texts, text)
		}
		if len(r.Words) == 0 && text != "" {
			// No timings from the model: one segment per chunk.
			end := off + float64(c.length)/ModelRate
			t.Segments = append(t.Segments, Segment{Start: off, End: end, Text: text})
		}
	}
	t.Text = strings.Join(texts, " ")
	if len(t.Words) > 0 {
		t.Segments = BuildSegments(t.Words)
	} else {
		t.Segments = SplitSegments(t.Segments)
	}
	if t.Segments == nil {
		t.Segments = []Segment{}
	}
	return t
}
