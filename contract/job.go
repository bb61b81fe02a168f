package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"unicode/utf8"
)

// JobVersion is the current job message schema version.
const JobVersion = 1

// Output formats a job may ask for. JSON is always written.
const (
	FormatJSON = "json"
	FormatTXT  = "txt"
	FormatSRT  = "srt"
	FormatVTT  = "vtt"
)

var knownFormats = []string{FormatJSON, FormatTXT, FormatSRT, FormatVTT}

// Formats returns every output format, JSON first.
func Formats() []string { return slices.Clone(knownFormats) }

// Job is one recording to transcribe: the versioned message body that
// enqueue sends, and what every S3 event envelope is turned into.
type Job struct {
	V            int      `json:"v"`
	Bucket       string   `json:"bucket"`
	Key          string   `json:"key"`
	VersionID    string   `json:"version_id,omitempty"`
	ETag         string   `json:"etag,omitempty"`
	OutputPrefix string   `json:"output_prefix,omitempty"` // overrides the worker's default
	Model        string   `json:"model,omitempty"`         // overrides the worker's default
	Priority     int      `json:"priority,omitempty"`      // informational; queues carry priority
	Formats      []string `json:"formats,omitempty"`       // extra formats besides json
	// Speakers asks for diarization (see SpeakerHints); nil: the queue's default.
	Speakers *SpeakerHints `json:"speakers,omitempty"`
	// Channels is "split" (one transcript a channel, each its own speaker),
	// "mix" or empty (the queue's default).
	Channels string `json:"channels,omitempty"`
	// Vocabulary names a stored vocabulary or carries phrases inline (see
	// Vocabulary); nil: the queue's default.
	Vocabulary *Vocabulary `json:"vocabulary,omitempty"`
}

// Validate reports a job that cannot be processed.
func (j Job) Validate() error {
	if j.V != JobVersion {
		return fmt.Errorf("job schema version %d is not supported (want %d)", j.V, JobVersion)
	}
	if j.Bucket == "" || j.Key == "" {
		return errors.New("job needs bucket and key")
	}
	if err := CheckBucketName(j.Bucket); err != nil {
		return err
	}
	if endsLikeOutput(j.Bucket) {
		// A legal name, but the bucket is a segment of the job's output
		// keys, which could then lie under another job's transcript.
		return fmt.Errorf("bucket %q ends like an output file (%s); its outputs could lie under another input's", j.Bucket, strings.Join(outputSuffixes, ", "))
	}
	if err := checkKey(j.Key); err != nil {
		return err
	}
	for _, f := range j.Formats {
		if !slices.Contains(knownFormats, f) {
			return fmt.Errorf("unknown output format %q (want one of %s)", f, strings.Join(knownFormats, ", "))
		}
	}
	if err := CheckChannels(j.Channels); err != nil {
		return err
	}
	if j.Speakers != nil {
		if err := j.Speakers.Validate(); err != nil {
			return err
		}
	}
	if j.Speakers.On() && j.Channels == ChannelsSplit {
		return errors.New(`a job asks for speakers or for channels "split", not both`)
	}
	return j.Vocabulary.Validate()
}

// CheckBucketName refuses what S3's naming rules for general purpose
// buckets refuse: shorter than 3 or longer than 63 characters; anything but
// lower-case letters, digits, dots and hyphens; not starting and ending
// with a letter or digit; two dots together; the form of an IPv4 address;
// the reserved prefixes (xn--, sthree-, amzn-s3-demo-) and suffixes
// (-s3alias, --ol-s3, .mrap, --x-s3, --table-s3). So a job's bucket never
// holds a '/' or a "..", and the keys built from it (KeysFor) cannot reach
// into another input's output tree. (Buckets made before March 2018 in
// us-east-1 could break these rules; such a bucket's jobs are refused.)
func CheckBucketName(b string) error {
	bad := func(why string) error {
		return fmt.Errorf("bucket %q is not an S3 bucket name: %s", truncate(b, 80), why)
	}
	if len(b) < 3 || len(b) > 63 {
		return bad("it must be 3 to 63 characters")
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '-') {
			return bad("only lower-case letters, digits, dots and hyphens")
		}
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	switch {
	case !alnum(b[0]) || !alnum(b[len(b)-1]):
		return bad("it must start and end with a letter or digit")
	case strings.Contains(b, ".."):
		return bad("two dots together")
	case isIPv4(b):
		return bad("it has the form of an IP address")
	}
	for _, p := range []string{"xn--", "sthree-", "amzn-s3-demo-"} {
		if strings.HasPrefix(b, p) {
			return bad("the prefix " + p + " is reserved")
		}
	}
	for _, suf := range []string{"-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3"} {
		if strings.HasSuffix(b, suf) {
			return bad("the suffix " + suf + " is reserved")
		}
	}
	return nil
}

