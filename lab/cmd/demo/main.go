// Command demo runs the whole job end to end on this machine, with no AWS
// account and no GPU: it starts the local SQS+S3 emulator and four
// partitions of real Triton Inference Server (the way `worker mps run`
// runs a plan, time-sliced, serving the neural CPU model repository
// deploy/triton/cpu-whisper: Whisper tiny.en through faster-whisper behind
// the worker's model contract, a CPU stand-in for Parakeet),
// synthesises English sentences with
// ffmpeg's flite voices, uploads them, enqueues them with the enqueue
// binary, runs the worker binary until the queue is drained, prints each
// transcript beside its source text with the word error rate, and stops
// everything it started. Then who spoke: a synthetic consult of three
// voices taking turns (one talking over another) is diarized, and a stereo
// call with a party on each channel is split; both are printed with their
// speakers. Two dictations that name drugs and a clinician go with a
// stored vocabulary and without, their low-confidence words marked. The
// last line is "RESULT clips=N wer=0.xx words_timed=N words_misplaced=0
// der=0.xx speakers=N/N channel_words=N/N vocabulary_terms=N/N
// without=N/N".
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/conversation"
	"github.com/fleetscribe/fleetscribe/lab/kit/diarscore"
	"github.com/fleetscribe/fleetscribe/lab/kit/wer"
	"github.com/fleetscribe/fleetscribe/lab/servers/localaws"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
)

// sentences are read by flite's voices and recognised by Whisper.
var sentences = []string{
	"the patient was admitted to the hospital on monday morning",
	"please schedule a follow up appointment in two weeks",
	"she has no known allergies to any medication",
	"the doctor will call you back this afternoon",
	"we will review the test results at the next visit",
	"the heart rate is normal and the lungs are clear",
}

// dictations name drugs and a clinician: each is sent twice, with the
// cardiology vocabulary (enqueue vocabulary create) and without, and its
// TXT printed with the words below 0.5 confidence marked.
var dictations = []struct{ text, voice string }{
	{"we will stop the lisinopril and begin tamsulosin tomorrow morning", "rms"},
	{"doctor Thibodeaux will see her after the pulmonary embolism next month", "awb"},
}

