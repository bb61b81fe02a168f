// Command worker drains an SQS queue of transcription jobs into a pool of
// Triton partitions and writes transcripts to S3. Every flag can also be
// set through the environment variable printed by -help (FLEETSCRIBE_...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "FLEETSCRIBE"

type config struct {
	worker      worker.Config
	pool        triton.PoolConfig
	model       triton.ModelIO
	aws         awsconf.Config
	metricsAddr string
	logLevel    string
}

func (c *config) registerFlags(fs *flag.FlagSet) {
	c.worker.RegisterFlags(fs)
	c.pool.RegisterFlags(fs)
	c.model.RegisterFlags(fs)
	c.aws.RegisterFlags(fs)
	fs.StringVar(&c.metricsAddr, "metrics-addr", ":9100", "listen address of the /metrics and /healthz HTTP server (empty: off)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stderr *os.File) error {
	var cfg config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.registerFlags(fs)
	fs.Usage = flagenv.Usage(fs, EnvPrefix, "worker: drain an SQS queue of audio keys through Triton into S3 transcripts")
	if err := flagenv.Apply(fs, EnvPrefix, nil); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.worker.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	level, err := zerolog.ParseLevel(cfg.logLevel)
	if err != nil {
		return fmt.Errorf("config: log level: %w", err)
	}
	log := zerolog.New(stderr).Level(level).With().Timestamp().Str("component", "worker").Logger()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	pool, err := triton.NewPool(cfg.pool, cfg.model, reg)
	if err != nil {
		return fmt.Errorf("triton pool: %w", err)
	}
	defer func() { _ = pool.Close() }()
	sqsc, s3c, err := cfg.aws.Clients(ctx)
	if err != nil {
		return err
	}
	w, err := worker.New(cfg.worker, cfg.model.Model, sqsc, s3c, pool, log, reg)
	if err != nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err = pool.WaitReady(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	log.Info().Strs("partitions", cfg.pool.Addrs).Str("model", cfg.model.Model).Msg("triton ready")

	// The worker decides when to stop (signal or idle); the helpers stop with it.
	helpers, stopHelpers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHelpers()
	g, gctx := errgroup.WithContext(helpers)
	g.Go(func() error { return pool.Run(gctx) })
	if cfg.metricsAddr != "" {
		lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.metricsAddr)
		if err != nil {
			return fmt.Errorf("metrics listener: %w", err)
		}
		g.Go(func() error { return serveMetrics(gctx, lis, reg) })
		log.Info().Str("addr", lis.Addr().String()).Msg("metrics listening")
	}
	werr := w.Run(ctx)
	stopHelpers()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return werr
}

func serveMetrics(ctx context.Context, lis net.Listener, reg *prometheus.Registry) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lis) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-errc
		return nil
	}
}
