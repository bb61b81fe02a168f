// Package triton is a KServe v2 (NVIDIA Triton) gRPC client for a speech
// model, and a pool that spreads requests over several Triton partitions.
//
// A partition is one Triton server process with its own dynamic batcher; on a
// GPU shared through CUDA MPS there are eight per GPU by default. The Pool sends
// each request to the partition with the fewest requests outstanding, caps the
// requests in flight per partition so every batcher stays fed without queueing
// forever, ejects partitions that fail health checks, and retries overload
// (gRPC UNAVAILABLE) on another partition with backoff.
//
// The package knows nothing of queues or object stores.
package triton