// cardiology is the demo's stored vocabulary.
var cardiology = []string{"lisinopril", "tamsulosin", "metoprolol", "atorvastatin", "pulmonary embolism", "Thibodeaux", "Okafor"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	binDir := flag.String("bin", "bin", "directory holding the worker and enqueue binaries")
	launcher := flag.String("tritonserver", "scripts/tritonserver", "command that runs Triton Inference Server (make deps installs it)")
	repo := flag.String("model-repository", "deploy/triton/cpu-whisper", "Triton model repository the partitions serve (deploy/triton/cpu: pocketsphinx, faster and rougher)")
	partitions := flag.Int("partitions", 4, "Triton partitions (server processes)")
	voice := flag.String("voice", "rms", "flite voice (kal, kal16, rms, slt, awb)")
	maxWER := flag.Float64("max-wer", 0.03, "exit non-zero when overall WER is above this (pocketsphinx: about 0.11)")
	maxDER := flag.Float64("max-der", 0.10, "exit non-zero when the consult's diarization error rate is above this")
	verbose := flag.Bool("v", false, "show the worker's and servers' logs")
	flag.Parse()
	logs := io.Discard
	if *verbose {
		logs = os.Stderr
	}
	work, err := os.MkdirTemp("", "fleetscribe-demo-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()

	step("starting local SQS+S3 emulator")
	emu, err := localaws.Start(ctx)
	if err != nil {
		return err
	}
	defer emu.Stop()
	sqsc, s3c := emu.Clients()
	const bucket, outBucket = "demo-audio", "demo-transcripts"
	q, err := emu.Provision(ctx, "demo-live", 3, bucket, outBucket)
	if err != nil {
		return err
	}
	fmt.Printf("   endpoint %s, queue %s (DLQ after 3 receives)\n", emu.Endpoint, q.URL)

	step(fmt.Sprintf("starting %d Triton Inference Server %s partitions (worker mps run, time-sliced, model repository %s)", *partitions, tritonproc.Version, *repo))
	started := time.Now()
	plan, err := tritonproc.RunPlan(ctx, filepath.Join(*binDir, "worker"), *launcher, *repo, *partitions, []string{"asr", "diarize"}, logs)
	if err != nil {
		return fmt.Errorf("%w (rerun with -v for the partitions' logs)", err)
	}
	defer plan.Stop()
	addrs := plan.Addrs
	fmt.Printf("   ready in %.1fs: %s\n", time.Since(started).Seconds(), strings.Join(addrs, ","))
	asrAddr := strings.Join(addrs, ",")

	step(fmt.Sprintf("synthesising and uploading %d sentences (flite voice %q)", len(sentences), *voice))
	keys := make([]string, len(sentences))
	for i, text := range sentences {
		// Uploads as phones and browsers make them: WAV, MP3 (44.1 kHz
		// stereo, decoded in Go) and M4A/AAC (through ffmpeg), in turn.
		format := uploadFormats[i%len(uploadFormats)]
		file := filepath.Join(work, fmt.Sprintf("clip-%02d.%s", i+1, format.ext))
		ff := exec.CommandContext(ctx, "ffmpeg", append(append([]string{"-nostdin", "-loglevel", "error", "-y",
			"-f", "lavfi", "-i", fmt.Sprintf("flite=text='%s':voice=%s", text, *voice)}, format.args...), file)...)
		if out, err := ff.CombinedOutput(); err != nil {
			return fmt.Errorf("ffmpeg: %w: %s", err, out)
		}
		f, err := os.Open(file)
		if err != nil {
			return err
		}
		keys[i] = fmt.Sprintf("incoming/clip-%02d.%s", i+1, format.ext)
		_, err = s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(keys[i]), Body: f})
		_ = f.Close() // read-only
		if err != nil {
			return fmt.Errorf("upload: %w", err)
		}
	}

	step("synthesising a consult of three voices (turns, pauses, one talking over another) and a stereo call")
	synth := conversation.Flite(work)
	consult, err := conversation.Make(ctx, conversation.Spec{Seed: 7, Speakers: 3, Seconds: 75, Overlap: 0.25}, synth)
	if err != nil {
		return err
	}
	call, err := conversation.Make(ctx, conversation.Spec{Seed: 11, Speakers: 2, Seconds: 40, Overlap: 0.2}, synth)
	if err != nil {
		return err
	}
	tracks, err := call.Channels(ctx, synth)
	if err != nil {
		return err
	}
	step("synthesising two dictations that name drugs and a clinician")
	for i, d := range dictations {
		file := filepath.Join(work, fmt.Sprintf("dictation-%d.wav", i+1))
		ff := exec.CommandContext(ctx, "ffmpeg", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
			fmt.Sprintf("flite=text='%s':voice=%s", d.text, d.voice), "-ac", "1", file)
		if out, err := ff.CombinedOutput(); err != nil {
			return fmt.Errorf("ffmpeg: %w: %s", err, out)
		}
		body, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		for _, prefix := range []string{"dictations/", "dictations-plain/"} {
			if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(fmt.Sprintf("%sdictation-%d.wav", prefix, i+1)), Body: bytes.NewReader(body)}); err != nil {
				return fmt.Errorf("upload: %w", err)
			}
		}
	}
	step("storing the vocabulary with `enqueue vocabulary create -name cardiology`")
	vocabFile := filepath.Join(work, "cardiology.txt")
	if err := os.WriteFile(vocabFile, []byte("# the demo's cardiology vocabulary\n"+strings.Join(cardiology, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	vc := exec.CommandContext(ctx, filepath.Join(*binDir, "enqueue"), "vocabulary", "create", "-aws-endpoint", emu.Endpoint,
		"-output-bucket", outBucket, "-name", "cardiology", "-from-file", vocabFile)
	vc.Stdout, vc.Stderr = os.Stdout, os.Stderr
	if err := vc.Run(); err != nil {
		return fmt.Errorf("enqueue vocabulary create: %w", err)
	}

	const consultKey, callKey = "consults/visit-001.wav", "calls/call-001.wav"
	for key, body := range map[string][]byte{consultKey: conversation.WAV(consult.Samples), callKey: conversation.WAV(tracks...)} {
		if _, err := s3c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(bucket), Key: aws.String(key), Body: bytes.NewReader(body)}); err != nil {
			return fmt.Errorf("upload: %w", err)
		}
	}
	fmt.Printf("   %s: %.0f s, voices %s, %d sentences, %.1f s of overlapped speech\n", consultKey, float64(len(consult.Samples))/conversation.Rate,
		strings.Join(consult.Voices, ", "), len(consult.Utterances), diarscore.OverlapSeconds(consult))
	fmt.Printf("   %s: %.0f s, stereo, %s left and %s right\n", callKey, float64(len(call.Samples))/conversation.Rate, call.Voices[0], call.Voices[1])

	common := []string{"-aws-endpoint", emu.Endpoint, "-queue-url", q.URL}
	for _, e := range []struct{ say, prefix, flag, value string }{
		{"enqueue -prefix incoming/", "incoming/", "", ""},
		{"enqueue -prefix consults/ -job-speakers on", "consults/", "-job-speakers", "on"},
		{"enqueue -prefix calls/ -job-channels split", "calls/", "-job-channels", "split"},
		{"enqueue -prefix dictations/ -job-vocabulary cardiology", "dictations/", "-job-vocabulary", "cardiology"},
		{"enqueue -prefix dictations-plain/", "dictations-plain/", "", ""},
	} {
		step("enqueueing with `" + e.say + "`")
		args := append(slices.Clone(common), "-bucket", bucket, "-prefix", e.prefix, "-job-formats", "txt,srt,vtt")
		if e.flag != "" {
			args = append(args, e.flag, e.value)
		}
		enq := exec.CommandContext(ctx, filepath.Join(*binDir, "enqueue"), args...)
		enq.Stdout, enq.Stderr = os.Stdout, os.Stderr
		if err := enq.Run(); err != nil {
			return fmt.Errorf("enqueue: %w", err)
		}
	}

	step("running the worker until the queue is drained")
	started = time.Now()
	wk := exec.CommandContext(ctx, filepath.Join(*binDir, "worker"), append(common,
		"-output-bucket", outBucket, "-input-buckets", bucket, "-triton-addrs", asrAddr, "-model-batch-dim=true",
		"-concurrency", "4", "-wait-time", "1s", "-exit-when-idle", "3s", "-metrics-addr", "", "-mark-confidence-below", "0.5")...)
	wk.Stdout, wk.Stderr = logs, logs
	wk.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	wk.Cancel = func() error { return wk.Process.Signal(syscall.SIGTERM) }
	if err := wk.Run(); err != nil {
		return fmt.Errorf("worker: %w (rerun with -v for its log)", err)
	}
	visible, inflight, err := localaws.Depth(ctx, sqsc, q.URL)
	if err != nil {
		return err
	}
	fmt.Printf("   worker exited after %.1fs; queue: %d visible, %d in flight\n", time.Since(started).Seconds(), visible, inflight)

	step("transcripts")
	var edits, words, timed, misplaced int
	for i, key := range keys {
		t, err := localaws.ReadTranscript(ctx, s3c, outBucket, bucket, key)
		if err != nil {
			return err
		}
		e, n := wer.Errors(sentences[i], t.Text)
		edits, words = edits+e, words+n
		// Every word must lie inside its clip, in order.
		for j, w := range t.Words {
			timed++
			if w.Start < 0 || w.End < w.Start || w.End > t.DurationSec+0.01 || j > 0 && w.Start < t.Words[j-1].End-1e-6 {
				misplaced++
				fmt.Printf("   word %q at %.2f-%.2f s is outside the %.2f s clip or out of order\n", w.Word, w.Start, w.End, t.DurationSec)
			}
		}
		fmt.Printf("%s  (%.1fs audio, %d words timed)\n   source:     %s\n   transcript: %s\n   WER %.2f\n",
			key, t.DurationSec, len(t.Words), sentences[i], t.Text, float64(e)/float64(n))
	}
	overall := float64(edits) / float64(words)
	fmt.Printf("\noverall WER %.3f over %d words\n", overall, words)
	var verr error
	if overall > *maxWER {
		verr = fmt.Errorf("overall WER %.3f is above %.2f", overall, *maxWER)
	}

	step("a vocabulary: the dictations with cardiology and without (TXT, words under 0.5 confidence marked [word?])")
	termsWith, termsWithout, terms := 0, 0, 0
	for i, d := range dictations {
		var txt, text [2]string // the TXT rendering (marked), the transcript's text
		for k, prefix := range []string{"dictations/", "dictations-plain/"} {
			key := fmt.Sprintf("%sdictation-%d.wav", prefix, i+1)
			b, err := localaws.ReadOutput(ctx, s3c, outBucket, bucket, key, ".txt")
			if err != nil {
				return err
			}
			t, err := localaws.ReadTranscript(ctx, s3c, outBucket, bucket, key)
			if err != nil {
				return err
			}
			txt[k], text[k] = strings.TrimSpace(b), strings.ToLower(t.Text)
		}
		for _, term := range cardiology {
			if !strings.Contains(d.text, strings.ToLower(term)) {
				continue
			}
			terms++
			if strings.Contains(text[0], strings.ToLower(term)) {
				termsWith++
			}
			if strings.Contains(text[1], strings.ToLower(term)) {
				termsWithout++
			}
		}
		fmt.Printf("   source:            %s\n   with cardiology:   %s\n   without:           %s\n", d.text, txt[0], txt[1])
	}
	fmt.Printf("   key terms heard: %d of %d with the vocabulary, %d without\n", termsWith, terms, termsWithout)

	step("who spoke: the consult, diarized (TXT rendering)")
	ct, err := localaws.ReadTranscript(ctx, s3c, outBucket, bucket, consultKey)
	if err != nil {
		return err
	}
	txt, err := localaws.ReadOutput(ctx, s3c, outBucket, bucket, consultKey, ".txt")
	if err != nil {
		return err
	}
	fmt.Print(indent(txt))
	refTurns, _ := diarscore.Reference(consult)
	hypTurns, _ := diarscore.Hypothesis(ct)
	score := diarscore.DER(refTurns, hypTurns, 0.25)
	found := len(ct.Speakers)
	fmt.Printf("   schema %s, %d speakers found (%d voices), %d turns, %.1f s overlapped; DER %.3f (collar 0.25 s, overlap scored): missed %.1f s, false alarm %.1f s, confusion %.1f s of %.1f s\n",
		ct.Schema, found, len(consult.Voices), len(ct.SpeakerTurns), overlapOf(ct), score.DER, score.Missed, score.FalseAlarm, score.Conf, score.Total)
	if ct.SpeakerError != nil {
		verr = errors.Join(verr, fmt.Errorf("consult diarization failed: %s: %s", ct.SpeakerError.Class, ct.SpeakerError.Message))
	}
	if score.DER > *maxDER {
		verr = errors.Join(verr, fmt.Errorf("consult DER %.3f is above %.2f", score.DER, *maxDER))
	}

	step("who spoke: the stereo call, a speaker a channel (WebVTT voices)")
	kt, err := localaws.ReadTranscript(ctx, s3c, outBucket, bucket, callKey)
	if err != nil {
		return err
	}
	vtt, err := localaws.ReadOutput(ctx, s3c, outBucket, bucket, callKey, ".vtt")
	if err != nil {
		return err
	}
	fmt.Print(indent(firstLines(vtt, 14)))
	onChannel, channelWords := diarscore.ChannelWords(call, kt)
	fmt.Printf("   %d of %d words on their channel's speaker; speakers %s\n", onChannel, channelWords, speakerList(kt))
	if onChannel != channelWords || channelWords == 0 {
		verr = errors.Join(verr, fmt.Errorf("%d of %d call words on the wrong channel's speaker", channelWords-onChannel, channelWords))
	}
	if misplaced > 0 {
		verr = errors.Join(verr, fmt.Errorf("%d of %d words outside their clip or out of order", misplaced, timed))
	}
	if visible+inflight != 0 {
		verr = errors.Join(verr, fmt.Errorf("queue not drained: %d visible, %d in flight", visible, inflight))
	}
	fmt.Printf("RESULT clips=%d wer=%.2f words_timed=%d words_misplaced=%d der=%.3f speakers=%d/%d channel_words=%d/%d vocabulary_terms=%d/%d without=%d/%d\n",
		len(keys), overall, timed, misplaced, score.DER, found, len(consult.Voices), onChannel, channelWords, termsWith, terms, termsWithout, terms)
	return verr
}

