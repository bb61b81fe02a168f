package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/speakers"
	"github.com/fleetscribe/fleetscribe/subtitle"
	"github.com/fleetscribe/fleetscribe/triton"
)

// Who spoke: a job that asks for speakers sends its recording's chunks,
// in order, to the diarization model as well as to the speech model. The
// two run at once: the chunks go to transcription in parallel as they are
// cut, and to diarization one after another (each request carries the
// state the previous response returned, so any partition serves any
// chunk), fed through a queue of diarizeQueue chunks that holds back
// decoding when diarization falls behind. The turns, in recording time,
// are joined to the words once both are done (package speakers).
//
// A diarization failure never loses the transcript:
//
//   - refused by the model, or poison for it (the same failure on two
//     partitions that serve others): the transcript is written without
//     speakers, its speaker_error saying why;
//   - anything retryable (partitions down, overloaded past the job's
//     time): the job is retried, as a failed transcription is; on the
//     last receive the transcript is written with speaker_error
//     retries_exhausted instead;
//   - a worker without a diarization model writes the transcript with
//     speaker_error diarization_unavailable.

// diarizeQueue is how many chunks a recording's diarization may hold
// waiting, besides the one it sends: its memory, and how far decoding may
// run ahead of it.
const diarizeQueue = 2

// diarizeGap closes one speaker's gaps shorter than this across the seams
// between chunks (the diarizer closes them within a chunk).
const diarizeGap = 0.3

// diarization sends one recording's chunks to the diarization model in
// order. Its goroutine is owned by it: every diarization ends with finish
// or abort.
type diarization struct {
	w       *Worker
	ctx     context.Context
	infer   inference
	queue   chan diarizeChunk
	done    chan struct{}
	started time.Time
	// Written by the goroutine only, read after done is closed.
	err    error
	state  []byte
	turns  []triton.DiarizeTurn // in recording time, provisional speakers
	chunks int
	// labels are the final labels, when the last chunk brought them
	// (finished): finish then asks for none.
	labels   []int
	finished bool
}

// diarizeChunk is a chunk's samples at offset (samples at modelRate) in
// the recording; release, if any, gives its buffer back once it is sent.
// The last chunk of a recording is sent with the job's hints, and its
// response carries the final labels.
type diarizeChunk struct {
	offset  int
	samples []float32
	release func()
	last    bool
}

// startDiarization starts the diarization of one recording within ctx,
// holding up to queue chunks waiting (diarizeQueue for a streamed
// recording; all its chunks for one in memory, so that transcription never
// waits for it). It returns nil for a job that does not ask for speakers.
func (w *Worker) startDiarization(ctx context.Context, infer inference, queue int) *diarization {
	if !infer.speakers.On() || w.dz == nil {
		return nil
	}
	d := &diarization{w: w, ctx: ctx, infer: infer, queue: make(chan diarizeChunk, queue), done: make(chan struct{}), started: time.Now()}
	go d.run()
	return d
}

func (d *diarization) run() {
	defer close(d.done)
	for c := range d.queue {
		if d.err == nil && len(c.samples) > 0 {
			d.err = d.step(c)
		}
		if c.release != nil {
			c.release()
		}
	}
}

// step sends one chunk with the state so far (the last with the job's
// hints, for the final labels).
func (d *diarization) step(c diarizeChunk) error {
	req := triton.DiarizeRequest{Samples: c.samples, State: d.state, Priority: d.infer.priority}
	if c.last {
		req.Finish, req.MinSpeakers, req.MaxSpeakers = true, d.infer.speakers.Min, d.infer.speakers.Max
	}
	res, err := d.w.dz.Diarize(d.ctx, req)
	if err != nil {
		return diarizeError(fmt.Errorf("diarize chunk %d (%.2f s of audio at %.2f s): %w", d.chunks, float64(len(c.samples))/modelRate, float64(c.offset)/modelRate, err))
	}
	off := float64(c.offset) / modelRate
	for _, t := range res.Turns {
		d.turns = append(d.turns, triton.DiarizeTurn{Start: t.Start + off, End: t.End + off, Speaker: t.Speaker})
	}
	d.state = res.State
	d.chunks++
	if c.last {
		d.labels, d.finished = res.Labels, true
	}
	return nil
}

// push queues chunk c, waiting while the queue is full; c is released
// whatever happens.
func (d *diarization) push(c diarizeChunk) error {
	select {
	case d.queue <- c:
		return nil
	case <-d.ctx.Done():
		if c.release != nil {
			c.release()
		}
		return context.Cause(d.ctx)
	}
}

// pushCopy queues a pooled copy of samples at offset.
func (d *diarization) pushCopy(offset int, samples []float32, place chunkPlace) error {
	buf := append(getFloats(len(samples)), samples...)
	return d.push(diarizeChunk{offset: offset, samples: buf, release: func() { putFloats(buf) }, last: place == lastChunk})
}

// abort stops the diarization after a failed transcription, once the
// chunks queued are released.
func (d *diarization) abort() {
	close(d.queue)
	<-d.done
}

