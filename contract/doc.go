// Package contract is what fleetscribe promises to the systems around it:
// the job message a queue carries, where a job's outputs land in S3, and
// the records written there. Everything that sends jobs (enqueue, S3
// notifications), reads results (redrive, dashboards, downstream readers)
// or runs the worker agrees through this package alone; it depends on the
// standard library only, so a client links none of the worker's gRPC,
// Triton or audio code.
//
// # Job message (v1)
//
// A message body is one of: the versioned job ({"v":1,"bucket":...,
// "key":...}; see [Job] and [JobVersion]), an S3 event notification with
// any number of records, the same wrapped in an SNS notification, or an
// EventBridge "Object Created" event. [ParseMessage] turns each into jobs;
// anything else is a bad message. Bucket names follow S3's naming rules and
// keys S3's key rules, checked while parsing.
//
// # Output keys
//
// [KeysFor] maps (output prefix, input bucket, key, version or ETag,
// model) to one deterministic base key:
//
//	{prefix}{bucket}/{escaped key}/{model}/{v-version | e-etag | unversioned}
//
// with the transcript at base+".json" (its existence means the job is
// done), extra formats at base+".txt", ".srt" and ".vtt", the error record
// at base+".error.json", and a short-lived claim at base+".claim". No
// output key lies under another job's as under a folder ([EscapeKey]).
//
// # Records
//
// [Transcript] (schema [TranscriptSchema]) and [ErrorRecord] (schema
// [ErrorSchema], class one of the Class constants, tagged [ErrorRecordTag],
// metadata [MetaFinal]) are the JSON documents written at those keys. A
// schema's version changes only with a change readers must know about;
// fields are added, never renamed or removed, within a version.
package contract
