package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

// modelRate is the sample rate the model takes (the contract's).
const modelRate = modelspec.SampleRate

// A job's walk, top to bottom: each stage is a method of task, run in this
// order by run; the first stage that ends the job returns its outcome.
//
//	policy      the input, output prefix and model the job asks for are allowed
//	open        one GET: the input's first bytes, ETag, version and size
//	superseded  the input was overwritten since the job was queued: skip
//	skipIfDone  one HEAD: the transcript exists already: skip
//	limits      size and length within the configured limits
//	claim       no other message is doing the same input right now
//	admit       the job's memory fits the worker's budget (waits until it does)
//	provisional on the last receive, an error record first, in case the
//	            process dies
//	transcribe  decode, resample, chunk, infer, stitch
//	write       formats, then the JSON transcript; the error record goes
//
// fail then turns an error into the job's outcome: retry, release, or an
// error record.
//
// S3 requests of a short recording: one GET (the object, with its ETag
// and version), one HEAD (is the transcript there already), one PUT (the
// transcript) and one DELETE (an error record of an earlier delivery, if
// any: free, where a HEAD to look first is not).

// task is one job of a message, from the queue to its outcome.
type task struct {
	w     *Worker
	log   zerolog.Logger
	d     *delivery // the message's receipt: id, body, attempt
	index int       // the job's record in the message
	job   contract.Job
	infer inference // model, Triton priority, progress
	// hold is the message's context: it outlives -job-timeout, so a job
	// that waits for a bucket that is down keeps its work (outage.go).
	hold context.Context
	// rejected: the message is at fault (policy), not the input; its
	// record goes under the message's key.
	rejected bool
	computed bool // a transcription was computed

	prefix    string            // output prefix: the job's, else the worker's
	in        contract.InputRef // filled in from S3 as the job learns it
	keys      contract.OutputKeys
	obj       opened        // the first read
	opening   time.Duration // how long the first read took
	info      audio.Info    // what the first read says the recording is
	streaming bool          // read and decoded as it goes, not whole
	done      []func()      // releases, run when the walk ends (last first)
}

// inference is what a job's chunk requests carry: the model, the queue's
// Triton priority, and where the job counts its chunks.
type inference struct {
	model    string
	priority uint64
	prog     *progress
	// speakers: diarize, with these hints (nil: no); split: each channel
	// transcribed alone, its own speaker.
	speakers *contract.SpeakerHints
	split    bool
	// vocabulary: the job's phrases, sent with every chunk (nil: none).
	vocabulary []string
}

// jobResult is what a job came to: built where its walk ends (walk, with
// fail's record) and reported once, by runJob (metrics and the "job
// done" line).
type jobResult struct {
	outcome string
	// err is the retryable error the job ends with (nil: it is terminal:
	// transcript written, error record written, already done or taken).
	err error
	// cause is the error that stopped the walk, for the log (nil: none);
	// class, final and errorKey say what record it left, where one was
	// written.
	cause    error
	class    string
	final    bool
	errorKey string
	// again: a dependency the walk waited for is back; walk again.
	again bool
}

// runJob processes record index of delivery d, job, to an outcome. It
// returns nil when the job is terminal (transcript written, error record
// written, already done or taken by another message), and a retryable
// error otherwise. On the last receive a retryable failure is recorded too
// (final=false), and the queue's redrive policy moves the message to the
// DLQ. Each walk has -job-timeout; a walk stopped by a bucket that is down
// waits for it and walks again, within ctx (the message's).
func (w *Worker) runJob(ctx context.Context, log zerolog.Logger, d *delivery, index int, job contract.Job) error {
	start := w.now()
	r := w.walkJob(ctx, log, d, index, job)
	took := w.now().Sub(start)
	w.m.jobs.WithLabelValues(r.outcome).Inc()
	w.m.duration.WithLabelValues(r.outcome).Observe(took.Seconds())
	ev := log.Info()
	if r.cause != nil {
		ev = log.Warn().Err(r.cause)
	}
	if r.class != "" {
		ev = ev.Str("error_class", r.class).Bool("final", r.final).Str("error_key", r.errorKey)
	}
	ev.Str("outcome", r.outcome).Dur("took", took).Msg("job done")
	return r.err
}

