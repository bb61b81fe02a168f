package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/internal/s3errs"
	"github.com/fleetscribe/fleetscribe/subtitle"
)

// ModelRate is the sample rate the model takes.
const ModelRate = 16000

// firstRead is how much of an input the first GET reads: the whole of a
// typical short recording, so one request fetches it, and the header of a
// long one, to learn its format and length before it is admitted.
const firstRead = 1 << 20

// process runs the pipeline for one job. It fills in the input's ETag,
// version and size from S3, and returns the output keys once known.
//
// S3 requests of a short recording: one GET (the object, with its ETag
// and version), one HEAD (is the transcript there already), one PUT (the
// transcript) and one DELETE (an error record of an earlier delivery, if
// any: free, where a HEAD to look first is not).
func (w *Worker) process(ctx context.Context, log zerolog.Logger, msgID string, job contract.Job, in *contract.InputRef, prefix, model string, attempt int) (string, contract.OutputKeys, error) {
	start := time.Now()
	obj, err := w.open(ctx, job)
	opening := time.Since(start)
	if err != nil {
		var perm *PermanentError
		if !errors.As(err, &perm) && ctx.Err() == nil {
			// The read failed but the object may be there: learn its ETag
			// from a HEAD (only on this path), so that a last attempt can
			// still leave its error record where the transcript would go.
			if h, herr := w.headInput(ctx, job); herr == nil {
				in.ETag, in.VersionID, in.Size = h.etag, h.version, h.size
				return "", contract.KeysFor(prefix, *in, model), err
			}
		}
		return "", contract.OutputKeys{}, err
	}
	defer func() { putBytes(obj.head) }()
	if job.ETag != "" && job.VersionID == "" && strings.Trim(job.ETag, `"`) != obj.etag {
		// Overwritten since the event: the new upload has its own event.
		log.Info().Msg("input changed since the job was queued; skipping")
		return OutcomeSuperseded, contract.OutputKeys{}, nil
	}
	in.ETag, in.VersionID, in.Size = obj.etag, obj.version, obj.size
	keys := contract.KeysFor(prefix, *in, model)

	done, err := w.alreadyDone(ctx, keys)
	if err != nil || done {
		if done {
			log.Info().Msg("job already has a transcript; nothing to do")
			return OutcomeDuplicate, keys, nil
		}
		return "", keys, err
	}
	if in.Size > w.cfg.MaxObjectBytes {
		return "", keys, Permanentf(contract.ClassTooLarge, "object is %d bytes, limit is %d", in.Size, w.cfg.MaxObjectBytes)
	}
	info, err := probe(obj.head, in.Size)
	if err != nil {
		return "", keys, err
	}
	if d := info.Duration(); d > w.cfg.MaxAudioSeconds && !info.Estimated {
		// (An estimated length, from the size of a compressed recording
		// ffmpeg reads, is checked after decoding instead.)
		return "", keys, Permanentf(contract.ClassTooLarge, "recording is %.0f s long, limit is %.0f s", d, w.cfg.MaxAudioSeconds)
	}

	won, releaseClaim := true, func() {}
	if info.Duration() >= w.cfg.ClaimMinAudio.Seconds() { // shorter: not worth a claim's requests
		if won, releaseClaim, err = w.claimJob(ctx, log, keys, msgID); err != nil {
			return "", keys, err
		}
	}
	if !won {
		log.Info().Msg("another message for this input is in progress; dropping this one")
		return OutcomeClaimed, keys, nil
	}
	defer releaseClaim()
	// A recording past the first read streams; so does any format but
	// plain WAV, whatever its size: ffmpeg reads it from a temporary file
	// either way, and decoded whole at its own rate (48 kHz for Opus) the
	// minutes of compressed speech in one read would take tens of MB.
	streaming := int64(len(obj.head)) < in.Size || info.Format != "wav" || info.Estimated
	releaseMemory, err := w.gate.acquire(ctx, w.estimateMemory(in.Size, info, streaming))
	if err != nil {
		return "", keys, err
	}
	defer releaseMemory()

	// The queue will not deliver this message again: leave a record first,
	// so that even an attempt that takes the process down (out of memory,
	// killed) ends with one. Success removes it; failure overwrites it.
	provisional := attempt >= w.cfg.MaxReceives
	if provisional {
		rec := contract.ErrorRecord{
			Schema: contract.ErrorSchema, Input: *in, Model: model, Class: contract.ClassExhausted, Attempt: attempt, CreatedAt: w.now().UTC(),
			Message: fmt.Sprintf("last attempt (%d of %d) started; this record remains only if that attempt never finished (process crash or kill)", attempt, w.cfg.MaxReceives),
		}
		if err := w.writeErrorRecord(ctx, keys.Error, rec); err != nil {
			return "", keys, err
		}
	}

	var t contract.Transcript
	if streaming {
		t, err = w.transcribeStream(ctx, job, in, obj.head, model, info, opening)
	} else {
		t, err = w.transcribeObject(ctx, obj.head[:in.Size], model, opening)
	}
	if err != nil {
		return "", keys, err
	}
	t.Input, t.Model, t.Attempt = *in, model, attempt
	t.CreatedAt = w.now().UTC()
	start = time.Now()
	if err := w.writeOutputs(ctx, keys, job.Formats, t); err != nil {
		return "", keys, err
	}
	w.m.since(StageUpload, start)
	// The provisional record of this attempt, or the record of an earlier
	// delivery that ran out of retries (a message redriven from the DLQ),
	// or a final one of an earlier failure: the transcript supersedes it.
	// Deleting without looking first: a DELETE is free, a HEAD is not.
	if _, err := w.s3.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(keys.Error)}); err != nil {
		log.Warn().Err(err).Msg("delete error record failed; the transcript supersedes it")
	}
	w.m.audioSeconds.Add(t.DurationSec)
	log.Info().Str("transcript_key", keys.JSON).Float64("audio_s", t.DurationSec).Int("chunks", t.Chunks).Msg("transcript written")
	return OutcomeOK, keys, nil
}