// finish waits for every chunk and returns the turns in recording time
// with their final labels: those the last chunk brought, or, where no
// chunk was known as the last, those of a finish request within the job's
// hints.
func (d *diarization) finish() ([]contract.SpeakerTurn, error) {
	close(d.queue)
	<-d.done
	defer func() { d.w.m.since(StageDiarize, d.started) }()
	if d.err != nil {
		return nil, d.err
	}
	if d.chunks == 0 {
		return nil, nil // no samples: nobody spoke
	}
	labels := d.labels
	if !d.finished {
		hints := d.infer.speakers
		res, err := d.w.dz.Diarize(d.ctx, triton.DiarizeRequest{State: d.state, Finish: true, MinSpeakers: hints.Min, MaxSpeakers: hints.Max, Priority: d.infer.priority})
		if err != nil {
			return nil, diarizeError(fmt.Errorf("diarize: final labels: %w", err))
		}
		labels = res.Labels
	}
	turns := make([]contract.SpeakerTurn, 0, len(d.turns))
	for _, t := range d.turns {
		if t.Speaker >= len(labels) || labels[t.Speaker] < 0 {
			return nil, fmt.Errorf("diarize: %w: turn of provisional speaker %d, which the final labels (%d) do not name", triton.ErrBadResponse, t.Speaker, len(labels))
		}
		turns = append(turns, contract.SpeakerTurn{Speaker: contract.SpeakerLabel(labels[t.Speaker]), Start: round3(t.Start), End: round3(t.End)})
	}
	return speakers.Join(turns, diarizeGap), nil
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// withSpeakers makes tr a transcript with speakers from turns: a speaker on
// every word, segments one speaker's each, turns and a summary.
func withSpeakers(tr *contract.Transcript, turns []contract.SpeakerTurn, info contract.Diarization) {
	tr.Schema = contract.TranscriptSchemaSpeakers
	speakers.Assign(tr.Words, turns)
	if len(tr.Words) > 0 {
		tr.Segments = subtitle.BuildSegments(tr.Words)
	}
	if turns == nil {
		turns = []contract.SpeakerTurn{}
	}
	tr.SpeakerTurns = turns
	tr.Speakers, info.OverlapSeconds = speakers.Summarize(tr.Words, turns)
	tr.Diarization = &info
}

// speakerInfo is how the job's speakers were asked for.
func (w *Worker) speakerInfo(infer inference) contract.Diarization {
	if infer.split {
		return contract.Diarization{Mode: contract.ModeChannels}
	}
	return contract.Diarization{Mode: contract.ModeSpeakers, Model: w.dzName, MinSpeakers: infer.speakers.Min, MaxSpeakers: infer.speakers.Max}
}

// diarized finishes a transcript that asked for speakers, from the
// diarization's outcome: with speakers, or without them and saying why
// (see the top of this file). A retryable failure before the last receive
// is returned: the job is retried.
func (t *task) diarized(tr *contract.Transcript, turns []contract.SpeakerTurn, err error) error {
	w := t.w
	info := w.speakerInfo(t.infer)
	if err == nil {
		withSpeakers(tr, turns, info)
		w.m.diarizations.WithLabelValues(OutcomeOK).Inc()
		return nil
	}
	class := ErrorClass(err)
	switch {
	case errors.Is(err, errNoDiarizer):
		class = contract.ClassDiarizationUnavailable
	case class == "" && t.d.attempt < w.cfg.Queues.MaxReceives:
		w.m.diarizations.WithLabelValues("retry").Inc()
		return err
	case class == "":
		class = contract.ClassExhausted
	}
	w.m.diarizations.WithLabelValues(class).Inc()
	t.log.Warn().Err(err).Str("error_class", class).Msg("diarization failed; the transcript is written without speakers")
	tr.Schema = contract.TranscriptSchemaSpeakers
	info.OverlapSeconds = 0
	tr.Diarization = &info
	tr.SpeakerError = &contract.SpeakerError{Class: class, Message: err.Error()}
	return nil
}

// spoken is what a transcription learned of its speakers: asked (the job
// asked for them), and the turns or why there are none.
type spoken struct {
	asked bool
	turns []contract.SpeakerTurn
	err   error
}

// end finishes d (nil: no diarization) after a transcription that ended
// with err: aborted when it failed, else its turns.
func (d *diarization) end(infer inference, err error) spoken {
	switch {
	case !infer.speakers.On():
		return spoken{}
	case d == nil:
		return spoken{asked: true, err: errNoDiarizer}
	case err != nil:
		d.abort()
		return spoken{}
	}
	turns, derr := d.finish()
	return spoken{asked: true, turns: turns, err: derr}
}

// errNoDiarizer: the worker has no diarization model.
var errNoDiarizer = errors.New("this worker serves no diarization model (-diarize-model)")

// diarizeError classifies a diarization request's failure as a chunk's
// transcription failure is: refused or poison is permanent.
func diarizeError(err error) error {
	switch {
	case errors.Is(err, triton.ErrRejected):
		return Permanent(contract.ClassRejected, err)
	case errors.Is(err, triton.ErrPoisonInput):
		return Permanent(contract.ClassModelFailed, err)
	}
	return err
}