// walkJob walks the job until it comes to a result: again while a
// dependency it waited for comes back. A panic is a retry.
func (w *Worker) walkJob(ctx context.Context, log zerolog.Logger, d *delivery, index int, job contract.Job) (r jobResult) {
	defer func() {
		if p := recover(); p != nil {
			err := recoverError(p)
			log.Error().Err(err).Msg("job panicked")
			r = jobResult{outcome: OutcomeRetry, err: err, cause: err}
		}
	}()
	for {
		t := &task{
			w: w, log: log, d: d, index: index, job: job, prefix: w.cfg.Outputs.Prefix, hold: ctx,
			infer: inference{model: w.model, priority: d.priority, prog: d.prog},
			in:    contract.InputRef{Bucket: job.Bucket, Key: job.Key, ETag: job.ETag, VersionID: job.VersionID},
		}
		if r = t.walk(); !r.again {
			return r
		}
		// The bucket it waited for is back: walk again (a transcript
		// computed before is written by write's own wait, not here).
		w.m.outage.reruns.WithLabelValues(strconv.FormatBool(t.computed)).Inc()
		log.Info().Bool("computed_before", t.computed).Msg("dependency back; running the job again")
	}
}

// walk runs the stages once, under -job-timeout, and settles how they
// ended: an outcome; a wait for a dependency that was down and is back
// (again); or the failure's result (fail), again where its record could
// not be written because a bucket was down and is back.
func (t *task) walk() jobResult {
	ctx, cancel := context.WithTimeoutCause(t.hold, t.w.cfg.Jobs.Timeout, errJobTimeout)
	defer cancel()
	outcome, err := t.run(ctx)
	if err == nil {
		return jobResult{outcome: outcome}
	}
	again, err := t.w.settle(t.hold, t.d, err)
	if again {
		return jobResult{again: true}
	}
	r := t.fail(ctx, err)
	r.again = errors.Is(r.err, errRecordUnwritten) && t.waitFor(r.err)
	return r
}

var (
	errJobTimeout      = errors.New("job timeout")
	errRecordUnwritten = errors.New("error record not written")
)

// waitFor reports whether err is a bucket that is down and has come back
// (the job should run again); it waits for it while it is down, within
// the message's context.
func (t *task) waitFor(err error) bool { return t.w.waitFor(t.hold, t.d, err) }

// run walks the stages. It returns the outcome of a job that ended, or
// the error that stopped it.
func (t *task) run(ctx context.Context) (string, error) {
	defer t.release()
	if err := t.policy(); err != nil {
		t.rejected = true
		return "", err
	}
	if err := t.openInput(ctx); err != nil {
		return "", err
	}
	if t.superseded() {
		t.log.Info().Msg("input changed since the job was queued; skipping")
		return OutcomeSuperseded, nil
	}
	switch done, err := t.skipIfDone(ctx); {
	case err != nil:
		return "", err
	case done:
		return OutcomeDuplicate, nil
	}
	if err := t.limits(); err != nil {
		return "", err
	}
	if err := t.vocabularyOf(ctx); err != nil {
		return "", err
	}
	switch won, err := t.claim(ctx); {
	case err != nil:
		return "", err
	case !won:
		return OutcomeClaimed, nil
	}
	if err := t.admit(ctx); err != nil {
		return "", err
	}
	if err := t.provisional(ctx); err != nil {
		return "", err
	}
	tr, err := t.transcribe(ctx)
	if err != nil {
		return "", err
	}
	t.computed = true
	if err := t.write(ctx, tr); err != nil {
		return "", err
	}
	return OutcomeOK, nil
}

