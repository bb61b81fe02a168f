package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
)

// A recording is transcribed whole from its first read when that read
// holds all of it and it is plain WAV (transcribeObject), else streamed.
//
// A recording longer than its first read streams: its bytes are decoded
// as they arrive, resampled, cut into chunks and sent, so that a job holds
// the chunks in flight and a few blocks, never the whole recording. A
// 2-hour 44.1 kHz stereo WAV is 1.3 GB; its job peaks at tens of MB.

// streamBlock is how many samples are decoded at a time.
const streamBlock = 1 << 15

// streamBytes bounds what a streaming job holds besides its chunks: the
// decoder's block and buffers, the resampler's and splitter's windows.
func (w *Worker) streamBytes() int64 {
	chunk := int64(w.cfg.Audio.ChunkSeconds * modelRate * 4)
	return 3*chunk + 16*streamBlock + 2<<20
}

// streamed is what a streamed job reads: its job, its input (which the
// reader keeps as it reads the rest), the object's first read and what
// that read says the recording is.
type streamed struct {
	job  contract.Job
	in   *contract.InputRef
	head []byte
	info audio.Info
	// channel: one channel alone (0 first), or all mixed down (mixed).
	channel int
	// channels is how many the recording has, once opened (a split job's).
	channels int
}

// mixed is streamed.channel of a recording mixed down to mono.
const mixed = -1

// transcribeStream transcribes a job's input from its first read on,
// reading the rest as it goes, and diarizes it meanwhile when the job
// asks for speakers. opening is how long the first read took: the fetch
// stage is it and the reads of the rest.
func (w *Worker) transcribeStream(ctx context.Context, s *streamed, infer inference, opening time.Duration) (contract.Transcript, spoken, error) {
	d := w.startDiarization(ctx, infer, diarizeQueue)
	tr, err := w.streamChunks(ctx, s, infer, opening, d)
	return tr, d.end(infer, err), err
}

func (w *Worker) streamChunks(ctx context.Context, s *streamed, infer inference, opening time.Duration, d *diarization) (contract.Transcript, error) {
	in, info := s.in, s.info
	body := &inputReader{w: w, ctx: ctx, job: s.job, in: in, head: s.head, spent: opening}
	defer body.close()
	start := time.Now()
	var src audio.Stream
	var err error
	if s.channel == mixed {
		src, err = audio.OpenStream(ctx, body, in.Size, w.ffmpeg)
	} else {
		src, err = audio.OpenChannel(ctx, body, in.Size, w.ffmpeg, s.channel)
	}
	if err != nil {
		return contract.Transcript{}, audioError(err)
	}
	defer func() { _ = src.Close() }()
	s.channels = audio.ChannelCount(src)
	rs := audio.NewResampler(src.Rate(), modelRate)
	sp := audio.NewSplitter(w.splitConfig())
	f := w.newFanout(ctx, infer)
	f.diar = d
	prog := infer.prog
	// Chunks to come, from the header (an overestimate for formats whose
	// length is guessed from their size), until the last is cut.
	estimate := int64(min(info.Duration(), w.cfg.Inputs.MaxAudioSeconds)/w.cfg.Audio.ChunkSeconds) + 1
	prog.total.Store(estimate)
	limit := int64(w.cfg.Inputs.MaxAudioSeconds * modelRate)
	block := getFloats(streamBlock)[:streamBlock]
	defer putFloats(block)
	var (
		out        []float32
		total      int64
		decoding   = time.Since(start)
		resampling time.Duration
		inferring  time.Time
	)
	for eof := false; !eof; {
		t := time.Now()
		n, err := src.Read(block)
		decoding += time.Since(t)
		switch {
		case errors.Is(err, io.EOF):
			eof = true
		case err != nil:
			return contract.Transcript{}, f.abort(audioError(err))
		}
		t = time.Now()
		out = rs.Write(out[:0], block[:n])
		if eof {
			out = rs.Flush(out)
		}
		resampling += time.Since(t)
		if total += int64(len(out)); total > limit {
			return contract.Transcript{}, f.abort(Permanentf(contract.ClassTooLarge, "recording is longer than the limit of %.0f s", w.cfg.Inputs.MaxAudioSeconds))
		}
		sp.Write(out)
		// Each chunk is sent once the next is cut (or the recording has
		// ended), so the last is known as the last.
		c, ok := sp.Next(eof)
		for ok {
			if inferring.IsZero() {
				inferring = time.Now()
			}
			// The splitter's samples are its own until its next Write.
			c.Samples = append(getFloats(len(c.Samples)), c.Samples...)
			next, more := sp.Next(eof)
			place := moreChunks
			if eof && !more {
				place = lastChunk
			}
			if err := f.send(c, fromPool, false, place); err != nil {
				return contract.Transcript{}, f.abort(err)
			}
			prog.total.Store(max(estimate, int64(len(f.spans))))
			c, ok = next, more
		}
	}
	if err := f.wait(); err != nil {
		return contract.Transcript{}, err
	}
	prog.total.Store(int64(len(f.spans)))
	w.m.observe(StageFetch, body.spent)
	// Decoding pulled the bytes it read: those reads are the fetch stage's.
	w.m.observe(StageDecode, max(0, decoding-(body.spent-opening)))
	w.m.observe(StageResample, resampling)
	if !inferring.IsZero() {
		w.m.since(StageInfer, inferring)
	}
	if total == 0 {
		return contract.Transcript{}, Permanentf(contract.ClassEmptyAudio, "recording has a valid header but no samples")
	}
	tr := stitch(f.spans, f.results, int(total), w.cfg.Audio.OverlapJoin)
	tr.SampleRate = src.Rate()
	return tr, nil
}