// transcribeObject decodes, resamples and transcribes a whole input read
// in one piece. opening is how long that read took.
func (w *Worker) transcribeObject(ctx context.Context, data []byte, model string, opening time.Duration) (contract.Transcript, error) {
	w.m.stages[StageFetch].Observe(opening.Seconds())
	start := time.Now()
	clip, err := audio.DecodeContext(ctx, data, getFloats(len(data)/2), w.ffmpeg)
	if err != nil {
		return contract.Transcript{}, audioError(err)
	}
	// Every chunk request has returned once transcribe does.
	defer putFloats(clip.Samples)
	if len(clip.Samples) == 0 {
		return contract.Transcript{}, Permanentf(contract.ClassEmptyAudio, "recording has a valid header but no samples")
	}
	if d := float64(len(clip.Samples)) / float64(clip.Rate); d > w.cfg.MaxAudioSeconds {
		return contract.Transcript{}, Permanentf(contract.ClassTooLarge, "recording is %.0f s long, limit is %.0f s", d, w.cfg.MaxAudioSeconds)
	}
	w.m.since(StageDecode, start)
	start = time.Now()
	rate := clip.Rate
	samples := audio.Resample(clip.Samples, clip.Rate, ModelRate)
	w.m.since(StageResample, start)
	start = time.Now()
	t, err := w.transcribe(ctx, samples, model)
	if err != nil {
		return contract.Transcript{}, err
	}
	w.m.since(StageInfer, start)
	t.SampleRate = rate
	return t, nil
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

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// alreadyDone reports a job whose transcript exists. An error record is
// not looked for (one paid HEAD per job): a job that failed for good is
// computed again when a new message asks for it, and fails the same way.
func (w *Worker) alreadyDone(ctx context.Context, keys contract.OutputKeys) (bool, error) {
	_, err := w.head(ctx, keys.JSON)
	switch {
	case err == nil:
		return true, nil
	case s3errs.NotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("check for existing transcript: %w", err)
	}
}

func (w *Worker) head(ctx context.Context, key string) (*s3.HeadObjectOutput, error) {
	return w.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(key)})
}

// getInput starts a GET of exactly the object version that was checked.
func (w *Worker) getInput(ctx context.Context, job contract.Job, in *contract.InputRef, rng string) (*s3.GetObjectOutput, error) {
	get := &s3.GetObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(in.VersionID)}
	if in.VersionID == "" && in.ETag != "" {
		get.IfMatch = aws.String(`"` + in.ETag + `"`)
	}
	if rng != "" {
		get.Range = aws.String(rng)
	}
	obj, err := w.s3.GetObject(ctx, get)
	switch {
	case err == nil:
		return obj, nil
	case s3errs.NotFound(err):
		return nil, Permanentf(contract.ClassMissing, "s3://%s/%s was deleted while being processed", job.Bucket, job.Key)
	case s3errs.PreconditionFailed(err):
		return nil, fmt.Errorf("input changed while being processed: %w", err)
	default:
		return nil, fmt.Errorf("get input: %w", err)
	}
}

// opened is what the first read of an input learned.
type opened struct {
	etag, version string
	size          int64
	head          []byte // the first min(size, firstRead) bytes
}

