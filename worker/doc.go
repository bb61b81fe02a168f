// Package worker drains an SQS queue of transcription jobs: it receives only
// as many messages as it has free slots, fetches each recording from S3,
// decodes and chunks it, sends the chunks to a Transcriber (a pool of Triton
// partitions in production), writes the transcript to S3 at a deterministic
// key, and deletes the message only after the transcript exists.
//
// Lifecycle of a message:
//
//	received ──► heartbeat extends visibility while the job runs
//	   │
//	   ├─ transcript already exists ──────────────► delete (duplicate)
//	   ├─ success: outputs written ───────────────► delete
//	   ├─ permanent error: error record written ──► delete
//	   └─ retryable error ─► visibility = backoff ─► redelivered; after
//	        MaxReceives an error record is written and the queue's
//	        redrive policy moves the message to the DLQ
//
// A job's walk is worker/job.go, one stage per method of task, in order;
// the job contract (messages, keys, records) is package contract.
//
// Cancelling Run's context stops receiving; jobs in hand keep a separate
// context until the drain timeout, and their final delete or visibility
// reset runs even after that. The worker never speaks gRPC itself.
package worker