// release runs the stages' releases (claim, memory, buffers), last first.
func (t *task) release() {
	for _, f := range slices.Backward(t.done) {
		f()
	}
}

// policy applies the input and output policy to a job from the queue:
// anyone who can send to the queue could otherwise make the worker read
// any bucket its role reaches or write anywhere in the output bucket.
// Only an allowed job's own model and output prefix are taken.
func (t *task) policy() error {
	w, job := t.w, t.job
	if !w.cfg.InputAllowed(job.Bucket, job.Key) {
		return Permanentf(contract.ClassBadMessage, "input s3://%s/%s is outside the allowed input buckets and prefixes", job.Bucket, job.Key)
	}
	if job.OutputPrefix != "" {
		if err := contract.CheckOutputPrefix(job.OutputPrefix); err != nil {
			return Permanent(contract.ClassBadMessage, err)
		}
		if !w.cfg.OutputPrefixAllowed(job.OutputPrefix) {
			return Permanentf(contract.ClassBadMessage, "output prefix %q is not under an allowed output prefix", job.OutputPrefix)
		}
	}
	if job.Model != "" && job.Model != w.model && !slices.Contains(w.cfg.Jobs.Models, job.Model) {
		return Permanentf(contract.ClassBadMessage, "job asks for model %q; this worker serves %s", job.Model, w.servedModels())
	}
	if job.Model != "" {
		t.infer.model = job.Model
	}
	if job.OutputPrefix != "" {
		t.prefix = job.OutputPrefix
	}
	return t.whoSpoke()
}

// whoSpoke takes the job's speakers and channels, or its queue's defaults
// where it says nothing, and refuses hints above the model's limit.
func (t *task) whoSpoke() error {
	job := t.job
	hints, channels := t.w.cfg.Speaker.For(t.d.queue)
	switch {
	case job.Speakers != nil:
		hints = job.Speakers
		if job.Channels == "" && hints.On() {
			channels = "" // the job's speakers over the queue's split
		}
	case job.Channels == contract.ChannelsSplit:
		hints = nil // the job's split over the queue's speakers
	}
	if job.Channels != "" {
		channels = job.Channels
	}
	if hints.On() {
		if limit := t.w.cfg.Speaker.Limit(); max(hints.Max, hints.Min) > limit {
			return Permanentf(contract.ClassBadMessage, "job asks for up to %d speakers; the diarization model separates at most %d", max(hints.Max, hints.Min), limit)
		}
		t.infer.speakers = hints
	}
	t.infer.split = channels == contract.ChannelsSplit
	return nil
}

func (w *Worker) servedModels() string {
	s := strconv.Quote(w.model)
	for _, m := range w.cfg.Jobs.Models {
		if m != w.model {
			s += ", " + strconv.Quote(m)
		}
	}
	return s
}

// openInput reads the input's first bytes and learns its ETag, version and
// size, and with them the job's output keys.
func (t *task) openInput(ctx context.Context) error {
	start := time.Now()
	obj, err := t.w.in.open(ctx, t.job)
	t.opening = time.Since(start)
	if err != nil {
		var perm *PermanentError
		if !errors.As(err, &perm) && ctx.Err() == nil {
			// The read failed but the object may be there: learn its ETag
			// from a HEAD (only on this path), so that a last attempt can
			// still leave its error record where the transcript would go.
			if h, herr := t.w.in.head(ctx, t.job); herr == nil {
				t.learn(h)
			}
		}
		return err
	}
	t.obj = obj
	t.done = append(t.done, func() { putBytes(obj.head) })
	t.learn(obj)
	return nil
}

// learn takes the input's identity from S3, and the output keys from it.
func (t *task) learn(o opened) {
	t.in.ETag, t.in.VersionID, t.in.Size = o.etag, o.version, o.size
	t.keys = contract.KeysFor(t.prefix, t.in, t.infer.model)
}