func isIPv4(s string) bool {
	parts := strings.Split(s, ".")
	if len(parts) != 4 {
		return false
	}
	for _, p := range parts {
		if p == "" || len(p) > 3 || strings.Trim(p, "0123456789") != "" {
			return false
		}
	}
	return true
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// checkKey refuses keys no S3 object can have, so that such a job is a bad
// message at once instead of a read that fails on every receive until the
// DLQ: longer than 1,024 bytes, not UTF-8, or holding a NUL (which S3's
// XML responses cannot carry).
func checkKey(key string) error {
	switch {
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("key of %d bytes: S3 keys are at most %d", len(key), MaxKeyBytes)
	case !utf8.ValidString(key):
		return errors.New("key is not UTF-8")
	case strings.ContainsRune(key, 0):
		return errors.New("key holds a NUL byte")
	}
	return nil
}

// Encode returns the message body for j.
func (j Job) Encode() ([]byte, error) {
	if j.V == 0 {
		j.V = JobVersion
	}
	if err := j.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(j)
}

// envelope holds every field the parser looks at to tell message shapes apart.
type envelope struct {
	V       *int            `json:"v"`
	Records json.RawMessage `json:"Records"`
	Event   string          `json:"Event"` // "s3:TestEvent" sent when notifications are configured
	// SNS notification wrapping another message.
	Type    string `json:"Type"`
	Message string `json:"Message"`
	// EventBridge.
	Source     string          `json:"source"`
	DetailType string          `json:"detail-type"`
	Detail     json.RawMessage `json:"detail"`
}

type s3Record struct {
	EventSource string `json:"eventSource"`
	EventName   string `json:"eventName"`
	S3          struct {
		Bucket struct {
			Name string `json:"name"`
		} `json:"bucket"`
		Object struct {
			Key       string `json:"key"`
			ETag      string `json:"eTag"`
			VersionID string `json:"versionId"`
			Size      int64  `json:"size"`
		} `json:"object"`
	} `json:"s3"`
}

type eventBridgeDetail struct {
	Bucket struct {
		Name string `json:"name"`
	} `json:"bucket"`
	Object struct {
		Key       string `json:"key"`
		ETag      string `json:"etag"`
		VersionID string `json:"version-id"`
	} `json:"object"`
}

// ParseMessage turns a queue message body into jobs. It accepts the
// versioned job body, an S3 event notification (possibly several records),
// the same wrapped in an SNS notification, and an EventBridge "Object
// Created" event. An S3 test event yields no jobs. Any other body, or one
// with a record that is not a job, is an error: the message is not a job
// (error class bad_message), and no retry can change that. ParseRecords
// keeps the valid records of such a message.
func ParseMessage(body []byte) ([]Job, error) {
	recs, err := ParseRecords(body)
	if err != nil {
		return nil, err
	}
	jobs := make([]Job, 0, len(recs))
	for _, r := range recs {
		if r.Err != nil {
			return nil, r.Err
		}
		jobs = append(jobs, r.Job)
	}
	return jobs, nil
}

// Record is one record of a message: the job it asks for, or why it is
// not one.
type Record struct {
	Job Job
	Err error // not a job; the message's other records stand
}

// ParseRecords is ParseMessage record by record: an S3 event with a record
// that is not a job (a bucket name S3 cannot have, say) keeps its other
// records, each of which succeeds or fails alone. It fails as a whole only
// for a body that is not a message of jobs at all.
func ParseRecords(body []byte) ([]Record, error) {
	return parseMessage(body, 0)
}

func parseMessage(body []byte, depth int) ([]Record, error) {
	if depth > 2 {
		return nil, errors.New("message nested too deeply")
	}
	var env envelope
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("message body is not a JSON object: %w", err)
	}
	switch {
	case env.V != nil:
		var j Job
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&j); err != nil {
			return nil, fmt.Errorf("job message: %w", err)
		}
		if err := j.Validate(); err != nil {
			return nil, err
		}
		return []Record{{Job: j}}, nil
	case env.Records != nil:
		return parseS3Records(env.Records)
	case env.Event == "s3:TestEvent":
		return nil, nil
	case env.Type == "Notification" && env.Message != "":
		return parseMessage([]byte(env.Message), depth+1)
	case env.Source == "aws.s3" && env.Detail != nil:
		if env.DetailType != "Object Created" {
			return nil, nil // other S3 events (deletes, restores) carry no work
		}
		var d eventBridgeDetail
		if err := json.Unmarshal(env.Detail, &d); err != nil {
			return nil, fmt.Errorf("eventbridge detail: %w", err)
		}
		j := Job{V: JobVersion, Bucket: d.Bucket.Name, Key: d.Object.Key, ETag: d.Object.ETag, VersionID: d.Object.VersionID}
		if err := j.Validate(); err != nil {
			return nil, fmt.Errorf("eventbridge event: %w", err)
		}
		return []Record{{Job: j}}, nil
	default:
		return nil, errors.New("message is neither a job (no \"v\"), an S3 event, an SNS notification nor an EventBridge event")
	}
}

func parseS3Records(raw json.RawMessage) ([]Record, error) {
	var recs []s3Record
	if err := json.Unmarshal(raw, &recs); err != nil {
		return nil, fmt.Errorf("s3 event records: %w", err)
	}
	var out []Record
	for i, r := range recs {
		if r.EventSource != "aws:s3" || !strings.HasPrefix(r.EventName, "ObjectCreated:") {
			continue
		}
		// S3 event keys are URL-encoded form values ("+" for space).
		key, err := url.QueryUnescape(r.S3.Object.Key)
		if err != nil {
			out = append(out, Record{Err: fmt.Errorf("s3 event record %d: key %q: %w", i, r.S3.Object.Key, err)})
			continue
		}
		j := Job{V: JobVersion, Bucket: r.S3.Bucket.Name, Key: key, ETag: r.S3.Object.ETag, VersionID: r.S3.Object.VersionID}
		if err := j.Validate(); err != nil {
			out = append(out, Record{Err: fmt.Errorf("s3 event record %d: %w", i, err)})
			continue
		}
		out = append(out, Record{Job: j})
	}
	return out, nil
}
