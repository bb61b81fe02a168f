package worker_test

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
	"github.com/fleetscribe/fleetscribe/worker"
)

func (e *env) putVocabulary(name, body string) {
	e.t.Helper()
	_, err := e.s3.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String(e.out), Key: aws.String(contract.VocabularyKey(name)), Body: strings.NewReader(body)})
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) sendVocabularyJob(key string, v *contract.Vocabulary) {
	e.t.Helper()
	b, err := contract.Job{Bucket: e.in, Key: key, Vocabulary: v}.Encode()
	if err != nil {
		e.t.Fatal(err)
	}
	e.send(string(b))
}

// runVocab runs the worker with a model that takes vocabularies (or not).
func (e *env) runVocab(cfg worker.Config, takes bool) {
	e.t.Helper()
	e.runDeps(cfg, worker.Deps{Model: "asr", SQS: e.recorder, S3: e.s3, Transcriber: e.pool, Log: zerolog.New(io.Discard), TakesVocabulary: takes})
}

// A job's vocabulary reaches the model with every chunk: a stored one by
// name (read once for the run's jobs), inline phrases, the queue's default
// for a job that says nothing, none for "vocabulary": false.
func TestVocabularyReachesTheModelWithEveryChunk(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.putVocabulary("cardiology", `{"name":"cardiology","phrases":["metoprolol"," atorvastatin","metoprolol"]}`)
	e.putVocabulary("default", `{"name":"default","phrases":["Dr. Okafor"]}`)
	e.put("named.wav", speechWAV(42, 1)) // two chunks
	e.put("inline.wav", speechWAV(10, 2))
	e.put("event.wav", speechWAV(10, 3))
	e.put("off.wav", speechWAV(10, 4))
	e.sendVocabularyJob("named.wav", &contract.Vocabulary{Name: "cardiology"})
	e.sendVocabularyJob("inline.wav", &contract.Vocabulary{Phrases: []string{"lisinopril", "HbA1c"}})
	e.send(s3Event(e.in, "event.wav"))
	e.sendVocabularyJob("off.wav", &contract.Vocabulary{Off: true})
	cfg := e.config()
	cfg.Vocab = worker.VocabularyConfig{Defaults: []string{"default"}}
	e.runVocab(cfg, true)
	for _, k := range []string{"named.wav", "inline.wav", "event.wav", "off.wav"} {
		if _, ok := e.transcript(k); !ok {
			t.Fatalf("%s: no transcript: %v", k, keysOf(e.outputs(k)))
		}
	}
	seen := map[string]int{}
	for _, v := range e.servers[0].Vocabularies() {
		seen[strings.Join(v, "|")]++
	}
	want := map[string]int{"metoprolol|atorvastatin": 2, "lisinopril|HbA1c": 1, "Dr. Okafor": 1}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("vocabularies the model got, by chunks: %v, want %v (the off job's chunk with none)", seen, want)
	}
	if got, chunks := len(e.servers[0].Vocabularies()), int(e.servers[0].Calls()); got != chunks-1 {
		t.Errorf("%d of %d chunks had a vocabulary, want all but the off job's", got, chunks)
	}
}

// A vocabulary that cannot be used gets a bad_vocabulary record, before
// any model time: missing, invalid, or a model that takes none; the
// record says which and where (never the phrases).
func TestBadVocabularyIsARecordNotModelTime(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.putVocabulary("wrong-name", `{"name":"another","phrases":["x"]}`)
	e.putVocabulary("angle", `{"name":"angle","phrases":["ok","metoprolol <50 mg>"]}`)
	e.put("missing.wav", speechWAV(10, 1))
	e.put("wrong.wav", speechWAV(10, 2))
	e.put("angle.wav", speechWAV(10, 3))
	e.sendVocabularyJob("missing.wav", &contract.Vocabulary{Name: "nope"})
	e.sendVocabularyJob("wrong.wav", &contract.Vocabulary{Name: "wrong-name"})
	e.sendVocabularyJob("angle.wav", &contract.Vocabulary{Name: "angle"})
	e.runVocab(e.config(), true)
	for key, want := range map[string]string{
		"missing.wav": `vocabulary "nope" does not exist (s3://` + e.out + `/vocabularies/nope.json`,
		"wrong.wav":   `names itself "another"`,
		"angle.wav":   `phrase 2: character U+003C`,
	} {
		rec, ok := e.errorRecord(key)
		if !ok || rec.Class != contract.ClassBadVocabulary || !strings.Contains(rec.Message, want) {
			t.Errorf("%s: record %v %+v, want %s saying %q", key, ok, rec, contract.ClassBadVocabulary, want)
		}
		if strings.Contains(rec.Message, "metoprolol") {
			t.Errorf("%s: the record names a phrase: %s", key, rec.Message)
		}
	}
	if n := e.servers[0].Calls(); n != 0 {
		t.Errorf("%d chunks reached the model", n)
	}

	// A model without a vocabulary input: refused, the same class.
	e.put("inline.wav", speechWAV(10, 4))
	e.sendVocabularyJob("inline.wav", &contract.Vocabulary{Phrases: []string{"metoprolol"}})
	e.runVocab(e.config(), false)
	if rec, ok := e.errorRecord("inline.wav"); !ok || rec.Class != contract.ClassBadVocabulary || !strings.Contains(rec.Message, "model takes none") {
		t.Errorf("inline vocabulary to a model without one: %v %+v", ok, rec)
	}
	if slices.ContainsFunc(e.servers[0].Vocabularies(), func(v []string) bool { return len(v) > 0 }) {
		t.Error("a vocabulary reached the model")
	}
}

// -mark-confidence-below marks the txt, srt and vtt words a reviewer
// should check; the JSON keeps every word's confidence.
func TestLowConfidenceWordsMarked(t *testing.T) {
	e := newEnv(t, 1, 3)
	e.servers[0].SetRecognizer(kserve.RecognizerFunc(func(context.Context, []float32, bool) (triton.Result, error) {
		return triton.Result{Text: "Start metoprolol", Words: []triton.Word{{Word: "Start", Start: 0, End: 0.4, Confidence: 0.93}, {Word: "metoprolol", Start: 0.5, End: 1.1, Confidence: 0.27}}}, nil
	}))
	e.put("a.wav", speechWAV(5, 1))
	e.sendJob("a.wav", "txt", "srt", "vtt")
	cfg := e.config()
	cfg.Outputs.MarkBelow = 0.5
	e.run(cfg, nil)
	out := e.outputs("a.wav")
	if txt := string(out["txt"]); txt != "Start [metoprolol?]\n" {
		t.Errorf("txt %q", txt)
	}
	if !strings.Contains(string(out["srt"]), "Start [metoprolol?]") || !strings.Contains(string(out["vtt"]), "Start <c.low>metoprolol</c>") {
		t.Errorf("srt or vtt unmarked:\n%s\n%s", out["srt"], out["vtt"])
	}
	if tr, ok := e.transcript("a.wav"); !ok || len(tr.Words) != 2 || tr.Words[1].Confidence != 0.27 || tr.Text != "Start metoprolol" {
		t.Errorf("json: %+v", tr)
	}
}
