package worker

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

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
func isNotFound(err error) bool {
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

// process runs the pipeline for one job. It fills in the input's ETag,
// version and size from S3, and returns the output keys once known.
func (w *Worker) process(ctx context.Context, log zerolog.Logger, job Job, in *InputRef, prefix string, attempt int) (string, OutputKeys, error) {
	if job.Model != "" && job.Model != w.model {
		return "", OutputKeys{}, Permanentf(ClassBadMessage, "job asks for model %q but this worker serves %q", job.Model, w.model)
	}
	head, err := w.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(job.VersionID)})
	if err != nil {
		if isNotFound(err) {
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
	keys := KeysFor(prefix, *in, w.model)

	if done, err := w.exists(ctx, keys.JSON); err != nil {
		return "", keys, err
	} else if done {
		log.Info().Str("transcript_key", keys.JSON).Msg("transcript exists; nothing to do")
		return OutcomeDuplicate, keys, nil
	}
	if in.Size > w.cfg.MaxObjectBytes {
		return "", keys, Permanentf(ClassTooLarge, "object is %d bytes, limit is %d", in.Size, w.cfg.MaxObjectBytes)
	}

	data, err := w.fetch(ctx, job, in)
	if err != nil {
		return "", keys, err
	}
	clip, err := audio.Decode(data)
	if err != nil {
		class := ClassCorruptAudio
		if errors.Is(err, audio.ErrUnsupported) {
			class = ClassUnsupported
		}
		return "", keys, Permanent(class, err)
	}
	samples := audio.Resample(clip.Samples, clip.Rate, ModelRate)
	t, err := w.transcribe(ctx, samples)
	if err != nil {
		return "", keys, err
	}
	t.Input, t.Model, t.Attempt = *in, w.model, attempt
	t.SampleRate = clip.Rate
	t.CreatedAt = w.now().UTC()
	if err := w.writeOutputs(ctx, keys, job.Formats, t); err != nil {
		return "", keys, err
	}
	w.m.audioSeconds.Add(t.DurationSec)
	log.Info().Str("transcript_key", keys.JSON).Float64("audio_s", t.DurationSec).Int("chunks", t.Chunks).Msg("transcript written")
	return OutcomeOK, keys, nil
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return aws.String(s)
}

func (w *Worker) exists(ctx context.Context, key string) (bool, error) {
	_, err := w.s3.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(key)})
	switch {
	case err == nil:
		return true, nil
	case isNotFound(err):
		return false, nil
	default:
		return false, fmt.Errorf("check for existing transcript: %w", err)
	}
}

// fetch downloads exactly the object version that was checked, reading at
// most MaxObjectBytes.
func (w *Worker) fetch(ctx context.Context, job Job, in *InputRef) ([]byte, error) {
	get := &s3.GetObjectInput{Bucket: aws.String(job.Bucket), Key: aws.String(job.Key), VersionId: optional(in.VersionID)}
	if in.VersionID == "" && in.ETag != "" {
		get.IfMatch = aws.String(`"` + in.ETag + `"`)
	}
	obj, err := w.s3.GetObject(ctx, get)
	switch {
	case err == nil:
	case isNotFound(err):
		return nil, Permanentf(ClassMissing, "s3://%s/%s was deleted while being processed", job.Bucket, job.Key)
	case isPreconditionFailed(err):
		return nil, fmt.Errorf("input changed while being processed: %w", err)
	default:
		return nil, fmt.Errorf("get input: %w", err)
	}
	defer func() { _ = obj.Body.Close() }()
	var buf bytes.Buffer
	if in.Size > 0 {
		buf.Grow(int(in.Size))
	}
	n, err := io.Copy(&buf, io.LimitReader(obj.Body, w.cfg.MaxObjectBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read input: %w", err)
	}
	if n > w.cfg.MaxObjectBytes {
		return nil, Permanentf(ClassTooLarge, "object is over the limit of %d bytes", w.cfg.MaxObjectBytes)
	}
	return buf.Bytes(), nil
}

// transcribe splits samples at quiet points, transcribes the chunks in
// parallel and stitches the results in order with absolute timestamps.
func (w *Worker) transcribe(ctx context.Context, samples []float32) (Transcript, error) {
	chunks := audio.Split(samples, audio.SplitConfig{Max: int(w.cfg.ChunkSeconds * ModelRate), Frame: ModelRate * 30 / 1000})
	results := make([]triton.Result, len(chunks))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(w.cfg.ChunkParallelism)
	for i, c := range chunks {
		if len(c.Samples) == 0 {
			continue
		}
		g.Go(func() error {
			r, err := w.tr.Transcribe(gctx, c.Samples, w.cfg.Timestamps)
			if err != nil {
				if errors.Is(err, triton.ErrRejected) {
					return Permanent(ClassRejected, fmt.Errorf("chunk %d: %w", i, err))
				}
				return fmt.Errorf("transcribe chunk %d: %w", i, err)
			}
			results[i] = r
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
		if err := w.put(ctx, keys.Key(f), body, ctype, ""); err != nil {
			return err
		}
	}
	return w.putJSON(ctx, keys.JSON, t, "")
}

// ErrorRecordTag is set on error records so a bucket lifecycle rule can
// expire them (lifecycle filters match tags and prefixes, not suffixes).
const ErrorRecordTag = "fleetscribe-record=error"

func (w *Worker) putJSON(ctx context.Context, key string, v any, tagging string) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	return w.put(ctx, key, b, "application/json", tagging)
}

// put writes one output object; tagging ("k=v", or empty) becomes its tags.
func (w *Worker) put(ctx context.Context, key string, body []byte, ctype, tagging string) error {
	_, err := w.s3.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(w.cfg.OutputBucket), Key: aws.String(key), Body: bytes.NewReader(body),
		ContentType: aws.String(ctype), ContentLength: aws.Int64(int64(len(body))),
		Tagging: optional(tagging),
	})
	if err != nil {
		return fmt.Errorf("put s3://%s/%s: %w", w.cfg.OutputBucket, key, err)
	}
	return nil
}
