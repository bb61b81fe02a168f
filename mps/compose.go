package mps

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
)

// ComposeConfig says how partitions run as Docker Compose services.
type ComposeConfig struct {
	// Image is the Triton image (24.10: Triton 2.51.0, the release the
	// tests run, see docs/triton.md); compose variables are kept as written.
	Image string
	// ModelRepository is the host folder mounted at /models.
	ModelRepository string
	// Dirs are the MPS pipe and log directories inside the containers,
	// shared with the mps service through the volumes mps-pipe and mps-log.
	Dirs Dirs
	// Command is the header's note of how the file was made.
	Command string
	// JobsPerGPU, when above 0, sets the worker's default concurrency to
	// that many jobs per planned GPU (FLEETSCRIBE_CONCURRENCY, where the
	// environment does not set it), so an 8-GPU host holds eight times the
	// jobs of a 1-GPU one.
	JobsPerGPU int
	// LogDriver, when set, is the Docker logging driver of every service
	// (e.g. awslogs), with LogOpts as its options ("key=value").
	LogDriver string
	LogOpts   []string
}

// DefaultTritonImage is the GPU Triton image `make triton-image` builds
// (deploy/triton/Dockerfile: the pinned Triton release with NeMo), as a
// compose host that built it names it; a fleet pulls it from its ECR.
const DefaultTritonImage = "fleetscribe-triton:24.10-nemo2.7.3"

// CompileCacheDir is where the image keeps the compiled encoder's
// artefacts (FLEETSCRIBE_COMPILE_CACHE): one volume there for every
// partition of a host.
const CompileCacheDir = "/var/cache/fleetscribe/compile"

// DefaultComposeConfig is what the project's compose file expects.
func DefaultComposeConfig() ComposeConfig {
	return ComposeConfig{
		Image:           "${TRITON_IMAGE:-" + DefaultTritonImage + "}",
		ModelRepository: "${MODEL_REPOSITORY:-./deploy/triton/models}",
		Dirs:            Dirs{Pipe: "/tmp/nvidia-mps", Log: "/var/log/nvidia-mps"},
	}
}

// ServiceName is the compose service of a partition, e.g. "triton-gpu0-p2".
func ServiceName(p Partition) string { return "triton-" + p.Name() }

// ComposeAddrs are the gRPC addresses the worker dials when the partitions
// run as compose services: service name and the plan's port.
func ComposeAddrs(ps []Partition) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = ServiceName(p) + ":" + strconv.Itoa(p.GRPCPort)
	}
	return out
}

// GPUs returns the distinct devices of a plan, in plan order.
func GPUs(ps []Partition) []int {
	var out []int
	for _, p := range ps {
		if len(out) == 0 || out[len(out)-1] != p.GPU {
			out = append(out, p.GPU)
		}
	}
	return out
}

