// Command worker drains an SQS queue of transcription jobs into a pool of
// Triton partitions and writes transcripts to S3. Every flag can also be
// set through the environment variable printed by -help (FLEETSCRIBE_...).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/pprof"
	"strings"
	"syscall"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"github.com/fleetscribe/fleetscribe/fleet"
	"github.com/fleetscribe/fleetscribe/internal/awsconf"
	"github.com/fleetscribe/fleetscribe/internal/flagenv"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

// EnvPrefix prefixes the environment variable of every flag.
const EnvPrefix = "FLEETSCRIBE"

// Summary heads -help.
const Summary = "worker: drain an SQS queue of audio keys through Triton into S3 transcripts\n\n" +
	"  worker mps ...           plan MPS partitions and run them (worker mps -help)\n" +
	"  worker drain [-addr A]   ask the worker at A (default 127.0.0.1:9100) to drain, as SIGTERM does"

type config struct {
	worker      worker.Config
	pool        triton.PoolConfig
	model       triton.ModelIO
	aws         awsconf.Config
	metricsAddr string
	logLevel    string
	imds        string
	imdsURL     string
	imdsEvery   time.Duration
	margin      time.Duration
	rebalance   bool
	protect     bool
	protectIdle time.Duration
	asgName     string
	asEndpoint  string
	gpus        int
	cpuProfile  string
	memProfile  string
}

func (c *config) registerFlags(fs *flag.FlagSet) flagenv.Layout {
	return flagenv.Register(fs, c.sections()...)
}

// sections are the worker's flags by section, as -help and
// docs/configuration.md show them.
func (c *config) sections() []flagenv.Section {
	return append(c.worker.Sections(),
		flagenv.Section{Title: "Triton partitions", Register: c.pool.RegisterFlags},
		flagenv.Section{Title: "Model", Register: c.model.RegisterFlags},
		flagenv.Section{Title: "AWS", Register: c.aws.RegisterFlags},
		flagenv.Section{Title: "EC2 and Auto Scaling", Register: c.registerFleetFlags},
		flagenv.Section{Title: "Metrics, logs and profiles", Register: c.registerOpsFlags},
	)
}

func (c *config) registerFleetFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.imds, "imds", "auto", "watch EC2 instance metadata (IMDSv2): on, off, or auto (on where IMDS answers)\nFor spot interruption notices, rebalance recommendations and Auto Scaling termination.")
	fs.StringVar(&c.imdsURL, "imds-endpoint", fleet.DefaultEndpoint, "instance metadata service address")
	fs.DurationVar(&c.imdsEvery, "imds-interval", 5*time.Second, "how often instance metadata is polled")
	fs.DurationVar(&c.margin, "interruption-margin", 15*time.Second, "on a spot interruption notice, finish or release jobs this long before the instance goes")
	fs.BoolVar(&c.rebalance, "drain-on-rebalance", false, "treat an EC2 rebalance recommendation like a termination: stop receiving and drain\nOff by default: an Auto Scaling group with capacity rebalancing launches a replacement and then terminates this instance through its drain, and a worker that stopped at the recommendation would leave GPUs idle that still count as capacity.")
	fs.BoolVar(&c.protect, "scale-in-protection", false, "protect this instance from scale-in while it holds jobs, unprotect it when idle\nNeeds -asg-name and instance metadata. SetInstanceProtection is called when the first job is taken and after -scale-in-protection-idle without one, not per job.")
	fs.DurationVar(&c.protectIdle, "scale-in-protection-idle", 30*time.Second, "how long the worker must hold no job before its instance is unprotected")
	fs.StringVar(&c.asgName, "asg-name", "", "this instance's Auto Scaling group: on every log line, and for -scale-in-protection")
	fs.StringVar(&c.asEndpoint, "autoscaling-endpoint", "", "override endpoint for Auto Scaling (tests); empty uses AWS")
}

