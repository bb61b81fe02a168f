// Package accuracy holds the CPU recogniser's accuracy benchmarks, as
// tests under the build tag accuracy (make bench-accuracy, make
// bench-joins): recordings synthesised by the lab, sent through the worker
// and a real Triton server to the local SQS and S3 server, their
// transcripts scored against what was spoken.
package accuracy