// Compose renders a compose override file (docker-compose.override.yml,
// which `docker compose` reads after docker-compose.yml) that runs the
// plan: the MPS daemon given every planned GPU, one Triton service per
// partition, and the worker's partition addresses and GPU count, so what
// the host runs and what the worker dials come from one plan.
//
// Every partition container is given all planned GPUs, in index order, and
// pinned to its own with CUDA_VISIBLE_DEVICES: device indices inside the
// container are then the host's, as they are for the MPS server the daemon
// starts.
func Compose(ps []Partition, c ComposeConfig) []byte {
	gpus := GPUs(ps)
	q := strconv.Quote
	ids, quoted := make([]string, len(gpus)), make([]string, len(gpus))
	for i, g := range gpus {
		ids[i] = strconv.Itoa(g)
		quoted[i] = q(ids[i])
	}
	devices := "[" + strings.Join(quoted, ", ") + "]"
	visible := strings.Join(ids, ",")

	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated from the MPS plan: %d GPU(s) x %d partition(s). Do not edit;\n", len(gpus), len(ps)/max(1, len(gpus)))
	cmd := c.Command
	if cmd == "" {
		cmd = "worker mps compose"
	}
	fmt.Fprintf(&b, "# regenerate with `%s`.\n", cmd)
	b.WriteString("# docker compose reads it after docker-compose.yml.\n")
	b.WriteString("x-gpus: &gpus\n  resources:\n    reservations:\n      devices:\n")
	fmt.Fprintf(&b, "        - driver: nvidia\n          device_ids: %s\n          capabilities: [gpu]\n\n", devices)
	logging := ""
	if c.LogDriver != "" {
		fmt.Fprintf(&b, "x-logging: &logging\n  driver: %s\n", q(c.LogDriver))
		if len(c.LogOpts) > 0 {
			b.WriteString("  options:\n")
			for _, kv := range c.LogOpts {
				k, v, _ := strings.Cut(kv, "=")
				// Compose interpolates $ in values; the options are literal.
				fmt.Fprintf(&b, "    %s: %s\n", q(k), q(strings.ReplaceAll(v, "$", "$$")))
			}
		}
		b.WriteString("\n")
		logging = "    logging: *logging\n"
	}
	b.WriteString("services:\n")
	b.WriteString("  mps:\n    environment:\n")
	fmt.Fprintf(&b, "      CUDA_VISIBLE_DEVICES: %s\n", q(visible))
	b.WriteString(logging)
	b.WriteString("    deploy: *gpus\n\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s:\n", ServiceName(p))
		fmt.Fprintf(&b, "    image: %s\n", q(c.Image))
		b.WriteString("    ipc: host\n")
		b.WriteString("    depends_on:\n      mps:\n        condition: service_started\n")
		b.WriteString("    volumes:\n")
		fmt.Fprintf(&b, "      - %s\n", q("mps-pipe:"+c.Dirs.Pipe))
		fmt.Fprintf(&b, "      - %s\n", q("mps-log:"+c.Dirs.Log))
		fmt.Fprintf(&b, "      - %s\n", q(c.ModelRepository+":/models:ro"))
		fmt.Fprintf(&b, "      - %s\n", q("compile-cache:"+CompileCacheDir))
		b.WriteString("    environment:\n")
		for _, kv := range p.Env(c.Dirs) {
			k, v, _ := strings.Cut(kv, "=")
			fmt.Fprintf(&b, "      %s: %s\n", k, q(v))
		}
		args := append([]string{"tritonserver"}, p.TritonArgs("/models")...)
		for i, a := range args {
			args[i] = q(a)
		}
		fmt.Fprintf(&b, "    command: [%s]\n", strings.Join(args, ", "))
		b.WriteString("    healthcheck:\n")
		fmt.Fprintf(&b, "      test: [\"CMD\", \"curl\", \"-fsS\", %s]\n", q(fmt.Sprintf("http://localhost:%d/v2/health/ready", p.HTTPPort)))
		// A partition compiles its encoder before it is ready: two to four
		// minutes from an empty cache with one length bucket, six with two.
		// Failures in start_period do not count.
		b.WriteString("      interval: 10s\n      timeout: 3s\n      retries: 30\n      start_period: 15m\n")
		b.WriteString("    restart: unless-stopped\n")
		b.WriteString(logging)
		b.WriteString("    deploy: *gpus\n\n")
	}
	b.WriteString("  worker:\n    environment:\n")
	fmt.Fprintf(&b, "      FLEETSCRIBE_TRITON_ADDRS: %s\n", q(strings.Join(ComposeAddrs(ps), ",")))
	fmt.Fprintf(&b, "      FLEETSCRIBE_GPUS: %s\n", q(strconv.Itoa(len(gpus))))
	if c.JobsPerGPU > 0 {
		fmt.Fprintf(&b, "      FLEETSCRIBE_CONCURRENCY: %s\n", q(fmt.Sprintf("${FLEETSCRIBE_CONCURRENCY:-%d}", c.JobsPerGPU*len(gpus))))
	}
	b.WriteString(logging)
	b.WriteString("    depends_on:\n")
	for _, p := range ps {
		fmt.Fprintf(&b, "      %s:\n        condition: service_healthy\n", ServiceName(p))
	}
	return b.Bytes()
}