// uploadFormats are the encodings the demo's uploads take in turn.
var uploadFormats = []struct {
	ext  string
	args []string
}{
	{"wav", []string{"-ac", "1"}},
	{"mp3", []string{"-ar", "44100", "-ac", "2", "-c:a", "libmp3lame", "-b:a", "96k"}},
	{"m4a", []string{"-ar", "44100", "-ac", "1", "-c:a", "aac", "-b:a", "64k"}},
}

func step(s string) { fmt.Printf("==> %s\n", s) }

func overlapOf(t contract.Transcript) float64 {
	if t.Diarization == nil {
		return 0
	}
	return t.Diarization.OverlapSeconds
}

func speakerList(t contract.Transcript) string {
	var s []string
	for _, sp := range t.Speakers {
		s = append(s, fmt.Sprintf("%s (%.1f s, %d words)", sp.Label, sp.TalkSeconds, sp.Words))
	}
	return strings.Join(s, ", ")
}

func indent(s string) string {
	var b strings.Builder
	for line := range strings.SplitSeq(strings.TrimRight(s, "\n"), "\n") {
		b.WriteString("   " + line + "\n")
	}
	return b.String()
}

func firstLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) <= n {
		return s
	}
	return strings.Join(lines[:n], "\n") + "\n...\n"
}
