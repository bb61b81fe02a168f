package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/mps"
	"github.com/fleetscribe/fleetscribe/triton"
)

const mpsUsage = `worker mps: plan CUDA MPS partitions from the GPUs present and run them

  worker mps plan     [flags]             the partitions, ports and the worker's addresses
  worker mps compose  [flags] [-o FILE]   docker-compose.override.yml for this host
  worker mps up       [flags]             write the override and docker compose up -d
  worker mps down     [flags]             docker compose down
  worker mps run      [flags] -- CMD...   run the plan as host processes (no containers):
                                          the MPS daemon, CMD per partition, restarts,
                                          FAULT recovery; {grpc_port} etc. in CMD are filled in
  worker mps status   [flags]             MPS servers, their state and clients per GPU
                                          against the plan; -recover restarts faulted
                                          partitions; exit 1 on any problem
  worker mps helm     [helm flags] [-o FILE]
                                          the plan of one Kubernetes pod as Helm values
                                          for deploy/helm/fleetscribe (-gpus is a count)

Every subcommand takes the plan flags below; the same flags give the same
plan, so the host and the worker's -triton-addrs cannot disagree.
`

// mpsFlags are the plan and where things are.
type mpsFlags struct {
	gpus, nvidiaSMI, control, pipe, logDir string
	perGPU, pct, basePort                  int
	memLimit                               string
	projectDir, out, format, host, sharing string
	recover, partitions, startDaemon       bool
	checkEvery                             time.Duration
	jobsPerGPU                             int
	logDriver                              string
	logOpts                                stringList
}

func (f *mpsFlags) register(fs *flag.FlagSet, sub string) {
	fs.StringVar(&f.gpus, "gpus", "auto", "GPUs to partition: auto (every GPU nvidia-smi lists), device indices (0,1,3) or a range (0-7)")
	fs.IntVar(&f.perGPU, "per-gpu", mps.DefaultPerGPU, "partitions (Triton servers, MPS clients) per GPU (8: the GPU benchmark's best, docs/benchmarks.md)")
	fs.IntVar(&f.pct, "percentage", 0, "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE of each partition (0: 100 for one or two per GPU, 50 for more, as measured)")
	fs.IntVar(&f.basePort, "base-port", 8001, "gRPC port of the first partition; each takes three (gRPC, HTTP, metrics)")
	fs.StringVar(&f.memLimit, "mem-limit", "", "device memory each partition may pin (CUDA_MPS_PINNED_DEVICE_MEM_LIMIT), e.g. 30G (empty: no cap)")
	fs.StringVar(&f.nvidiaSMI, "nvidia-smi", "nvidia-smi", "nvidia-smi binary, for -gpus auto")
	fs.StringVar(&f.pipe, "pipe-dir", "/tmp/nvidia-mps", "CUDA_MPS_PIPE_DIRECTORY shared by the daemon and the partitions")
	fs.StringVar(&f.logDir, "log-dir", "/var/log/nvidia-mps", "CUDA_MPS_LOG_DIRECTORY")
	switch sub {
	case "plan":
		fs.StringVar(&f.sharing, "sharing", mps.SharingMPS, "how a GPU's partitions share it: mps or timesliced (see worker mps run)")
		fs.StringVar(&f.format, "format", "table", "table, json, addrs (the worker's -triton-addrs for -host) or compose-addrs")
		fs.StringVar(&f.host, "host", "127.0.0.1", "host of the partitions' addresses, for -format addrs")
	case "compose", "up":
		fs.StringVar(&f.out, "o", map[string]string{"compose": "-", "up": "docker-compose.override.yml"}[sub], "file to write (-: standard output)")
		fs.StringVar(&f.projectDir, "project-dir", ".", "folder of docker-compose.yml")
		fs.IntVar(&f.jobsPerGPU, "jobs-per-gpu", 16, "the worker's default -concurrency per planned GPU (FLEETSCRIBE_CONCURRENCY, where the environment does not set it; 0: leave it to the compose file)")
		fs.StringVar(&f.logDriver, "log-driver", "", "Docker logging driver of every service, e.g. awslogs (empty: Docker's default)")
		fs.Var(&f.logOpts, "log-opt", "an option of -log-driver, key=value (repeatable), e.g. awslogs-group=/fleetscribe/prod")
	case "down":
		fs.StringVar(&f.projectDir, "project-dir", ".", "folder of docker-compose.yml")
	case "run":
		// Only plan and run take it: the compose rendering always runs the
		// MPS daemon beside the partitions.
		fs.StringVar(&f.sharing, "sharing", mps.SharingMPS, "how a GPU's partitions share it: mps (clients of the MPS daemon) or timesliced (plain processes, no daemon; also on hosts without GPUs)")
		fs.StringVar(&f.control, "mps-control", "nvidia-cuda-mps-control", "nvidia-cuda-mps-control binary")
		fs.BoolVar(&f.startDaemon, "start-daemon", true, "start the MPS control daemon (and quit it at the end)")
		fs.DurationVar(&f.checkEvery, "check-interval", 5*time.Second, "how often the daemon's servers are checked for FAULT")
	case "status":
		fs.StringVar(&f.control, "mps-control", "nvidia-cuda-mps-control", "how to reach the daemon: its binary, or a command such as \"docker compose exec -T mps nvidia-cuda-mps-control\"")
		fs.StringVar(&f.format, "format", "table", "table or json")
		fs.BoolVar(&f.partitions, "partitions", false, "also ask each planned partition over gRPC whether it is ready, at -host")
		fs.StringVar(&f.host, "host", "127.0.0.1", "host of the partitions, for -partitions")
		fs.BoolVar(&f.recover, "recover", false, "when a server is in FAULT, restart the partitions' compose services (docker compose restart)")
		fs.StringVar(&f.projectDir, "project-dir", ".", "folder of docker-compose.yml, for -recover")
	}
}

