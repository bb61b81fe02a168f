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
	"syscall"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/asrserver"
	"github.com/fleetscribe/fleetscribe/asrserver/sphinx"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
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
	log.Info().Str("addr", lis.Addr().String()).Str("model", io.Model).Int("decoders", sc.Decoders).Msg("serving")
	err = asrserver.New(io, rec, "pocketsphinx").Serve(ctx, lis)
	log.Info().Err(err).Msg("stopped")
	return err
}
