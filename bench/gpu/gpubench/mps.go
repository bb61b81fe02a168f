package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/fleetscribe/fleetscribe/mps"
)

// mpsCmd drives the MPS control daemon through package mps:
//
//	gpubench mps start -bin B -pipe P -log L
//	gpubench mps env -gpu 0 -index 1 -pct 25 -pipe P -log L   (prints export lines)
//	gpubench mps status -bin B -pipe P -log L
//	gpubench mps stop -bin B -pipe P -log L
func mpsCmd(args []string) error {
	if len(args) < 1 {
		return fmt.Errorf("usage: gpubench mps start|env|status|stop [flags]")
	}
	fs := flag.NewFlagSet("mps", flag.ContinueOnError)
	bin := fs.String("bin", "nvidia-cuda-mps-control", "path of nvidia-cuda-mps-control")
	pipe := fs.String("pipe", "/tmp/mps-pipe", "CUDA_MPS_PIPE_DIRECTORY")
	logDir := fs.String("log", "/tmp/mps-log", "CUDA_MPS_LOG_DIRECTORY")
	gpu := fs.Int("gpu", 0, "GPU of the partition (env)")
	index := fs.Int("index", 0, "partition index on its GPU (env)")
	pct := fs.Int("pct", 25, "active thread percentage (env)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	dirs := mps.Dirs{Pipe: *pipe, Log: *logDir}
	c := mps.NewControl(dirs)
	c.Bin = *bin
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	switch args[0] {
	case "start":
		return c.StartDaemon(ctx)
	case "stop":
		return c.Quit(ctx)
	case "status":
		servers, err := c.ServerList(ctx)
		if err != nil {
			return err
		}
		for _, s := range servers {
			clients, err := c.ClientList(ctx, s)
			if err != nil {
				return err
			}
			fmt.Printf("mps server %d: %d clients %v\n", s, len(clients), clients)
		}
		return nil
	case "env":
		p := mps.Partition{GPU: *gpu, Index: *index, ThreadPercentage: *pct}
		for _, kv := range p.Env(dirs) {
			k, v, _ := strings.Cut(kv, "=")
			fmt.Printf("export %s=%q\n", k, v)
		}
		return nil
	}
	return fmt.Errorf("unknown mps command %q", args[0])
}
