package worker_test

import (
	"fmt"

	"github.com/fleetscribe/fleetscribe/worker"
)

// A job's outputs have keys derived from the input's bucket, key and version
// (or ETag) and the model, so a redelivered job finds its transcript and a new
// upload of the same key gets a new one.
func ExampleKeysFor() {
	in := worker.InputRef{Bucket: "audio", Key: "calls/2026/a.wav", ETag: `"9b2cf535f27731c974343645a3985328"`}
	keys := worker.KeysFor("transcripts/", in, "asr")
	fmt.Println(keys.JSON)
	fmt.Println(keys.Key(worker.FormatSRT))
	fmt.Println(keys.Error)
	// Output:
	// transcripts/audio/calls/2026/a.wav/asr/e-9b2cf535f27731c974343645a3985328.json
	// transcripts/audio/calls/2026/a.wav/asr/e-9b2cf535f27731c974343645a3985328.srt
	// transcripts/audio/calls/2026/a.wav/asr/e-9b2cf535f27731c974343645a3985328.error.json
}

// Queue messages may be jobs sent by enqueue or S3 event notifications.
func ExampleParseMessage() {
	body, _ := worker.Job{Bucket: "audio", Key: "a.wav", Formats: []string{"vtt"}}.Encode()
	fmt.Println(string(body))
	jobs, _ := worker.ParseMessage(body)
	fmt.Println(jobs[0].Bucket, jobs[0].Key, jobs[0].Formats)

	event := `{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put",
	  "s3":{"bucket":{"name":"audio"},"object":{"key":"visit+notes.wav","eTag":"abc"}}}]}`
	jobs, _ = worker.ParseMessage([]byte(event))
	fmt.Println(jobs[0].Bucket, jobs[0].Key, jobs[0].ETag)

	_, err := worker.ParseMessage([]byte(`{"hello":1}`))
	fmt.Println(worker.ErrorClass(err))
	// Output:
	// {"v":1,"bucket":"audio","key":"a.wav","formats":["vtt"]}
	// audio a.wav [vtt]
	// audio visit notes.wav abc
	// bad_message
}
