package mps

import (
	"strings"
	"testing"
)

// A pod's plan: the defaults the GPU benchmark chose per sharing mode, the
// percentage the device plugin imposes, and what is refused.
func TestPlanKube(t *testing.T) {
	for _, c := range []struct {
		sharing          string
		gpus, perGPU     int
		wantParts, wantP int
	}{
		{KubeMPS, 1, 0, 8, 50},
		{KubeMPS, 4, 2, 8, 100},
		{KubeDevicePluginMPS, 8, 0, 64, 12}, // 100/8, as the plugin sets it
		{KubeDevicePluginMPS, 2, 4, 8, 25},
		{KubeDevicePluginTimeSlicing, 4, 0, 16, 100},
	} {
		kp, err := PlanKube(c.sharing, c.gpus, c.perGPU, 0, 8001)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if len(kp.Partitions) != c.wantParts || kp.ThreadPercentage != c.wantP || kp.Partitions[len(kp.Partitions)-1].GPU != c.gpus-1 {
			t.Errorf("%+v: %d partitions at %d%%, last on GPU %d", c, len(kp.Partitions), kp.ThreadPercentage, kp.Partitions[len(kp.Partitions)-1].GPU)
		}
		if (len(kp.RunArgs) > 0) != (c.sharing == KubeMPS) {
			t.Errorf("%s: run args %q", c.sharing, kp.RunArgs)
		}
	}
	for _, c := range []struct {
		sharing   string
		gpus, pct int
		want      string
	}{
		{KubeDevicePluginMPS, 1, 25, "the device plugin sets each replica's thread percentage"},
		{KubeDevicePluginTimeSlicing, 1, 50, "no thread percentage"},
		{"mig", 1, 0, `sharing "mig"`},
		{KubeMPS, 0, 0, "at least one GPU"},
		{KubeMPS, 1, 101, "outside 1..100"},
	} {
		if _, err := PlanKube(c.sharing, c.gpus, 0, c.pct, 8001); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want %q", c, err, c.want)
		}
	}
}