func (c *config) registerOpsFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.metricsAddr, "metrics-addr", ":9100", "listen address of /metrics, /healthz and /readyz (empty: off)\n/healthz is liveness; /readyz is the queues reachable, the output bucket writable and a partition ready, /readyz?local=1 a partition ready. The default is every interface, as a container's published port needs: on a host, 127.0.0.1:9100 keeps it local.")
	fs.IntVar(&c.gpus, "gpus", 1, "GPUs the partitions run on (the MPS plan's override sets it)\nExported as fleetscribe_gpus, for throughput per GPU.")
	fs.StringVar(&c.cpuProfile, "cpu-profile", "", "write a Go CPU profile of the whole run to this file (for go tool pprof)")
	fs.StringVar(&c.memProfile, "mem-profile", "", "write a Go allocation profile to this file at exit (for go tool pprof)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn, error")
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	var err error
	if len(os.Args) > 1 && os.Args[1] == "mps" {
		err = runMPS(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else if len(os.Args) > 1 && os.Args[1] == "drain" {
		err = runDrain(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else if len(os.Args) > 1 && os.Args[1] == "ready" {
		err = runReady(ctx, os.Args[2:], os.Stdout, os.Stderr)
	} else {
		err = run(ctx, os.Args[1:], os.Stderr)
	}
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
	fs.Usage = flagenv.Usage(fs, EnvPrefix, Summary, cfg.registerFlags(fs))
	if err := flagenv.Apply(fs, EnvPrefix, nil); err != nil {
		return err
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	level, err := cfg.validate()
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	cfg.derive(worker.MemoryLimit())
	stop, err := cfg.profile()
	if err != nil {
		return err
	}
	defer stop()
	lc := zerolog.New(stderr).Level(level).With().Timestamp().Str("component", "worker")
	if cfg.asgName != "" {
		// The fleet's log metric filters count jobs by group: a canary's
		// failures against the fleet's.
		lc = lc.Str("group", cfg.asgName)
	}
	log := lc.Logger()

	reg := prometheus.NewRegistry()
	registerProcessMetrics(reg, cfg)
	cfg.pool.OnSharedMemoryError = func(partition string, err error) {
		log.Warn().Err(err).Str("partition", partition).Msg("shared memory with this partition failed; while its region is not registered, its chunks go in the gRPC request")
	}
	pool, err := triton.NewPool(cfg.pool, cfg.model, reg)
	if err != nil {
		return fmt.Errorf("triton pool: %w", err)
	}
	defer func() { _ = pool.Close() }()
	if b := pool.SharedMemoryBytes(); b > 0 {
		// The regions' pages are the worker's memory too.
		if cfg.worker.Jobs.MemoryBudget == 0 {
			cfg.worker.Jobs.MemoryBudget = worker.MemoryBudgetBeside(b)
		}
		log.Info().Int64("bytes", b).Int("partitions", len(cfg.pool.Addrs)).Int64("memory_budget", cfg.worker.Jobs.MemoryBudget).Msg("shared memory reserved")
	}
	sqsc, s3c, err := cfg.aws.Clients(ctx)
	if err != nil {
		return err
	}
	deps := worker.Deps{Model: cfg.model.Model, SQS: sqsc, S3: s3c, Transcriber: pool, Log: log, Metrics: reg,
		TakesVocabulary: cfg.model.TakesVocabulary()}
	if cfg.model.DiarizeModel != "" {
		deps.Diarizer, deps.DiarizeModel = pool, cfg.model.DiarizeModel
	}
	w, err := worker.New(cfg.worker, deps)
	if err != nil {
		return err
	}

	wctx, cancel := context.WithTimeout(ctx, max(cfg.pool.StartTimeout, time.Second))
	err = pool.WaitReady(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	log.Info().Strs("partitions", cfg.pool.Addrs).Str("model", cfg.model.Model).Msg("triton ready")

	// POST /drain (from this host only: a Kubernetes preStop hook, `worker
	// drain`) starts the drain SIGTERM starts.
	ctx, drain := context.WithCancelCause(ctx)
	defer drain(nil)
	parts := []part{{name: "triton health checks", run: pool.Run}}
	if cfg.metricsAddr != "" {
		p, err := metricsPart(ctx, cfg, log, reg, w, pool, drain)
		if err != nil {
			return err
		}
		parts = append(parts, p)
	}
	if p, err := fleetPart(ctx, cfg, log, w); err != nil {
		return err
	} else if p != nil {
		parts = append(parts, *p)
	}
	if cfg.protect {
		p, err := protectionPart(ctx, cfg, log, w, reg)
		if err != nil {
			return fmt.Errorf("scale-in protection: %w", err)
		}
		parts = append(parts, p)
	}
	return runGroup(ctx, log, w.Run, parts...)
}

// validate checks the configuration as a whole, each section and what
// spans sections (chunks must fit the model's largest bucket), and returns
// the log level it names.
func (c *config) validate() (zerolog.Level, error) {
	if err := c.worker.Validate(); err != nil {
		return 0, err
	}
	if err := c.model.Validate(); err != nil {
		return 0, err
	}
	if m := c.model.MaxChunk(); m > 0 && int(c.worker.Audio.ChunkSeconds*modelspec.SampleRate) > m {
		return 0, fmt.Errorf("-chunk-seconds %g is longer than the largest bucket (%gs): chunks must fit a bucket", c.worker.Audio.ChunkSeconds, float64(m)/modelspec.SampleRate)
	}
	if c.gpus < 1 {
		return 0, errors.New("-gpus must be at least 1")
	}
	level, err := zerolog.ParseLevel(c.logLevel)
	if err != nil {
		return 0, fmt.Errorf("log level: %w", err)
	}
	return level, nil
}

// derive sets what follows from the rest, for a process whose memory
// limit is limit: the S3 connections every job in hand may need, the
// pool's chunk size, and its shared-memory budget (a quarter of the limit,
// unless given).
func (c *config) derive(limit int64) {
	// Every job in hand may have a request or two to S3 in flight, and
	// each call past the idle pool would open a new connection.
	c.aws.IdleConnsPerHost = 2*c.worker.Jobs.Concurrency + 16
	c.pool.ChunkSamples = int(c.worker.Audio.ChunkSeconds * modelspec.SampleRate)
	if c.pool.SharedMemoryBudget == 0 {
		c.pool.SharedMemoryBudget = limit / 4
	}
}

// profile starts the CPU profile and arranges the allocation profile the
// flags ask for; stop ends both.
func (c *config) profile() (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return stop, fmt.Errorf("cpu profile: %w", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return stop, fmt.Errorf("cpu profile: %w", err)
		}
		stops = append(stops, func() { pprof.StopCPUProfile(); _ = f.Close() })
	}
	if path := c.memProfile; path != "" {
		stops = append(stops, func() {
			if f, err := os.Create(path); err == nil {
				_ = pprof.Lookup("allocs").WriteTo(f, 0)
				_ = f.Close()
			}
		})
	}
	return stop, nil
}

// metricsPart serves /metrics, /healthz, /readyz (the worker and a ready
// partition; its detail, the engines the partitions run) and POST /drain,
// which calls drain.
func metricsPart(ctx context.Context, cfg config, log zerolog.Logger, reg *prometheus.Registry, w *worker.Worker, pool *triton.Pool,
	drain context.CancelCauseFunc) (part, error) {
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.metricsAddr)
	if err != nil {
		return part{}, fmt.Errorf("metrics listener: %w", err)
	}
	log.Info().Str("addr", lis.Addr().String()).Msg("metrics listening")
	ready := func(local bool) error {
		if !local {
			if err := w.Ready(); err != nil {
				return err
			}
		}
		if pool.Healthy() == 0 {
			return errors.New("no triton partition ready")
		}
		return nil
	}
	return part{name: "metrics server", run: func(ctx context.Context) error {
		detail := func() string { return triton.EngineSummary(pool.Engines(), len(cfg.pool.Addrs)) }
		return serveMetrics(ctx, lis, reg, ready, detail, func() {
			log.Info().Msg("drain requested over HTTP")
			drain(errDrainRequested)
		})
	}}, nil
}

// registerProcessMetrics registers what the process exports besides the
// worker's and the pool's own metrics.
func registerProcessMetrics(reg prometheus.Registerer, cfg config) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gpus := prometheus.NewGauge(prometheus.GaugeOpts{Name: "fleetscribe_gpus", Help: "GPUs this worker's partitions run on."})
	gpus.Set(float64(cfg.gpus))
	reg.MustRegister(gpus)
}

// part is a long-running piece of the process besides the worker.
type part struct {
	name string
	run  func(context.Context) error
}

// errPartStopped is returned when a helper stops on its own.
var errPartStopped = errors.New("stopped unexpectedly")

// runGroup runs the worker and its helpers in one group: the worker stops
// (and drains) when ctx is done or any helper fails, and the helpers stop
// once the worker has returned. The first failure is returned.
func runGroup(ctx context.Context, log zerolog.Logger, work func(context.Context) error, parts ...part) error {
	g, gctx := errgroup.WithContext(ctx)
	// Helpers outlive a signal: the pool and metrics serve the drain.
	helpers, stopHelpers := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHelpers()
	g.Go(func() error {
		defer stopHelpers()
		err := work(gctx)
		log.Info().Err(err).Msg("worker stopped")
		return err
	})
	for _, p := range parts {
		g.Go(func() error {
			// A helper failing cancels gctx, which stops the worker. helpers
			// is cancelled only once the worker has returned.
			err := p.run(helpers)
			if helpers.Err() != nil {
				log.Info().Str("part", p.name).Msg("stopped")
				return nil
			}
			if err == nil {
				err = errPartStopped
			}
			log.Error().Str("part", p.name).Err(err).Msg("stopped while the worker runs; shutting down")
			return fmt.Errorf("%s: %w", p.name, err)
		})
	}
	return g.Wait()
}

// fleetPart watches instance metadata, where that is on, and turns each
// notice into an interruption of the worker.
func fleetPart(ctx context.Context, cfg config, log zerolog.Logger, w *worker.Worker) (*part, error) {
	watcher := &fleet.Watcher{Endpoint: cfg.imdsURL, Interval: cfg.imdsEvery, Log: log.With().Str("part", "fleet signals").Logger()}
	switch cfg.imds {
	case "off":
		return nil, nil
	case "auto":
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := watcher.Probe(pctx)
		cancel()
		if err != nil {
			log.Info().Err(err).Msg("no instance metadata service; not watching for spot or Auto Scaling signals")
			return nil, nil
		}
	case "on":
	default:
		return nil, fmt.Errorf("config: -imds %q: want on, off or auto", cfg.imds)
	}
	return &part{name: "fleet signals", run: func(ctx context.Context) error {
		return watcher.Run(ctx, func(n fleet.Notice) {
			in := worker.Interruption{Reason: n.Kind}
			switch n.Kind {
			case fleet.KindSpot:
				in.Deadline = n.Deadline.Add(-cfg.margin)
			case fleet.KindRebalance:
				if !cfg.rebalance {
					log.Info().Msg("rebalance recommendation: carrying on; capacity rebalancing replaces this instance through its drain (-drain-on-rebalance to stop now)")
					return
				}
			}
			w.Interrupt(in)
		})
	}}, nil
}

// protectionPart keeps the instance protected from scale-in while the
// worker holds jobs. It runs as a helper, so it outlives the drain and
// leaves the instance unprotected once the worker has returned.
func protectionPart(ctx context.Context, cfg config, log zerolog.Logger, w *worker.Worker, reg prometheus.Registerer) (part, error) {
	if cfg.asgName == "" {
		return part{}, errors.New("-asg-name is required")
	}
	if cfg.imds == "off" {
		return part{}, errors.New("needs instance metadata for the instance id (-imds on or auto)")
	}
	watcher := &fleet.Watcher{Endpoint: cfg.imdsURL}
	ictx, cancel := context.WithTimeout(ctx, 10*time.Second)
	id, err := watcher.InstanceID(ictx)
	cancel()
	if err != nil {
		return part{}, err
	}
	awsCfg, err := cfg.aws.Load(ctx)
	if err != nil {
		return part{}, err
	}
	api := autoscaling.NewFromConfig(awsCfg, func(o *autoscaling.Options) {
		if cfg.asEndpoint != "" {
			o.BaseEndpoint = aws.String(cfg.asEndpoint)
		}
	})
	p := &fleet.Protector{API: api, Group: cfg.asgName, InstanceID: id, InHand: w.InHand, Idle: cfg.protectIdle,
		Log: log.With().Str("part", "scale-in protection").Logger()}
	p.Register(reg)
	log.Info().Str("instance", id).Str("group", cfg.asgName).Msg("scale-in protection on while jobs are in hand")
	return part{name: "scale-in protection", run: p.Run}, nil
}

// serveMetrics serves /metrics, /healthz and /readyz. /readyz?local=1 asks
// only what this instance can fix (the worker's partitions), not whether
// the queues answer: every instance shares those, and an instance health
// check that replaced the fleet on an SQS outage would only make it worse.
func serveMetrics(ctx context.Context, lis net.Listener, reg *prometheus.Registry, ready func(local bool) error, detail func() string, drain func()) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		// The first line is the verdict; the second says what the
		// partitions run (an eager encoder or no decoder graphs on a GPU
		// serves a fraction of what it could).
		if err := ready(r.URL.Query().Get("local") == "1"); err != nil {
			http.Error(w, "not ready: "+err.Error()+"\n"+detail(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n" + detail() + "\n"))
	})
	mux.HandleFunc("/drain", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST to drain", http.StatusMethodNotAllowed)
			return
		}
		if !fromLoopback(r.RemoteAddr) {
			http.Error(w, "drain is only taken from this host", http.StatusForbidden)
			return
		}
		drain()
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte("draining\n"))
	})
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

