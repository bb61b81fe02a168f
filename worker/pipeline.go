package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/triton"
)

// ModelRate is the sample rate the model takes.
const ModelRate = 16000

// isNotFound reports an S3 "no such key/bucket/version" answer.
// IsNotFound reports an S3 error saying that the object, its version or
// its bucket does not exist.
func IsNotFound(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		switch ae.ErrorCode() {
		case "NotFound", "NoSuchKey", "NoSuchBucket", "NoSuchVersion", "404":
			return true
		}
	}
	return false
}

func isPreconditionFailed(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "412")
}

// probeBytes is how much of an object is read to learn its format and
// length before it is admitted.
const probeBytes = 64 << 10

// process runs the pipeline for one job. It fills in the input's ETag,
// version and size from S3, and returns the output keys once known.
func (w *Worker) process(ctx context.Context, log zerolog.Logger, msgID string, job Job, in *InputRef, prefix, model string, attempt int) (string, OutputKeys, error) {
	head, err := w.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(job.VersionID)})
	if err != nil {
		if IsNotFound(err) {
			return "", OutputKeys{}, Permanentf(ClassMissing, "s3://%s/%s does not exist", job.Bucket, job.Key)
		}
		return "", OutputKeys{}, fmt.Errorf("head input: %w", err)
	}
	if job.ETag != "" && job.VersionID == "" && strings.Trim(job.ETag, `"`) != strings.Trim(aws.ToString(head.ETag), `"`) {
		// Overwritten since the event: the new upload has its own event.
		log.Info().Msg("input changed since the job was queued; skipping")
		return OutcomeSuperseded, OutputKeys{}, nil
	}
	in.ETag = strings.Trim(aws.ToString(head.ETag), `"`)
	in.VersionID = aws.ToString(head.VersionId)
	in.Size = aws.ToInt64(head.ContentLength)
	keys := KeysFor(prefix, *in, model)

	done, staleRecord, err := w.alreadyDone(ctx, keys)
	if err != nil || done {
		if done {
			log.Info().Msg("job already has a transcript or final error record; nothing to do")
			return OutcomeDuplicate, keys, nil
		}
		return "", keys, err
	}
	if in.Size > w.cfg.MaxObjectBytes {
		return "", keys, Permanentf(ClassTooLarge, "object is %d bytes, limit is %d", in.Size, w.cfg.MaxObjectBytes)
	}
	info, err := w.probe(ctx, job, in)
	if err != nil {
		return "", keys, err
	}
	if d := info.Duration(); d > w.cfg.MaxAudioSeconds {
		return "", keys, Permanentf(ClassTooLarge, "recording is %.0f s long, limit is %.0f s", d, w.cfg.MaxAudioSeconds)
	}

	won, releaseClaim, err := w.claimJob(ctx, log, keys, msgID)
	if err != nil {
		return "", keys, err
	}
	if !won {
		log.Info().Msg("another message for this input is in progress; dropping this one")
		return OutcomeClaimed, keys, nil
	}
	defer releaseClaim()
	releaseMemory, err := w.gate.acquire(ctx, w.estimateMemory(in.Size, info))
	if err != nil {
		return "", keys, err
	}
	defer releaseMemory()

	// The queue will not deliver this message again: leave a record first,
	// so that even an attempt that takes the process down (out of memory,
	// killed) ends with one. Success removes it; failure overwrites it.
	provisional := attempt >= w.cfg.MaxReceives
	if provisional {
		rec := ErrorRecord{
			Schema: ErrorSchema, Input: *in, Model: model, Class: ClassExhausted, Attempt: attempt, CreatedAt: w.now().UTC(),
			Message: fmt.Sprintf("last attempt (%d of %d) started; this record remains only if that attempt never finished (process crash or kill)", attempt, w.cfg.MaxReceives),
		}
		if err := w.writeErrorRecord(ctx, keys.Error, rec); err != nil {
			return "", keys, err
		}
	}

	t, err := w.transcribeObject(ctx, job, in, model)
	if err != nil {
		return "", keys, err
	}
	t.Input, t.Model, t.Attempt = *in, model, attempt
	t.CreatedAt = w.now().UTC()
	start := time.Now()
	if err := w.writeOutputs(ctx, keys, job.Formats, t); err != nil {
		return "", keys, err
	}
	w.m.since(StageUpload, start)
	if provisional || staleRecord {
		// The provisional record of this attempt, or the record of an
		// earlier delivery that ran out of retries (a message redriven
		// from the DLQ): the transcript supersedes it.
		if _, err := w.s3.DeleteObject(context.WithoutCancel(ctx), &s3.DeleteObjectInput{Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(keys.Error)}); err != nil {
			log.Warn().Err(err).Msg("delete non-final error record failed; the transcript supersedes it")
		}
	}
	w.m.audioSeconds.Add(t.DurationSec)
	log.Info().Str("transcript_key", keys.JSON).Float64("audio_s", t.DurationSec).Int("chunks", t.Chunks).Msg("transcript written")
	return OutcomeOK, keys, nil
}

