package contract_test

import (
	"fmt"

	"github.com/fleetscribe/fleetscribe/contract"
)

// A job's outputs have keys derived from the input's bucket, key and version
// (or ETag) and the model, so a redelivered job finds its transcript and a new
// upload of the same key gets a new one.
func ExampleKeysFor() {
	in := contract.InputRef{Bucket: "audio", Key: "calls/2026/a.wav", ETag: `"9b2cf535f27731c974343645a3985328"`}
	keys := contract.KeysFor("transcripts/", in, "asr")
	fmt.Println(keys.JSON)
	fmt.Println(keys.Key(contract.FormatSRT))
	fmt.Println(keys.Error)
	// Output:
	// transcripts/audio/calls/2026/a.wav/asr/e-9b2cf535f27731c974343645a3985328.json
	// transcripts/audio/calls/2026/a.wav/asr/e-9b2cf535f27731c974343645a3985328.srt
	// transcripts/audio/calls/2026/a.wav/asr/e-9b2cf535f27731c974343645a3985328.error.json
}

// Queue messages may be jobs sent by enqueue or S3 event notifications.
func ExampleParseMessage() {
	body, _ := contract.Job{Bucket: "audio", Key: "a.wav", Formats: []string{"vtt"}}.Encode()
	fmt.Println(string(body))
	jobs, _ := contract.ParseMessage(body)
	fmt.Println(jobs[0].Bucket, jobs[0].Key, jobs[0].Formats)

	event := `{"Records":[{"eventSource":"aws:s3","eventName":"ObjectCreated:Put",
	  "s3":{"bucket":{"name":"audio"},"object":{"key":"visit+notes.wav","eTag":"abc"}}}]}`
	jobs, _ = contract.ParseMessage([]byte(event))
	fmt.Println(jobs[0].Bucket, jobs[0].Key, jobs[0].ETag)

	// Anything else is not a job: the worker records it as bad_message.
	_, err := contract.ParseMessage([]byte(`{"hello":1}`))
	fmt.Println(err)
	// Output:
	// {"v":1,"bucket":"audio","key":"a.wav","formats":["vtt"]}
	// audio a.wav [vtt]
	// audio visit notes.wav abc
	// message is neither a job (no "v"), an S3 event, an SNS notification nor an EventBridge event
}