// open reads the first firstRead bytes of the input and its ETag, version
// and size, in one GET.
func (w *Worker) open(ctx context.Context, job contract.Job) (opened, error) {
	obj, err := w.s3.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(job.VersionID),
		Range: aws.String(fmt.Sprintf("bytes=0-%d", firstRead-1)),
	})
	switch {
	case err == nil:
	case s3errs.NotFound(err):
		return opened{}, Permanentf(contract.ClassMissing, "s3://%s/%s does not exist", job.Bucket, job.Key)
	case isInvalidRange(err):
		// An empty object has no first byte: its metadata from a HEAD.
		return w.headInput(ctx, job)
	default:
		return opened{}, fmt.Errorf("get input: %w", err)
	}
	defer func() { _ = obj.Body.Close() }()
	o := opened{etag: strings.Trim(aws.ToString(obj.ETag), `"`), version: aws.ToString(obj.VersionId), size: aws.ToInt64(obj.ContentLength)}
	if cr := aws.ToString(obj.ContentRange); cr != "" {
		_, total, ok := strings.Cut(cr, "/")
		n, err := strconv.ParseInt(total, 10, 64)
		if !ok || err != nil {
			return opened{}, fmt.Errorf("get input: unexpected Content-Range %q", cr)
		}
		o.size = n
	}
	// A server that ignored the range sends everything: read only the head.
	o.head = getBytes(int(min(o.size, firstRead)))
	if _, err := io.ReadFull(obj.Body, o.head); err != nil {
		putBytes(o.head)
		return opened{}, fmt.Errorf("read input: %w", err)
	}
	return o, nil
}

// headInput learns the input's ETag, version and size from a HEAD.
func (w *Worker) headInput(ctx context.Context, job contract.Job) (opened, error) {
	h, err := w.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(job.VersionID)})
	switch {
	case s3errs.NotFound(err):
		return opened{}, Permanentf(contract.ClassMissing, "s3://%s/%s does not exist", job.Bucket, job.Key)
	case err != nil:
		return opened{}, fmt.Errorf("head input: %w", err)
	}
	return opened{etag: strings.Trim(aws.ToString(h.ETag), `"`), version: aws.ToString(h.VersionId), size: aws.ToInt64(h.ContentLength)}, nil
}

func isInvalidRange(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "InvalidRange" || ae.ErrorCode() == "416")
}

// probe learns the format and length of the input from its head.
func probe(head []byte, size int64) (audio.Info, error) {
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

// writeOutputs writes the extra formats first and the JSON transcript
// last: the JSON's existence means the job is complete.
func (w *Worker) writeOutputs(ctx context.Context, keys contract.OutputKeys, formats []string, t contract.Transcript) error {
	for _, f := range formats {
		var body []byte
		var ctype string
		switch f {
		case contract.FormatJSON:
			continue
		case contract.FormatTXT:
			body, ctype = subtitle.RenderTXT(t), "text/plain; charset=utf-8"
		case contract.FormatSRT:
			body, ctype = subtitle.RenderSRT(t), "application/x-subrip"
		case contract.FormatVTT:
			body, ctype = subtitle.RenderVTT(t), "text/vtt"
		}
		if err := w.put(ctx, keys.Key(f), body, ctype, "", nil); err != nil {
			return err
		}
	}
	return w.putJSON(ctx, keys.JSON, t, "", nil)
}

func (w *Worker) putJSON(ctx context.Context, key string, v any, tagging string, meta map[string]string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return w.put(ctx, key, b, "application/json", tagging, meta)
}

// put writes one output object; tagging ("k=v", or empty) becomes its
// tags. S3 refusing the object itself (key too long, invalid argument) is
// a permanent output_rejected error: retrying cannot help.
func (w *Worker) put(ctx context.Context, key string, body []byte, ctype, tagging string, meta map[string]string) error {
	_, err := w.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentType: aws.String(ctype), ContentLength: aws.Int64(int64(len(body))),
		Tagging: optional(tagging), Metadata: meta,
	})
	if err != nil {
		err = fmt.Errorf("put s3://%s/%s: %w", w.cfg.OutputBucket, key, err)
		if outputRejected(err) {
			return Permanent(contract.ClassOutputRejected, err)
		}
		return err
	}
	return nil
}

// outputRejected reports S3 refusing an object for what it is.
func outputRejected(err error) bool {
	var ae smithy.APIError
	if !errors.As(err, &ae) {
		return false
	}
	switch ae.ErrorCode() {
	case "KeyTooLongError", "InvalidArgument", "InvalidRequest", "EntityTooLarge", "InvalidTag", "MetadataTooLarge":
		return true
	}
	return false
}
