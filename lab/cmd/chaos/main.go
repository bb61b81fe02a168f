// Command chaos runs the chaos suite (package chaos): real worker and
// real Triton Inference Server partitions (pocketsphinx) against the local SQS+S3 emulator while
// workers are killed, partitions crash, S3 and SQS fail and a worker is
// drained; then it prints a table of outcomes and a RESULT line, and
// exits 1 if any job was lost, duplicated, mismatched or stranded.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fleetscribe/fleetscribe/lab/suites/chaos"
)

func main() {
	var cfg chaos.Config
	flag.IntVar(&cfg.Jobs, "jobs", 1000, "jobs (about a tenth are bad inputs of six kinds)")
	flag.IntVar(&cfg.Workers, "workers", 2, "worker processes on the same queue")
	flag.IntVar(&cfg.Partitions, "partitions", 3, "Triton Inference Server partitions (processes serving the CPU model repository)")
	flag.IntVar(&cfg.Kills, "kills", 6, "SIGKILLs of a worker (each restarted)")
	flag.IntVar(&cfg.PartitionCrashes, "partition-crashes", 4, "single partitions killed and restarted")
	flag.DurationVar(&cfg.AllDown, "all-down", 20*time.Second, "once, every partition down together this long")
	flag.Float64Var(&cfg.FaultRate, "fault-rate", 0.03, "share of S3/SQS requests that meet a fault")
	flag.IntVar(&cfg.MaxReceives, "max-receives", 6, "the queue's maxReceiveCount: receives before a job that keeps failing goes to the DLQ")
	flag.DurationVar(&cfg.Timeout, "timeout", 30*time.Minute, "give up after this long")
	flag.Uint64Var(&cfg.Seed, "seed", uint64(time.Now().UnixNano()), "random seed")
	flag.StringVar(&cfg.WorkerBin, "worker-bin", "bin/worker", "worker binary")
	flag.StringVar(&cfg.ModelRepo, "model-repository", "deploy/triton/cpu", "the partitions' Triton model repository")
	flag.Parse()
	dir, err := os.MkdirTemp("", "chaos-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	cfg.Dir, cfg.Log = dir, os.Stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	fmt.Printf("chaos: seed %d, logs in %s\n", cfg.Seed, dir)
	rep, err := chaos.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	rep.WriteTable(os.Stdout)
	fmt.Printf("took %s\n", rep.Elapsed.Round(time.Second))
	fmt.Println(rep.ResultLine())
	if !rep.OK() {
		fmt.Fprintln(os.Stderr, "chaos:", chaos.ErrNotClean)
		os.Exit(1)
	}
}
