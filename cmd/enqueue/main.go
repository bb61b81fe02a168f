// Command enqueue sends transcription jobs to a worker queue: for keys, S3
// prefixes, an S3 Inventory or a list of keys in a file, narrowed by
// filters and by skip-if-done, resumable from a checkpoint (backfills,
// overnight reprocessing after a model change). `enqueue redrive` moves
// dead-lettered jobs back after a fix; `enqueue status` shows a
// pipeline's queues.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatch"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatch/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/mattn/go-isatty"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/enqueue"
	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/internal/flagext"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "FLEETSCRIBE"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "enqueue:", err)
		os.Exit(1)
	}
}

const usage = `enqueue [flags] [key | s3://bucket/key ...]   send jobs (see flags below)
enqueue redrive [flags]                        move dead-lettered jobs back to their queue
enqueue status [flags]                         show queues, DLQs, drain rate and ETA
enqueue vocabulary create|list|show|delete     manage the custom vocabularies jobs name`

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "send":
			return runSend(ctx, args[1:], stdin, stdout, stderr)
		case "redrive":
			return runRedrive(ctx, args[1:], stdout, stderr)
		case "status":
			return runStatus(ctx, args[1:], stdout, stderr)
		case "vocabulary":
			return runVocabulary(ctx, args[1:], stdin, stdout, stderr)
		}
	}
	return runSend(ctx, args, stdin, stdout, stderr)
}

// awsFlags registers the AWS flags on fs; the clients are built from the
// returned config once flags are parsed.
func awsFlags(fs *flag.FlagSet) *awsconf.Config {
	var c awsconf.Config
	c.RegisterFlags(fs)
	return &c
}

func parse(fs *flag.FlagSet, args []string, summary string) error {
	fs.Usage = flagenv.Usage(fs, EnvPrefix, summary, flagenv.All(fs))
	if err := flagenv.Apply(fs, EnvPrefix, nil); err != nil {
		return err
	}
	return fs.Parse(args)
}

func logger(w io.Writer) zerolog.Logger {
	return zerolog.New(w).With().Timestamp().Str("component", "enqueue").Logger()
}

func logFunc(log zerolog.Logger) func(string, error) {
	return func(msg string, err error) {
		if err != nil {
			log.Warn().Err(err).Msg(msg)
		} else {
			log.Warn().Msg(msg)
		}
	}
}

// queueURL accepts a queue URL or a queue name.
func queueURL(ctx context.Context, c *sqs.Client, v string) (string, error) {
	if v == "" || strings.HasPrefix(v, "https://") || strings.HasPrefix(v, "http://") {
		return v, nil
	}
	out, err := c.GetQueueUrl(ctx, &sqs.GetQueueUrlInput{QueueName: aws.String(v)})
	if err != nil {
		return "", fmt.Errorf("queue %q: %w", v, err)
	}
	return aws.ToString(out.QueueUrl), nil
}