// abort stops the requests in flight after err and returns it once they
// have returned.
func (f *fanout) abort(err error) error {
	f.cancel(err)
	_ = f.g.Wait()
	return err
}

// inputReader reads an input from its first bytes (read already) on,
// resuming a read that broke where it stopped. Every GET is of exactly the
// version checked (its version ID, or If-Match on its ETag), so an object
// overwritten meanwhile fails the job instead of mixing two uploads.
type inputReader struct {
	w       *Worker
	ctx     context.Context
	job     contract.Job
	in      *contract.InputRef
	head    []byte
	pos     int64
	body    io.ReadCloser
	resumes int
	spent   time.Duration // in reads: the fetch stage
}

// maxResumes is how many broken reads one job resumes.
const maxResumes = 3

func (r *inputReader) Read(p []byte) (int, error) {
	switch {
	case len(p) == 0:
		return 0, nil
	case r.pos < int64(len(r.head)):
		n := copy(p, r.head[r.pos:])
		r.pos += int64(n)
		return n, nil
	case r.pos >= r.in.Size:
		return 0, io.EOF
	}
	start := time.Now()
	defer func() { r.spent += time.Since(start) }()
	for {
		if r.body == nil {
			obj, err := r.w.in.get(r.ctx, r.job, r.in, fmt.Sprintf("bytes=%d-", r.pos))
			if err != nil {
				return 0, err
			}
			r.body = obj.Body
		}
		n, err := r.body.Read(p[:min(int64(len(p)), r.in.Size-r.pos)])
		r.pos += int64(n)
		switch {
		case err == nil && (n > 0 || r.pos < r.in.Size):
			return n, nil
		case r.pos >= r.in.Size:
			r.close()
			return n, nil // (io.EOF on the next call)
		}
		// The connection broke, or the body ended early: resume here.
		r.close()
		if errors.Is(err, io.EOF) || err == nil {
			err = io.ErrUnexpectedEOF
		}
		if r.ctx.Err() != nil || r.resumes >= maxResumes {
			return n, fmt.Errorf("read input at byte %d of %d: %w", r.pos, r.in.Size, err)
		}
		r.resumes++
		if n > 0 {
			return n, nil
		}
	}
}

func (r *inputReader) close() {
	if r.body != nil {
		_ = r.body.Close()
		r.body = nil
	}
}

// transcribeObject decodes, resamples and transcribes a whole input read
// in one piece (and diarizes it, when the job asks for speakers). opening
// is how long that read took.
func (w *Worker) transcribeObject(ctx context.Context, data []byte, infer inference, opening time.Duration) (contract.Transcript, spoken, error) {
	w.m.observe(StageFetch, opening)
	start := time.Now()
	clip, err := audio.DecodeContext(ctx, data, getFloats(len(data)/2), w.ffmpeg)
	if err != nil {
		return contract.Transcript{}, spoken{}, audioError(err)
	}
	// Every chunk request has returned once transcribe does.
	defer putFloats(clip.Samples)
	if len(clip.Samples) == 0 {
		return contract.Transcript{}, spoken{}, Permanentf(contract.ClassEmptyAudio, "recording has a valid header but no samples")
	}
	if d := float64(len(clip.Samples)) / float64(clip.Rate); d > w.cfg.Inputs.MaxAudioSeconds {
		return contract.Transcript{}, spoken{}, Permanentf(contract.ClassTooLarge, "recording is %.0f s long, limit is %.0f s", d, w.cfg.Inputs.MaxAudioSeconds)
	}
	w.m.since(StageDecode, start)
	start = time.Now()
	rate := clip.Rate
	samples := audio.Resample(clip.Samples, clip.Rate, modelRate)
	w.m.since(StageResample, start)
	start = time.Now()
	t, heard, err := w.transcribeSamples(ctx, samples, infer)
	if err != nil {
		return contract.Transcript{}, heard, err
	}
	w.m.since(StageInfer, start)
	t.SampleRate = rate
	return t, heard, nil
}

func audioError(err error) error {
	var fe *audio.FormatError
	switch {
	case errors.Is(err, audio.ErrTooLong):
		return Permanent(contract.ClassTooLarge, err)
	case errors.Is(err, audio.ErrUnsupported):
		return Permanent(contract.ClassUnsupported, err)
	case errors.As(err, &fe):
		return Permanent(contract.ClassCorruptAudio, err)
	}
	// ffmpeg could not run, or was cancelled: not the recording's fault.
	return err
}