func (f *mpsFlags) plan(ctx context.Context) ([]mps.Partition, error) {
	var gpus []int
	if f.gpus == "auto" {
		found, err := mps.Discover(ctx, f.nvidiaSMI)
		if err != nil {
			return nil, err
		}
		for _, g := range found {
			gpus = append(gpus, g.Index)
		}
	} else {
		var err error
		if gpus, err = mps.ParseGPUList(f.gpus); err != nil {
			return nil, err
		}
	}
	return mps.Plan(mps.PlanConfig{GPUs: gpus, PerGPU: f.perGPU, BasePort: f.basePort, Percentage: f.pct, MemLimit: f.memLimit, Sharing: f.sharing})
}

func (f *mpsFlags) dirs() mps.Dirs { return mps.Dirs{Pipe: f.pipe, Log: f.logDir} }

func (f *mpsFlags) controlFor() *mps.Control {
	argv := strings.Fields(f.control)
	return &mps.Control{Bin: argv[0], Args: argv[1:], Dirs: f.dirs()}
}

// runMPS is `worker mps ...`.
func runMPS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
		fmt.Fprint(stderr, mpsUsage)
		if len(args) == 0 {
			return errors.New("mps: name a subcommand")
		}
		return flag.ErrHelp
	}
	sub := args[0]
	if sub == "helm" {
		return runMPSHelm(args[1:], stdout, stderr)
	}
	var f mpsFlags
	fs := flag.NewFlagSet("worker mps "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	f.register(fs, sub)
	fs.Usage = func() {
		fmt.Fprint(stderr, mpsUsage, "\nflags of "+sub+":\n")
		fs.PrintDefaults()
	}
	switch sub {
	case "plan", "compose", "up", "down", "run", "status":
	default:
		fs.Usage()
		return fmt.Errorf("mps: unknown subcommand %q", sub)
	}
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if sub != "run" && fs.NArg() > 0 {
		return fmt.Errorf("mps %s: unexpected arguments %q", sub, fs.Args())
	}
	if sub == "down" {
		return dockerCompose(ctx, f.projectDir, stdout, stderr, "down")
	}
	plan, err := f.plan(ctx)
	if err != nil {
		return fmt.Errorf("mps %s: %w", sub, err)
	}
	switch sub {
	case "plan":
		return printPlan(stdout, plan, f)
	case "compose", "up":
		cc := mps.DefaultComposeConfig()
		cc.Dirs = f.dirs()
		cc.Command = "worker mps compose " + strings.Join(planArgs(fs), " ")
		cc.JobsPerGPU = f.jobsPerGPU
		cc.LogDriver, cc.LogOpts = f.logDriver, f.logOpts
		if f.jobsPerGPU < 0 {
			return fmt.Errorf("mps %s: -jobs-per-gpu must be at least 0", sub)
		}
		for _, kv := range f.logOpts {
			if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
				return fmt.Errorf("mps %s: -log-opt %q: want key=value", sub, kv)
			}
		}
		if len(f.logOpts) > 0 && f.logDriver == "" {
			return fmt.Errorf("mps %s: -log-opt needs -log-driver", sub)
		}
		body := mps.Compose(plan, cc)
		if f.out == "-" {
			_, err = stdout.Write(body)
			return err
		}
		path := f.out
		if !filepath.IsAbs(path) && sub == "up" {
			path = filepath.Join(f.projectDir, path)
		}
		if err := writeFileAtomic(path, body); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s: %d partitions on GPUs %v\n", path, len(plan), mps.GPUs(plan))
		if sub == "up" {
			return dockerCompose(ctx, f.projectDir, stdout, stderr, "up", "-d")
		}
		return nil
	case "run":
		if fs.NArg() == 0 {
			return errors.New("mps run: give the partition's command after --, e.g. -- tritonserver --model-repository=/models --grpc-port={grpc_port} --http-port={http_port} --metrics-port={metrics_port}")
		}
		log := zerolog.New(stderr).With().Timestamp().Str("component", "mps").Logger()
		s := &mps.Supervisor{Plan: plan, Control: f.controlFor(), Command: fs.Args(), StartDaemon: f.startDaemon,
			CheckEvery: f.checkEvery, Output: stderr, Log: log}
		log.Info().Strs("addrs", mps.Addrs("127.0.0.1", plan)).Msg("running the plan; give the worker these -triton-addrs")
		return s.Run(ctx)
	default: // status
		return mpsStatus(ctx, stdout, stderr, plan, f)
	}
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, v)
	return nil
}

