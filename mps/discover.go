package mps

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// GPU is one device as nvidia-smi reports it.
type GPU struct {
	Index     int
	UUID      string
	Name      string
	MemoryMiB int
}

// Discover lists the GPUs of this host through nvidia-smi (the binary
// named, or "nvidia-smi" from PATH).
func Discover(ctx context.Context, nvidiaSMI string) ([]GPU, error) {
	if nvidiaSMI == "" {
		nvidiaSMI = "nvidia-smi"
	}
	cmd := exec.CommandContext(ctx, nvidiaSMI, "--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("discover GPUs (%s): %w: %s", nvidiaSMI, err, bytes.TrimSpace(stderr.Bytes()))
	}
	return ParseGPUs(string(out))
}

// ParseGPUs reads nvidia-smi's
// --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits.
func ParseGPUs(out string) ([]GPU, error) {
	var gpus []GPU
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Split(line, ",")
		if len(f) != 4 {
			return nil, fmt.Errorf("nvidia-smi: unexpected line %q", line)
		}
		idx, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi: bad index in %q", line)
		}
		mem, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(f[3]), "MiB")))
		gpus = append(gpus, GPU{Index: idx, UUID: strings.TrimSpace(f[1]), Name: strings.TrimSpace(f[2]), MemoryMiB: mem})
	}
	if len(gpus) == 0 {
		return nil, fmt.Errorf("nvidia-smi lists no GPUs")
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	return gpus, nil
}

// ParseGPUList reads device indices as the -gpus flag gives them: "0",
// "0,1,3" or a range "0-7".
func ParseGPUList(s string) ([]int, error) {
	bad := fmt.Errorf("GPUs %q: want device indices (0,1,3) or a range (0-3)", s)
	var out []int
	for f := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(f), "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, bad
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a || b-a > 64 {
				return nil, bad
			}
		}
		for i := a; i <= b; i++ {
			out = append(out, i)
		}
	}
	return out, nil
}
