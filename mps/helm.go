package mps

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// How a Kubernetes pod's partitions share its GPUs (the Helm chart's
// plan.sharing).
const (
	// KubeMPS: the pod holds its node's GPUs whole and runs its own MPS
	// daemon and partitions (`worker mps run` in one container), at the
	// plan's thread percentage, as compose does.
	KubeMPS = "mps"
	// KubeDevicePluginMPS: one container per partition, each holding one
	// replica of the NVIDIA device plugin's MPS sharing. The plugin's daemon
	// caps every client at 100/replicas of the SMs and 1/replicas of the
	// memory, and a client cannot raise either (measured: docs/kubernetes.md).
	KubeDevicePluginMPS = "device-plugin-mps"
	// KubeDevicePluginTimeSlicing: one container per partition, each
	// holding one replica of the device plugin's time-slicing.
	KubeDevicePluginTimeSlicing = "device-plugin-timeslicing"
)

// KubeSharings are the sharing modes of the Helm chart, in the order the
// chart's plan files are listed.
var KubeSharings = []string{KubeMPS, KubeDevicePluginMPS, KubeDevicePluginTimeSlicing}

// KubeDefaultPerGPU is the partitions per GPU of each sharing mode, as the
// GPU benchmark measured (docs/benchmarks.md, docs/kubernetes.md): eight
// MPS clients; four time-sliced processes (eight time-sliced served less).
func KubeDefaultPerGPU(sharing string) int {
	if sharing == KubeDevicePluginTimeSlicing {
		return 4
	}
	return DefaultPerGPU
}

// KubePlan is the plan of one pod: what the chart's templates read, both
// for the partitions' containers and for the worker's -triton-addrs.
type KubePlan struct {
	Sharing string
	GPUs    int // GPUs of the pod (device indices 0..GPUs-1 inside it)
	PerGPU  int
	// ThreadPercentage is each partition's cap of SMs: the plan's for
	// KubeMPS, 100/PerGPU (what the device plugin sets) for
	// KubeDevicePluginMPS, 100 for time-slicing.
	ThreadPercentage int
	// RunArgs are the plan flags of `worker mps run` for KubeMPS: given
	// them, the run starts exactly Partitions. Empty otherwise.
	RunArgs    []string
	Partitions []Partition
}

// PlanKube lays out the partitions of a pod with gpus GPUs. perGPU 0 takes
// KubeDefaultPerGPU; pct 0 the default of the mode (pct is refused where
// the device plugin decides it).
func PlanKube(sharing string, gpus, perGPU, pct, basePort int) (KubePlan, error) {
	if gpus < 1 {
		return KubePlan{}, errors.New("a pod needs at least one GPU")
	}
	if perGPU == 0 {
		perGPU = KubeDefaultPerGPU(sharing)
	}
	ids := make([]int, gpus)
	for i := range ids {
		ids[i] = i
	}
	c := PlanConfig{GPUs: ids, PerGPU: perGPU, BasePort: basePort}
	switch sharing {
	case KubeMPS:
		c.Sharing, c.Percentage = SharingMPS, pct
	case KubeDevicePluginMPS:
		if pct != 0 {
			return KubePlan{}, errors.New("with device-plugin-mps the device plugin sets each replica's thread percentage (100/replicas); -percentage does not apply")
		}
		c.Sharing, c.Percentage = SharingMPS, max(1, 100/perGPU)
	case KubeDevicePluginTimeSlicing:
		if pct != 0 {
			return KubePlan{}, errors.New("time-slicing has no thread percentage")
		}
		c.Sharing = SharingTimeSliced
	default:
		return KubePlan{}, fmt.Errorf("sharing %q: want %s, %s or %s", sharing, KubeMPS, KubeDevicePluginMPS, KubeDevicePluginTimeSlicing)
	}
	ps, err := Plan(c)
	if err != nil {
		return KubePlan{}, err
	}
	kp := KubePlan{Sharing: sharing, GPUs: gpus, PerGPU: perGPU, ThreadPercentage: ps[0].ThreadPercentage, Partitions: ps}
	if sharing == KubeMPS {
		kp.RunArgs = []string{
			"-gpus=0-" + strconv.Itoa(gpus-1),
			"-per-gpu=" + strconv.Itoa(perGPU),
			"-percentage=" + strconv.Itoa(kp.ThreadPercentage),
			"-base-port=" + strconv.Itoa(basePort),
		}
	}
	return kp, nil
}

// Values renders the plan as Helm values (a plan: block). command is the
// header's note of how to regenerate it.
func (k KubePlan) Values(command string) []byte {
	q := strconv.Quote
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated from the MPS plan: %d GPU(s) x %d partition(s), sharing %s.\n", k.GPUs, k.PerGPU, k.Sharing)
	fmt.Fprintf(&b, "# Do not edit; regenerate with `%s`.\n", command)
	b.WriteString("# The chart runs these partitions and gives the worker their addresses.\n")
	b.WriteString("plan:\n")
	fmt.Fprintf(&b, "  sharing: %s\n", k.Sharing)
	fmt.Fprintf(&b, "  gpus: %d\n", k.GPUs)
	fmt.Fprintf(&b, "  perGPU: %d\n", k.PerGPU)
	fmt.Fprintf(&b, "  threadPercentage: %d\n", k.ThreadPercentage)
	if len(k.RunArgs) == 0 {
		b.WriteString("  runArgs: []\n")
	} else {
		b.WriteString("  runArgs:\n")
		for _, a := range k.RunArgs {
			fmt.Fprintf(&b, "    - %s\n", q(a))
		}
	}
	b.WriteString("  partitions:\n")
	for _, p := range k.Partitions {
		fmt.Fprintf(&b, "    - {name: %s, grpcPort: %d, httpPort: %d, metricsPort: %d}\n", p.Name(), p.GRPCPort, p.HTTPPort, p.MetricsPort)
	}
	return b.Bytes()
}
