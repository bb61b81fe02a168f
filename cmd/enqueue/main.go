// Command enqueue sends transcription jobs to the queue: for the keys given
// as arguments, or for every object under an S3 prefix (backfills, bulk
// reprocessing after a model change). Messages go out ten per
// SendMessageBatch call; entries the queue refuses are retried with backoff.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "FLEETSCRIBE"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "enqueue:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		awsc    awsconf.Config
		opts    Options
		formats string
	)
	awsc.RegisterFlags(fs)
	fs.StringVar(&opts.QueueURL, "queue-url", "", "SQS queue URL (required)")
	fs.StringVar(&opts.Bucket, "bucket", "", "input bucket (required)")
	fs.StringVar(&opts.Prefix, "prefix", "", "enqueue every object under this prefix (instead of key arguments)")
	fs.StringVar(&opts.Suffix, "suffix", "", "with -prefix, only keys ending in this (e.g. .wav)")
	fs.StringVar(&opts.Template.OutputPrefix, "job-output-prefix", "", "output prefix written into each job (empty: the worker's)")
	fs.StringVar(&opts.Template.Model, "job-model", "", "model written into each job (empty: the worker's)")
	fs.IntVar(&opts.Template.Priority, "job-priority", 0, "priority written into each job")
	fs.StringVar(&formats, "job-formats", "", "comma-separated extra output formats: txt,srt,vtt")
	fs.IntVar(&opts.Attempts, "attempts", 5, "tries per message before giving up")
	fs.BoolVar(&opts.DryRun, "dry-run", false, "list the jobs without sending them")
	fs.Usage = flagenv.Usage(fs, EnvPrefix, "enqueue [flags] [key ...]: send transcription jobs for keys or an S3 prefix")
	if err := flagenv.Apply(fs, EnvPrefix, nil); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if formats != "" {
		opts.Template.Formats = strings.Split(formats, ",")
	}
	keys := fs.Args()
	if opts.QueueURL == "" || opts.Bucket == "" {
		return errors.New("-queue-url and -bucket are required")
	}
	if len(keys) > 0 && opts.Prefix != "" {
		return errors.New("give key arguments or -prefix, not both")
	}
	if len(keys) == 0 && opts.Prefix == "" {
		return errors.New("nothing to enqueue: give key arguments or -prefix")
	}
	sqsc, s3c, err := awsc.Clients(ctx)
	if err != nil {
		return err
	}
	e := &Enqueuer{SQS: sqsc, S3: s3c, Opts: opts, Log: stderr}
	var src KeySource
	if len(keys) > 0 {
		src = SliceKeys(keys)
	} else {
		src = e.ListKeys
	}
	st, err := e.Run(ctx, src)
	fmt.Fprintf(stdout, "enqueued %d jobs in %d batch calls (%d entry retries, %d failed)\n", st.Sent, st.Calls, st.Retried, st.Failed)
	if err == nil && st.Failed > 0 {
		err = fmt.Errorf("%d jobs could not be enqueued", st.Failed)
	}
	return err
}