// superseded reports an input overwritten since its event: the new upload
// has its own event.
func (t *task) superseded() bool {
	return t.job.ETag != "" && t.job.VersionID == "" && strings.Trim(t.job.ETag, `"`) != t.obj.etag
}

// skipIfDone reports a job whose transcript exists. An error record is
// not looked for (one paid HEAD per job): a job that failed for good is
// computed again when a new message asks for it, and fails the same way.
func (t *task) skipIfDone(ctx context.Context) (bool, error) {
	done, err := t.w.out.exists(ctx, t.keys.JSON)
	if err != nil {
		return false, fmt.Errorf("check for existing transcript: %w", err)
	}
	if done {
		t.log.Info().Msg("job already has a transcript; nothing to do")
	}
	return done, nil
}

// limits refuses an input over the size limit, or over the length limit
// by what its header says. It learns the recording's format and length,
// and whether it streams.
func (t *task) limits() error {
	w := t.w
	if t.in.Size > w.cfg.Inputs.MaxObjectBytes {
		return Permanentf(contract.ClassTooLarge, "object is %d bytes, limit is %d", t.in.Size, w.cfg.Inputs.MaxObjectBytes)
	}
	info, err := headerInfo(t.obj.head, t.in.Size)
	if err != nil {
		return err
	}
	if d := info.Duration(); d > w.cfg.Inputs.MaxAudioSeconds && !info.Estimated {
		// (An estimated length, from the size of a compressed recording
		// ffmpeg reads, is checked after decoding instead.)
		return Permanentf(contract.ClassTooLarge, "recording is %.0f s long, limit is %.0f s", d, w.cfg.Inputs.MaxAudioSeconds)
	}
	t.info = info
	// A recording past the first read streams; so does any format but
	// plain WAV, whatever its size: ffmpeg reads it from a temporary file
	// either way, and decoded whole at its own rate (48 kHz for Opus) the
	// minutes of compressed speech in one read would take tens of MB.
	t.streaming = int64(len(t.obj.head)) < t.in.Size || info.Format != "wav" || info.Estimated
	return nil
}

// headerInfo learns the format and length of the input from its head.
func headerInfo(head []byte, size int64) (audio.Info, error) {
	if size == 0 {
		return audio.Info{}, Permanentf(contract.ClassCorruptAudio, "empty object")
	}
	info, err := audio.Probe(head, size)
	switch {
	case err == nil:
		return info, nil
	case errors.Is(err, audio.ErrHeaderBeyondPrefix):
		// An odd file with its header far in: assume the worst case the
		// decoder accepts (8-bit mono at 1 kHz) so admission stays safe.
		// Its length is checked as it decodes.
		return audio.Info{Format: "wav", Rate: 1000, Channels: 1, Frames: size, Estimated: true}, nil
	default:
		return audio.Info{}, audioError(err)
	}
}

// claim reports whether this message may do the job: false when another
// message for the same input holds it (see claimJob). Recordings shorter
// than ClaimMinAudio are not worth a claim's requests.
func (t *task) claim(ctx context.Context) (bool, error) {
	if t.info.Duration() < t.w.cfg.Claims.MinAudio.Seconds() {
		return true, nil
	}
	won, release, err := t.w.claimJob(ctx, t.log, t.keys, t.d.id)
	if err != nil {
		return false, err
	}
	if !won {
		t.log.Info().Msg("another message for this input is in progress; dropping this one")
		return false, nil
	}
	t.done = append(t.done, release)
	return true, nil
}

// admit waits until the job's memory fits the worker's budget.
func (t *task) admit(ctx context.Context) error {
	need := t.w.estimateMemory(t.in.Size, t.info, t.streaming)
	if t.infer.speakers.On() && t.streaming {
		// Chunks copied for diarization: those queued and the one it sends.
		need += (diarizeQueue + 1) * int64(t.w.cfg.Audio.ChunkSeconds*modelRate) * 4
	}
	release, err := t.w.gate.acquire(ctx, need)
	if err != nil {
		return err
	}
	t.done = append(t.done, release)
	return nil
}