// transcribeObject downloads, decodes, resamples and transcribes the
// input.
func (w *Worker) transcribeObject(ctx context.Context, job Job, in *InputRef, model string) (Transcript, error) {
	start := time.Now()
	data, err := w.fetch(ctx, job, in)
	if err != nil {
		return Transcript{}, err
	}
	w.m.since(StageFetch, start)
	start = time.Now()
	clip, err := audio.Decode(data)
	if err != nil {
		return Transcript{}, audioError(err)
	}
	if len(clip.Samples) == 0 {
		return Transcript{}, Permanentf(ClassEmptyAudio, "recording has a valid header but no samples")
	}
	w.m.since(StageDecode, start)
	start = time.Now()
	rate := clip.Rate
	samples := audio.Resample(clip.Samples, clip.Rate, ModelRate)
	w.m.since(StageResample, start)
	start = time.Now()
	t, err := w.transcribe(ctx, samples, model)
	if err != nil {
		return Transcript{}, err
	}
	w.m.since(StageInfer, start)
	t.SampleRate = rate
	return t, nil
}

func audioError(err error) error {
	class := ClassCorruptAudio
	if errors.Is(err, audio.ErrUnsupported) {
		class = ClassUnsupported
	}
	return Permanent(class, err)
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

// metaFinal is the user metadata of an error record that says whether it
// is final (no later attempt will replace it).
const metaFinal = "fleetscribe-final"

// alreadyDone reports a job whose transcript exists or whose final error
// record does (done), and whether a non-final error record is there: the
// record of an earlier delivery that exhausted its retries, which a
// transcript must replace.
func (w *Worker) alreadyDone(ctx context.Context, keys OutputKeys) (done, staleRecord bool, err error) {
	if _, err := w.head(ctx, keys.JSON); err == nil {
		return true, false, nil
	} else if !IsNotFound(err) {
		return false, false, fmt.Errorf("check for existing transcript: %w", err)
	}
	out, err := w.head(ctx, keys.Error)
	switch {
	case err == nil:
		final := out.Metadata[metaFinal] == "true"
		return final, !final, nil
	case IsNotFound(err):
		return false, false, nil
	default:
		return false, false, fmt.Errorf("check for existing error record: %w", err)
	}
}

func (w *Worker) head(ctx context.Context, key string) (*s3.HeadObjectOutput, error) {
	return w.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(key)})
}

// getInput starts a GET of exactly the object version that was checked.
func (w *Worker) getInput(ctx context.Context, job Job, in *InputRef, rng string) (*s3.GetObjectOutput, error) {
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
	case IsNotFound(err):
		return nil, Permanentf(ClassMissing, "s3://%s/%s was deleted while being processed", job.Bucket, job.Key)
	case isPreconditionFailed(err):
		return nil, fmt.Errorf("input changed while being processed: %w", err)
	default:
		return nil, fmt.Errorf("get input: %w", err)
	}
}

// probe reads the head of the object to learn its format and length
// before the whole object is fetched and admitted.
func (w *Worker) probe(ctx context.Context, job Job, in *InputRef) (audio.Info, error) {
	if in.Size == 0 {
		return audio.Info{}, audioError(errors.New("empty object"))
	}
	n := min(in.Size, probeBytes)
	obj, err := w.getInput(ctx, job, in, fmt.Sprintf("bytes=0-%d", n-1))
	if err != nil {
		return audio.Info{}, err
	}
	defer func() { _ = obj.Body.Close() }()
	buf := make([]byte, n)
	if _, err := io.ReadFull(obj.Body, buf); err != nil {
		return audio.Info{}, fmt.Errorf("read input header: %w", err)
	}
	info, err := audio.Probe(buf, in.Size)
	switch {
	case err == nil:
		return info, nil
	case errors.Is(err, audio.ErrHeaderBeyondPrefix):
		// An odd file with its header far in: assume the worst case the
		// decoder accepts (8-bit mono at 1 kHz) so admission stays safe.
		return audio.Info{Format: "wav", Rate: 1000, Channels: 1, Frames: in.Size}, nil
	default:
		return audio.Info{}, audioError(err)
	}
}