// planArgs are the plan flags as given, for the generated file's header.
func planArgs(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "o", "project-dir":
		default:
			out = append(out, "-"+fl.Name+"="+fl.Value.String())
		}
	})
	return out
}

func printPlan(w io.Writer, plan []mps.Partition, f mpsFlags) error {
	switch f.format {
	case "json":
		type row struct {
			mps.Partition
			Name, Service, Addr string
			Env                 []string
		}
		var rows []row
		for _, p := range plan {
			rows = append(rows, row{p, p.Name(), mps.ServiceName(p), mps.Addrs(f.host, []mps.Partition{p})[0], p.Env(f.dirs())})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rows)
	case "addrs":
		_, err := fmt.Fprintln(w, strings.Join(mps.Addrs(f.host, plan), ","))
		return err
	case "compose-addrs":
		_, err := fmt.Fprintln(w, strings.Join(mps.ComposeAddrs(plan), ","))
		return err
	case "table":
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "PARTITION\tGPU\tTHREADS %\tGRPC\tHTTP\tMETRICS\tMEM LIMIT")
		for _, p := range plan {
			mem := p.MemLimit
			if mem == "" {
				mem = "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\n", p.Name(), p.GPU, p.ThreadPercentage, p.GRPCPort, p.HTTPPort, p.MetricsPort, mem)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		_, err := fmt.Fprintf(w, "\n-triton-addrs (host processes): %s\n-triton-addrs (compose):       %s\n",
			strings.Join(mps.Addrs(f.host, plan), ","), strings.Join(mps.ComposeAddrs(plan), ","))
		return err
	}
	return fmt.Errorf("mps plan: unknown -format %q", f.format)
}

