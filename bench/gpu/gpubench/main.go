// Command gpubench drives the GPU benchmark through the project's own
// triton.Pool and chunking (the worker's code path):
//
//	gpubench sweep   closed loop of fixed clips over a sweep of concurrencies
//	gpubench mix     closed loop of recordings from the realistic length mix,
//	                 chunked by the worker's splitter
//	gpubench mps     start/stop the MPS control daemon and print partition
//	                 environments, through package mps
//	gpubench report  read results, print the table and the RESULT line, plot
//
// Results are appended to a CSV; see docs/benchmarks.md.
package main

import (
	"fmt"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gpubench sweep|mix|mps|report [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "sweep":
		err = sweep(os.Args[2:], false)
	case "mix":
		err = sweep(os.Args[2:], true)
	case "mps":
		err = mpsCmd(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gpubench:", err)
		os.Exit(1)
	}
}