// beforeTheLast leaves an error record when the attempt before the last
// fails and the job will be retried: a receive can be counted by the queue
// and never reach a worker (a response lost in transit), and if that
// receive is the last one the message goes to the DLQ with no attempt to
// write the record provisional would have. The last attempt overwrites
// this record, and a transcript removes it. A failed write only logs: the
// job is retried either way.
func (t *task) beforeTheLast(ctx context.Context, cause error) {
	w := t.w
	if t.d.attempt != w.cfg.Queues.MaxReceives-1 || t.keys.Error == "" || t.rejected || ctx.Err() != nil {
		return
	}
	rec := t.record(contract.ClassExhausted,
		fmt.Sprintf("attempt %d of %d failed (%v); this record remains only if the last receive never reached a worker", t.d.attempt, w.cfg.Queues.MaxReceives, cause))
	if err := w.out.errorRecord(ctx, t.keys.Error, rec); err != nil {
		t.log.Warn().Err(err).Msg("error record before the last attempt not written")
		return
	}
	// Another delivery of the input may have written its transcript and
	// removed the record before this one wrote it: looked for after the
	// write, a transcript written at any time is seen, here or by the
	// delivery that writes it.
	if done, err := w.out.exists(ctx, t.keys.JSON); err == nil && done {
		if err := w.out.remove(ctx, t.keys.Error); err != nil {
			t.log.Warn().Err(err).Msg("delete error record failed; the transcript supersedes it")
		}
	}
}

// record is an error record of the job's input (its model's), from this
// delivery's attempt; not final unless the caller says so.
func (t *task) record(class, message string) contract.ErrorRecord {
	rec := t.w.newRecord(t.d, class, message)
	rec.Input, rec.Model = t.in, t.infer.model
	return rec
}

// provisional leaves an error record before the last attempt: the queue
// will not deliver this message again, so even an attempt that takes the
// process down (out of memory, killed) ends with one. Success removes it;
// failure overwrites it.
func (t *task) provisional(ctx context.Context) error {
	w := t.w
	if t.d.attempt < w.cfg.Queues.MaxReceives {
		return nil
	}
	rec := t.record(contract.ClassExhausted,
		fmt.Sprintf("last attempt (%d of %d) started; this record remains only if that attempt never finished (process crash or kill)", t.d.attempt, w.cfg.Queues.MaxReceives))
	return w.out.errorRecord(ctx, t.keys.Error, rec)
}

// transcribe turns the recording into a transcript: streamed, or decoded
// from the first read whole; with speakers when the job asks (diarized,
// or a channel each).
func (t *task) transcribe(ctx context.Context) (contract.Transcript, error) {
	var (
		tr    contract.Transcript
		heard spoken
		err   error
	)
	switch {
	case t.infer.split:
		tr, err = t.transcribeChannels(ctx)
	case t.streaming:
		tr, heard, err = t.w.transcribeStream(ctx, t.streamed(mixed), t.infer, t.opening)
	default:
		tr, heard, err = t.w.transcribeObject(ctx, t.obj.head[:t.in.Size], t.infer, t.opening)
	}
	if err != nil {
		return contract.Transcript{}, err
	}
	if heard.asked {
		if err := t.diarized(&tr, heard.turns, heard.err); err != nil {
			return contract.Transcript{}, err
		}
	}
	tr.Input, tr.Model, tr.Attempt = t.in, t.infer.model, t.d.attempt
	tr.CreatedAt = t.w.now().UTC()
	return tr, nil
}

// streamed is what a streamed read of the job's input needs, of channel
// (or mixed).
func (t *task) streamed(channel int) *streamed {
	return &streamed{job: t.job, in: &t.in, head: t.obj.head, info: t.info, channel: channel}
}