// mpsStatus compares the daemon's servers and clients with the plan and,
// with -partitions, asks each partition whether it is ready.
func mpsStatus(ctx context.Context, stdout, stderr io.Writer, plan []mps.Partition, f mpsFlags) error {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := f.controlFor().Status(sctx)
	if err != nil {
		return fmt.Errorf("mps status: daemon: %w", err)
	}
	rows, problems := mps.CheckPlan(plan, st)
	ready := map[string]string{}
	if f.partitions {
		io := triton.DefaultModelIO()
		for _, addr := range mps.Addrs(f.host, plan) {
			ready[addr] = "ready"
			c, err := triton.Dial(addr, io)
			if err == nil {
				var ok bool
				ok, err = c.Ready(sctx)
				_ = c.Close()
				if err == nil && !ok {
					err = errors.New("not ready")
				}
			}
			if err != nil {
				ready[addr] = err.Error()
				problems = append(problems, fmt.Sprintf("partition %s: %v", addr, err))
			}
		}
	}
	if f.format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(map[string]any{"servers": st.Servers, "gpus": rows, "partitions": ready, "problems": problems}); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SERVER\tSTATE")
		for _, s := range st.Servers {
			fmt.Fprintf(tw, "%d\t%s\n", s.PID, s.State)
		}
		fmt.Fprintln(tw, "\nGPU\tPLANNED\tCLIENTS\tCLIENT PIDS")
		for _, r := range rows {
			fmt.Fprintf(tw, "%d\t%d\t%d\t%v\n", r.GPU, r.Planned, len(r.Clients), r.Clients)
		}
		if f.partitions {
			fmt.Fprintln(tw, "\nPARTITION\tADDRESS\tREADY")
			for i, addr := range mps.Addrs(f.host, plan) {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", plan[i].Name(), addr, ready[addr])
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(stdout, "problem:", p)
		}
	}
	if f.recover && len(st.Faulted()) > 0 {
		services := []string{"restart"}
		for _, p := range plan {
			services = append(services, mps.ServiceName(p))
		}
		fmt.Fprintln(stderr, "mps status: a server is in FAULT; restarting every partition")
		if err := dockerCompose(ctx, f.projectDir, stdout, stderr, services...); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("mps status: %d problem(s)", len(problems))
	}
	return nil
}

func dockerCompose(ctx context.Context, dir string, stdout, stderr io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "docker", append([]string{"compose"}, args...)...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, stdout, stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("docker compose %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

func writeFileAtomic(path string, body []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-"+filepath.Base(path))
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(body); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// runMPSHelm is `worker mps helm`: the plan of one pod, as the Helm chart's
// plan values. The chart's plans/ are these files (make docs writes them).
func runMPSHelm(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("worker mps helm", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sharing := fs.String("sharing", mps.KubeMPS, "how the pod's partitions share its GPUs: mps (the pod's own MPS daemon), device-plugin-mps or device-plugin-timeslicing (replicas of the NVIDIA device plugin)")
	gpus := fs.Int("gpus", 1, "GPUs of one pod (the node's, for one pod per node)")
	perGPU := fs.Int("per-gpu", 0, "partitions per GPU (0: 8 for MPS, 4 for time-slicing, as measured)")
	pct := fs.Int("percentage", 0, "thread percentage of each partition, for -sharing mps (0: the plan's default)")
	basePort := fs.Int("base-port", 8001, "gRPC port of the first partition; each takes three (gRPC, HTTP, metrics)")
	out := fs.String("o", "-", "file to write (-: standard output)")
	fs.Usage = func() {
		fmt.Fprint(stderr, mpsUsage, "\nflags of helm:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("mps helm: unexpected arguments %q", fs.Args())
	}
	kp, err := mps.PlanKube(*sharing, *gpus, *perGPU, *pct, *basePort)
	if err != nil {
		return fmt.Errorf("mps helm: %w", err)
	}
	body := kp.Values("worker mps helm " + strings.Join(planArgs(fs), " "))
	if *out == "-" {
		_, err = stdout.Write(body)
		return err
	}
	return writeFileAtomic(*out, body)
}
