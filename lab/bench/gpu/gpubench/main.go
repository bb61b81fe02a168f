// Command gpubench drives the GPU benchmark through real Triton Inference
// Server and the project's own triton.Pool and chunking (the worker's code
// path):
//
//	gpubench run     for each arrangement of a GPU (single, instances-N,
//	                 timesliced-N, mpsP-N): a model repository of the shipped
//	                 configuration and model.py with the benchmark's engine,
//	                 its partitions started by `worker mps run` (the MPS
//	                 daemon included), a closed-loop sweep, the partitions
//	                 stopped; one CSV row per point
//	gpubench sweep   the same sweep against partitions already running
//	gpubench repo    write the model repository one partition serves
//	gpubench report  read the results, print the table and the RESULT line, plot
//	gpubench diarize the diarize model's side-by-side points and their RESULT line
//
// See docs/benchmarks.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gpubench run|sweep|repo|report|compiled|diarize [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = runCmd(os.Args[2:])
	case "sweep":
		err = sweepCmd(os.Args[2:])
	case "repo":
		err = repoCmd(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	case "compiled":
		err = compiledReport(os.Args[2:])
	case "diarize":
		err = diarizeReport(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}
