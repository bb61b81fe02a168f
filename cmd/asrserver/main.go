// Command asrserver is a CPU stand-in for a Triton partition: a KServe v2
// gRPC server for the speech model contract, backed by pocketsphinx. It lets
// the worker, the demo and the integration tests run on a laptop. Build with
// -tags pocketsphinx.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/asrserver"
	"github.com/fleetscribe/fleetscribe/asrserver/sphinx"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/internal/flagext"
	"github.com/fleetscribe/fleetscribe/triton"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "asrserver:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("asrserver", flag.ContinueOnError)
	fs.Usage = flagenv.Usage(fs, "FLEETSCRIBE", "asrserver: KServe v2 speech server backed by pocketsphinx")
	addr := fs.String("listen", "127.0.0.1:8001", "gRPC listen address")
	model := fs.String("model", triton.DefaultModelIO().Model, "model name to serve")
	sc := sphinx.DefaultConfig()
	fs.StringVar(&sc.HMM, "sphinx-hmm", sc.HMM, "pocketsphinx acoustic model directory")
	fs.StringVar(&sc.LM, "sphinx-lm", sc.LM, "pocketsphinx language model")
	fs.StringVar(&sc.Dict, "sphinx-dict", sc.Dict, "pocketsphinx dictionary")
	fs.IntVar(&sc.Decoders, "decoders", sc.Decoders, "decoders in the pool (concurrent requests)")
	addrFile := fs.String("addr-file", "", "write the bound address to this file once listening (for -listen with port 0)")
	var batch asrserver.BatchConfig
	fs.IntVar(&batch.MaxBatchSize, "max-batch-size", 0, "most rows one batch takes (0: the number of decoders); a batch runs across the decoder pool")
	fs.Func("preferred-batch-sizes", "comma-separated batch sizes sent as soon as they can be formed", func(s string) error {
		var l flagext.StringSliceCSV
		_ = l.Set(s)
		batch.PreferredSizes = nil
		for _, v := range l {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				return fmt.Errorf("batch size %q", v)
			}
			batch.PreferredSizes = append(batch.PreferredSizes, n)
		}
		return nil
	})
	fs.DurationVar(&batch.MaxQueueDelay, "max-queue-delay", 2*time.Millisecond, "how long the oldest queued request may wait for a fuller batch")
	fs.IntVar(&batch.MaxQueueSize, "max-queue-size", 0, "queued requests beyond this get UNAVAILABLE (0: unbounded)")
	fs.IntVar(&batch.Instances, "instances", 2, "batches executed at once")
	fs.BoolVar(&batch.Ragged, "ragged", true, "batch requests of different lengths together (allow_ragged_batch)")
	if err := flagenv.Apply(fs, "FLEETSCRIBE_ASR", nil); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	log := zerolog.New(os.Stderr).With().Timestamp().Str("component", "asrserver").Logger()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	rec, err := sphinx.New(sc)
	if err != nil {
		return err
	}
	defer rec.Close()
	io := triton.DefaultModelIO()
	io.Model = *model
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", *addr)
	if err != nil {
		return err
	}
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(lis.Addr().String()), 0o644); err != nil {
			return err
		}
	}
	if batch.MaxBatchSize == 0 {
		batch.MaxBatchSize = sc.Decoders
	}
	srv := asrserver.New(io, rec, "pocketsphinx")
	srv.Batch = batch
	log.Info().Str("addr", lis.Addr().String()).Str("model", io.Model).Int("decoders", sc.Decoders).Int("max_batch_size", batch.MaxBatchSize).Msg("serving")
	err = srv.Serve(ctx, lis)
	st := srv.BatchStats()
	log.Info().Int("batches", st.Batches).Float64("mean_batch_size", st.MeanBatchSize()).Msg("batching")
	log.Info().Err(err).Msg("stopped")
	return err
}