// errDrainRequested is the cause of a drain asked for over HTTP.
var errDrainRequested = errors.New("drain requested")

func fromLoopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// runDrain is `worker drain`: ask the worker of this host (or pod) to stop
// receiving and finish the jobs in hand, as SIGTERM does. A Kubernetes
// preStop hook runs it, so the drain starts whatever process gets the
// signal, and the grace period counts from there.
func runDrain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker drain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9100", "the worker's -metrics-addr, on this host")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := callWorker(ctx, http.MethodPost, "http://"+*addr+"/drain", http.StatusAccepted, stdout); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// runReady is `worker ready`: the worker's /readyz at -addr (the Helm
// chart's `helm test` runs it against the worker's Service). It prints the
// answer (the verdict, and what the partitions run) and fails unless the
// worker is ready.
func runReady(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker ready", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "127.0.0.1:9100", "the worker's -metrics-addr")
	local := fs.Bool("local", false, "ask only what the worker's own partitions decide (/readyz?local=1)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	url := "http://" + *addr + "/readyz"
	if *local {
		url += "?local=1"
	}
	if err := callWorker(ctx, http.MethodGet, url, http.StatusOK, stdout); err != nil {
		return fmt.Errorf("ready: %w", err)
	}
	return nil
}

// callWorker sends method to a worker's url, writes the answer's body to
// stdout when its status is want, and is an error with the body otherwise.
func callWorker(ctx context.Context, method, url string, want int, stdout io.Writer) error {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, method, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != want {
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	_, err = stdout.Write(body)
	return err
}