func runSend(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	awsc := awsFlags(fs)
	o := enqueue.Defaults()
	var (
		prefixes, suffixes, include, exclude, formats flagext.StringSliceCSV
		minSize, maxSize, after, before, progress     string
		speakers, vocabulary                          string
	)
	fs.StringVar(&o.QueueURL, "queue-url", "", "queue to send to: URL or name (the live or the bulk queue; required)")
	fs.StringVar(&o.Sources.Bucket, "bucket", "", "input bucket of -prefix, key arguments and bare keys in -from-file")
	fs.Var(&prefixes, "prefix", "comma-separated key prefixes to list in -bucket; each is listed in parallel over its sub-prefixes")
	fs.StringVar(&o.Sources.Inventory, "inventory", "", "S3 Inventory manifest (s3://bucket/.../manifest.json, CSV format) to read keys from")
	fs.StringVar(&o.Sources.File, "from-file", "", "file with one key or s3://bucket/key per line (- for stdin)")
	fs.Var(&suffixes, "suffix", "comma-separated key endings to keep (e.g. .wav,.mp3)")
	fs.Var(&include, "include", "comma-separated glob patterns a key must match (a pattern without '/' matches the file name)")
	fs.Var(&exclude, "exclude", "comma-separated glob patterns of keys to leave out")
	fs.StringVar(&minSize, "min-size", "", "smallest object to keep (bytes, or with a unit: 10KiB, 5MB)")
	fs.StringVar(&maxSize, "max-size", "", "largest object to keep")
	fs.StringVar(&after, "modified-after", "", "keep objects last modified at or after this time (RFC 3339 or YYYY-MM-DD)")
	fs.StringVar(&before, "modified-before", "", "keep objects last modified before this time")
	fs.BoolVar(&o.SkipDone, "skip-done", false, "leave out inputs whose transcript for this model already exists (needs -output-bucket)")
	fs.StringVar(&o.OutputBucket, "output-bucket", "", "the worker's output bucket, for -skip-done")
	fs.StringVar(&o.WorkerOutputPrefix, "worker-output-prefix", o.WorkerOutputPrefix, "the worker's -output-prefix, for -skip-done when -job-output-prefix is not set")
	fs.StringVar(&o.WorkerModel, "worker-model", o.WorkerModel, "the worker's -model, for -skip-done when -job-model is not set")
	fs.StringVar(&o.CheckMode, "skip-check", o.CheckMode, "how -skip-done looks for transcripts: list (list the output prefix around each 1,000 keys) or head (HeadObject per key)")
	fs.IntVar(&o.CheckConcurrency, "check-concurrency", o.CheckConcurrency, "HeadObject calls in flight at once")
	fs.Float64Var(&o.CheckRate, "check-rate", 0, "S3 calls per second of the skip check (0: unlimited)")
	fs.IntVar(&o.ListConcurrency, "list-concurrency", o.ListConcurrency, "prefixes or inventory files listed at once")
	fs.IntVar(&o.ListDepth, "list-depth", o.ListDepth, "levels of sub-prefixes ('/') to fan the listing out over (0: one flat listing per prefix)")
	fs.Float64Var(&o.Rate, "rate", 0, "messages sent per second at most (0: unlimited)")
	fs.IntVar(&o.SendConcurrency, "send-concurrency", o.SendConcurrency, "SendMessageBatch calls in flight at once")
	fs.IntVar(&o.Attempts, "attempts", o.Attempts, "tries per message before it counts as failed")
	fs.BoolVar(&o.DryRun, "dry-run", false, "print the jobs on stdout instead of sending them")
	fs.StringVar(&o.Checkpoint, "checkpoint", "", "journal file: a run interrupted by Ctrl-C, a crash or a lost network resumes from it when run again with the same flags")
	fs.StringVar(&progress, "progress", "auto", "progress output: bar (a terminal), log (a JSON line per -progress-interval), none, or auto (bar on a terminal, else log)")
	fs.DurationVar(&o.ProgressInterval, "progress-interval", o.ProgressInterval, "time between progress log lines")
	fs.StringVar(&o.Job.OutputPrefix, "job-output-prefix", "", "output prefix written into each job (empty: the worker's)")
	fs.StringVar(&o.Job.Model, "job-model", "", "model written into each job (empty: the worker's)")
	fs.IntVar(&o.Job.Priority, "job-priority", 0, "priority written into each job")
	fs.Var(&formats, "job-formats", "comma-separated extra output formats: txt,srt,vtt")
	fs.StringVar(&speakers, "job-speakers", "", "speakers written into each job: on, off, or hints such as max=2 or min=2,max=4 (empty: the queue's default)")
	fs.StringVar(&o.Job.Channels, "job-channels", "", "channels written into each job: split (each channel transcribed alone, its own speaker) or mix (empty: the queue's default)")
	fs.StringVar(&vocabulary, "job-vocabulary", "", "the stored vocabulary written into each job, by name, or off (empty: the queue's default; see enqueue vocabulary)")
	if err := parse(fs, args, usage); err != nil {
		return err
	}
	hints, err := contract.ParseSpeakerHints(speakers)
	if err != nil {
		return fmt.Errorf("-job-speakers: %w", err)
	}
	o.Job.Speakers = hints
	switch vocabulary {
	case "":
	case "off":
		o.Job.Vocabulary = &contract.Vocabulary{Off: true}
	default:
		if err := contract.CheckVocabularyName(vocabulary); err != nil {
			return fmt.Errorf("-job-vocabulary: %w", err)
		}
		o.Job.Vocabulary = &contract.Vocabulary{Name: vocabulary}
	}
	o.Sources.Prefixes, o.Sources.Keys, o.Sources.Stdin = prefixes, fs.Args(), stdin
	o.Filter.Suffixes, o.Filter.Include, o.Filter.Exclude, o.Job.Formats = suffixes, include, exclude, formats
	if o.Filter.MinSize, err = enqueue.ParseSize(minSize); err != nil {
		return err
	}
	if o.Filter.MaxSize, err = enqueue.ParseSize(maxSize); err != nil {
		return err
	}
	if o.Filter.After, err = enqueue.ParseTime(after); err != nil {
		return err
	}
	if o.Filter.Before, err = enqueue.ParseTime(before); err != nil {
		return err
	}
	if o.QueueURL == "" && !o.DryRun {
		return errors.New("-queue-url is required")
	}
	if err := o.Validate(); err != nil {
		return err
	}
	log := logger(stderr)
	o.Log = logFunc(log)
	o.DryRunOut = stdout
	switch progress {
	case "auto":
		if isTerminal(stderr) {
			o.Progress = enqueue.NewBarProgress(stderr)
		} else {
			o.Progress = &enqueue.LogProgress{Log: log}
		}
	case "bar":
		o.Progress = enqueue.NewBarProgress(stderr)
	case "log":
		o.Progress = &enqueue.LogProgress{Log: log}
	case "none":
	default:
		return fmt.Errorf("-progress %q: want auto, bar, log or none", progress)
	}
	awsc.IdleConnsPerHost = max(o.CheckConcurrency, o.SendConcurrency, o.ListConcurrency) + 8
	sqsc, s3c, err := awsc.Clients(ctx)
	if err != nil {
		return err
	}
	if o.QueueURL, err = queueURL(ctx, sqsc, o.QueueURL); err != nil {
		return err
	}
	sum, err := enqueue.Run(ctx, s3c, sqsc, o)
	fmt.Fprintln(stdout, sum)
	if err != nil && ctx.Err() != nil && o.Checkpoint != "" {
		return fmt.Errorf("interrupted; run again with the same flags to resume from %s", o.Checkpoint)
	}
	return err
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func runRedrive(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("enqueue redrive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	awsc := awsFlags(fs)
	var (
		o       enqueue.RedriveOptions
		classes flagext.StringSliceCSV
		match   string
	)
	fs.StringVar(&o.DLQURL, "dlq-url", "", "dead-letter queue to move messages from: URL or name (required)")
	fs.StringVar(&o.ToURL, "to", "", "queue to move them to: URL or name (empty: the DLQ's source queue)")
	fs.Var(&classes, "class", "comma-separated error classes: move only messages whose error record has one ("+enqueue.ClassNone+": no record)")
	fs.StringVar(&match, "error-match", "", "move only messages whose error record's error matches this regular expression")
	fs.StringVar(&o.OutputBucket, "output-bucket", "", "the worker's output bucket, where error records are (needed with -class or -error-match)")
	fs.StringVar(&o.WorkerOutputPrefix, "worker-output-prefix", "transcripts/", "the worker's -output-prefix")
	fs.StringVar(&o.WorkerModel, "worker-model", "asr", "the worker's -model")
	fs.IntVar(&o.Max, "max", 0, "move at most this many messages (0: all)")
	fs.DurationVar(&o.Hold, "hold", 15*time.Minute, "messages that are not moved stay hidden this long at most, and are released when the run ends")
	fs.BoolVar(&o.Manual, "manual", false, "receive, send and delete even where SQS offers StartMessageMoveTask")
	fs.BoolVar(&o.DryRun, "dry-run", false, "count what would move; move nothing")
	if err := parse(fs, args, "enqueue redrive [flags]: move dead-lettered jobs back to their queue"); err != nil {
		return err
	}
	if o.DLQURL == "" {
		return errors.New("-dlq-url is required")
	}
	o.Classes = classes
	if match != "" {
		re, err := regexp.Compile(match)
		if err != nil {
			return fmt.Errorf("-error-match: %w", err)
		}
		o.Match = re
	}
	o.Log = logFunc(logger(stderr))
	o.ReportTo = stderr
	o.WaitSeconds = 1
	sqsc, s3c, err := awsc.Clients(ctx)
	if err != nil {
		return err
	}
	if o.DLQURL, err = queueURL(ctx, sqsc, o.DLQURL); err != nil {
		return err
	}
	if o.ToURL, err = queueURL(ctx, sqsc, o.ToURL); err != nil {
		return err
	}
	sum, err := enqueue.Redrive(ctx, sqsc, s3c, o)
	fmt.Fprintln(stdout, sum)
	if err == nil && sum.Failed > 0 {
		err = fmt.Errorf("%d messages could not be moved; they are still in the DLQ", sum.Failed)
	}
	return err
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("enqueue status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	awsc := awsFlags(fs)
	var (
		queues flagext.StringSliceCSV
		window time.Duration
	)
	fs.Var(&queues, "queue-url", "comma-separated queues (URLs or names); each is shown with its DLQ")
	fs.DurationVar(&window, "window", 10*time.Second, "sampling window of the drain rate (0: no rate or ETA)")
	if err := parse(fs, args, "enqueue status [flags]: read-only view of queues, DLQs, drain rate and ETA"); err != nil {
		return err
	}
	queues = append(queues, fs.Args()...)
	if len(queues) == 0 {
		return errors.New("give -queue-url")
	}
	cfg, err := awsc.Load(ctx)
	if err != nil {
		return err
	}
	sqsc, _, err := awsconf.Local(cfg, awsc.Endpoint)
	if err != nil {
		return err
	}
	for i, q := range queues {
		if queues[i], err = queueURL(ctx, sqsc, q); err != nil {
			return err
		}
	}
	var age enqueue.OldestAge
	if awsc.Endpoint == "" {
		age = cloudWatchAge(cloudwatch.NewFromConfig(cfg))
	}
	qs, err := enqueue.Status(ctx, sqsc, queues, window, age)
	if err != nil {
		return err
	}
	return enqueue.WriteStatus(stdout, qs)
}

// cloudWatchAge reads ApproximateAgeOfOldestMessage of the last minutes.
func cloudWatchAge(cw *cloudwatch.Client) enqueue.OldestAge {
	return func(ctx context.Context, name string) (time.Duration, bool) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		now := time.Now()
		out, err := cw.GetMetricStatistics(ctx, &cloudwatch.GetMetricStatisticsInput{
			Namespace: aws.String("AWS/SQS"), MetricName: aws.String("ApproximateAgeOfOldestMessage"),
			Dimensions: []cwtypes.Dimension{{Name: aws.String("QueueName"), Value: aws.String(name)}},
			StartTime:  aws.Time(now.Add(-10 * time.Minute)), EndTime: aws.Time(now), Period: aws.Int32(60),
			Statistics: []cwtypes.Statistic{cwtypes.StatisticMaximum},
		})
		if err != nil || len(out.Datapoints) == 0 {
			return 0, false
		}
		latest := out.Datapoints[0]
		for _, d := range out.Datapoints[1:] {
			if aws.ToTime(d.Timestamp).After(aws.ToTime(latest.Timestamp)) {
				latest = d
			}
		}
		return time.Duration(aws.ToFloat64(latest.Maximum) * float64(time.Second)), true
	}
}

const vocabularyUsage = `enqueue vocabulary create -output-bucket B -name N -from-file F   phrases, one a line (- for stdin), checked, written to s3://B/vocabularies/N.json
enqueue vocabulary list -output-bucket B                          names, phrase counts, sizes; invalid ones with their problem
enqueue vocabulary show -output-bucket B -name N                  the phrases, one a line
enqueue vocabulary delete -output-bucket B -name N`

// runVocabulary is `enqueue vocabulary create|list|show|delete`: the
// custom vocabularies in the worker's output bucket that jobs name.
func runVocabulary(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, vocabularyUsage)
		return errors.New("enqueue vocabulary: give create, list, show or delete")
	}
	verb := args[0]
	fs := flag.NewFlagSet("enqueue vocabulary "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	awsc := awsFlags(fs)
	var bucket, name, file string
	fs.StringVar(&bucket, "output-bucket", "", "the worker's output bucket (required)")
	fs.StringVar(&name, "name", "", "the vocabulary's name: letters, digits, '.', '-' and '_' (create, show, delete)")
	fs.StringVar(&file, "from-file", "", "create: the phrases, one a line, '#' starts a comment (- for stdin)")
	if err := parse(fs, args[1:], vocabularyUsage); err != nil {
		return err
	}
	if bucket == "" {
		return errors.New("give -output-bucket")
	}
	if verb != "list" && name == "" {
		return errors.New("give -name")
	}
	_, s3c, err := awsc.Clients(ctx)
	if err != nil {
		return err
	}
	switch verb {
	case "create":
		in := stdin
		if file == "" {
			return errors.New("give -from-file (- for stdin)")
		}
		if file != "-" {
			f, err := os.Open(file)
			if err != nil {
				return err
			}
			defer func() { _ = f.Close() }()
			in = f
		}
		phrases, err := enqueue.ReadPhrases(in)
		if err != nil {
			return err
		}
		key, err := enqueue.CreateVocabulary(ctx, s3c, bucket, name, phrases)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "vocabulary %s: %d phrases in s3://%s/%s\n", name, len(contract.NormalizePhrases(phrases)), bucket, key)
	case "list":
		list, err := enqueue.ListVocabularies(ctx, s3c, bucket)
		if err != nil {
			return err
		}
		for _, v := range list {
			if v.Problem != "" {
				fmt.Fprintf(stdout, "%s\tinvalid\t%d bytes\t%s\t%s\n", v.Name, v.Bytes, v.Modified.UTC().Format(time.RFC3339), v.Problem)
				continue
			}
			fmt.Fprintf(stdout, "%s\t%d phrases\t%d bytes\t%s\n", v.Name, v.Phrases, v.Bytes, v.Modified.UTC().Format(time.RFC3339))
		}
	case "show":
		sv, err := enqueue.GetVocabulary(ctx, s3c, bucket, name)
		if err != nil {
			return err
		}
		for _, p := range sv.Phrases {
			fmt.Fprintln(stdout, p)
		}
	case "delete":
		if err := enqueue.DeleteVocabulary(ctx, s3c, bucket, name); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "vocabulary %s deleted\n", name)
	default:
		fmt.Fprintln(stderr, vocabularyUsage)
		return fmt.Errorf("enqueue vocabulary %s: give create, list, show or delete", verb)
	}
	return nil
}