// write puts the transcript's formats and the transcript, then deletes
// the job's error record: the provisional record of this attempt, the
// record of an earlier delivery that ran out of retries (a message
// redriven from the DLQ), or a final one of an earlier failure. The
// transcript supersedes it.
func (t *task) write(ctx context.Context, tr contract.Transcript) error {
	w := t.w
	start := time.Now()
	tries := 0
	err := w.untilWritten(ctx, t.hold, t.d, func(ctx context.Context) error {
		if tries++; tries > 1 {
			t.log.Info().Msg("output bucket back; writing the transcript computed before")
		}
		return w.out.transcript(ctx, t.keys, t.job.Formats, tr)
	})
	if err != nil {
		return err
	}
	w.m.since(StageUpload, start)
	// Even once the job's context is cancelled: the transcript is written.
	if err := w.out.remove(context.WithoutCancel(ctx), t.keys.Error); err != nil {
		t.log.Warn().Err(err).Msg("delete error record failed; the transcript supersedes it")
	}
	w.m.audioSeconds.Add(tr.DurationSec)
	t.log.Info().Str("transcript_key", t.keys.JSON).Float64("audio_s", tr.DurationSec).Int("chunks", tr.Chunks).Msg("transcript written")
	return nil
}

// fail turns the error that stopped a job into its result. A permanent
// error, or a retryable one on the last receive, is recorded where the
// transcript would have gone; a retryable one before that is retried; one
// caused by shutdown or a lost heartbeat releases the job.
func (t *task) fail(ctx context.Context, err error) jobResult {
	w, log := t.w, t.log
	class := ErrorClass(err)
	final := class != ""
	if !final {
		w.m.errors.WithLabelValues("retryable").Inc()
	}
	if cause := context.Cause(ctx); !final && (errors.Is(cause, errHeartbeatLost) || errors.Is(cause, errDrainTimeout)) {
		return jobResult{outcome: OutcomeReleased, err: err, cause: err} // shutdown or heartbeat loss, not the job's fault
	}
	if !final && t.d.attempt < w.cfg.Queues.MaxReceives {
		t.beforeTheLast(ctx, err)
		return jobResult{outcome: OutcomeRetry, err: err, cause: err}
	}
	keys := t.keys
	if keys.JSON == "" {
		keys = contract.KeysFor(t.prefix, t.in, t.infer.model)
	}
	if class == "" {
		class = contract.ClassExhausted
	}
	w.m.errors.WithLabelValues(class).Inc()
	rec := t.record(class, err.Error())
	rec.Final = final
	if t.rejected {
		// The message is at fault, not the input: its record is named by
		// the message (several messages for one input each keep theirs),
		// with its body, and never lies beside the input's transcript.
		keys.Error = t.d.rejectionKey(w.cfg.Outputs.Prefix, t.index)
		rec.MessageID, rec.MessageBody = t.d.id, t.d.body
	}
	werr := w.out.errorRecord(ctx, keys.Error, rec)
	if ErrorClass(werr) == contract.ClassOutputRejected {
		// S3 refused the record's key itself: put it where any key fits.
		fallback := contract.UnwritableRecordKey(t.prefix, keys)
		log.Warn().Err(werr).Str("error_key", fallback).Msg("error record refused by S3; writing it under _unwritable")
		keys.Error = fallback
		werr = w.out.errorRecord(ctx, fallback, rec)
	}
	if werr != nil {
		// Without its record the failure would be silent: retry instead.
		werr = fmt.Errorf("%w: %w (job error: %v)", errRecordUnwritten, werr, err) //nolint:errorlint // flattened: must not match as permanent
		return jobResult{outcome: OutcomeRetry, err: werr, cause: werr}
	}
	r := jobResult{outcome: OutcomeFailed, cause: err, class: class, final: final, errorKey: keys.Error}
	if !final {
		r.err = err
	}
	return r
}
