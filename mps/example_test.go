package mps_test

import (
	"fmt"
	"strings"

	"github.com/fleetscribe/fleetscribe/mps"
)

// Four partitions on one GPU, each an MPS client capped at the default 50%
// of the SMs (a cap, not a share: the caps may add up to more than 100).
func ExamplePlan() {
	ps, err := mps.Plan(mps.PlanConfig{GPUs: []int{0}, PerGPU: 4, BasePort: 8001})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, p := range ps {
		fmt.Println(p.Name(), p.GRPCPort, strings.Join(p.Env(mps.Dirs{Pipe: "/tmp/nvidia-mps", Log: "/var/log/nvidia-mps"})[3:], " "))
	}
	fmt.Println(strings.Join(mps.Addrs("localhost", ps), ","))
	// Output:
	// gpu0-p0 8001 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
	// gpu0-p1 8004 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
	// gpu0-p2 8007 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
	// gpu0-p3 8010 CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50
	// localhost:8001,localhost:8004,localhost:8007,localhost:8010
}