// fetch downloads exactly the object version that was checked into a
// buffer of its size.
func (w *Worker) fetch(ctx context.Context, job Job, in *InputRef) ([]byte, error) {
	obj, err := w.getInput(ctx, job, in, "")
	if err != nil {
		return nil, err
	}
	defer func() { _ = obj.Body.Close() }()
	buf := make([]byte, in.Size)
	if _, err := io.ReadFull(obj.Body, buf); err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	return buf, nil
}

// transcribe splits samples at quiet points, transcribes the chunks in
// parallel and stitches the results in order with absolute timestamps.
func (w *Worker) transcribe(ctx context.Context, samples []float32, model string) (Transcript, error) {
	chunks := audio.Split(samples, audio.SplitConfig{Max: int(w.cfg.ChunkSeconds * ModelRate), Frame: ModelRate * 30 / 1000})
	results := make([]triton.Result, len(chunks))
	job := jobFrom(ctx)
	job.prog.total.Store(int64(len(chunks)))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(w.cfg.ChunkParallelism)
	for i, c := range chunks {
		if len(c.Samples) == 0 {
			continue
		}
		g.Go(func() (err error) {
			// errgroup does not recover: a panic here would end the process
			// with every job in hand.
			defer func() {
				if r := recover(); r != nil {
					err = recoverError(r)
				}
			}()
			r, err := w.tr.Transcribe(gctx, triton.Request{Samples: c.Samples, Timestamps: w.cfg.Timestamps, Model: model, Priority: job.priority})
			if err != nil {
				if errors.Is(err, triton.ErrRejected) {
					return Permanent(ClassRejected, fmt.Errorf("chunk %d: %w", i, err))
				}
				return fmt.Errorf("transcribe chunk %d: %w", i, err)
			}
			results[i] = r
			job.prog.done.Add(1)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return Transcript{}, err
	}
	t := Transcript{Schema: TranscriptSchema, Chunks: len(chunks), DurationSec: float64(len(samples)) / ModelRate}
	var texts []string
	for i, r := range results {
		off := float64(chunks[i].Offset) / ModelRate
		if s := strings.TrimSpace(r.Text); s != "" {
			texts = append(texts, s)
		}
		for _, wd := range r.Words {
			wd.Start += off
			wd.End += off
			t.Words = append(t.Words, wd)
		}
		if len(r.Words) == 0 && strings.TrimSpace(r.Text) != "" {
			// No timings from the model: one segment per chunk.
			end := off + float64(len(chunks[i].Samples))/ModelRate
			t.Segments = append(t.Segments, Segment{Start: off, End: end, Text: strings.TrimSpace(r.Text)})
		}
	}
	t.Text = strings.Join(texts, " ")
	if len(t.Words) > 0 {
		t.Segments = BuildSegments(t.Words)
	}
	if t.Segments == nil {
		t.Segments = []Segment{}
	}
	return t, nil
}

// writeOutputs writes the extra formats first and the JSON transcript
// last: the JSON's existence means the job is complete.
func (w *Worker) writeOutputs(ctx context.Context, keys OutputKeys, formats []string, t Transcript) error {
	for _, f := range formats {
		var body []byte
		var ctype string
		switch f {
		case FormatJSON:
			continue
		case FormatTXT:
			body, ctype = RenderTXT(t), "text/plain; charset=utf-8"
		case FormatSRT:
			body, ctype = RenderSRT(t), "application/x-subrip"
		case FormatVTT:
			body, ctype = RenderVTT(t), "text/vtt"
		}
		if err := w.put(ctx, keys.Key(f), body, ctype, "", nil); err != nil {
			return err
		}
	}
	return w.putJSON(ctx, keys.JSON, t, "", nil)
}

// ErrorRecordTag is set on error records so a bucket lifecycle rule can
// expire them (lifecycle filters match tags and prefixes, not suffixes).
const ErrorRecordTag = "fleetscribe-record=error"

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
			return Permanent(ClassOutputRejected, err)
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
