package worker

import (
	"context"
	"flag"
	"fmt"
	"sync"
	"time"

	"github.com/fleetscribe/fleetscribe/contract"
)

// Custom vocabularies (contract.Vocabulary): a job names a stored one or
// carries its phrases; one that says nothing takes its queue's default
// (-default-vocabulary). Stored vocabularies are read from the output
// bucket (contract.VocabularyKey) and kept for vocabularyTTL, so a bulk
// run of one vocabulary reads it once a minute, not once a job; an edit
// reaches new jobs within that time. The phrases go with every chunk of
// the job to the speech model (triton.Request.Vocabulary), which refuses
// phrases its tokenizer cannot spell before spending model time.

// vocabularyTTL is how long a stored vocabulary read is reused.
const vocabularyTTL = time.Minute

// VocabularyConfig is each queue's default vocabulary.
type VocabularyConfig struct {
	// Defaults per queue, -queue-url first (one value: every queue's): a
	// stored vocabulary's name, or "off"/"" for none.
	Defaults []string
}

// RegisterFlags registers the vocabulary flags.
func (c *VocabularyConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.Var((*semicolonList)(&c.Defaults), "default-vocabulary", "the stored vocabulary of jobs that do not name one, per queue as -default-speakers: a name or off\n"+
		"A name is s3://OUTPUT_BUCKET/vocabularies/NAME.json (enqueue vocabulary create). A job's own \"vocabulary\" (a name, inline phrases, or false) wins.")
}

func (c *VocabularyConfig) validate(queues int) error {
	if len(c.Defaults) > 1 && len(c.Defaults) != queues {
		return fmt.Errorf("%d -default-vocabulary values for %d queues (give one, or one per queue)", len(c.Defaults), queues)
	}
	for _, name := range c.Defaults {
		if name != "" && name != "off" {
			if err := contract.CheckVocabularyName(name); err != nil {
				return fmt.Errorf("-default-vocabulary: %w", err)
			}
		}
	}
	return nil
}

// For returns queue rank's default (nil: none).
func (c *VocabularyConfig) For(rank int) *contract.Vocabulary {
	name := ""
	switch {
	case len(c.Defaults) == 1:
		name = c.Defaults[0]
	case rank < len(c.Defaults):
		name = c.Defaults[rank]
	}
	if name == "" || name == "off" {
		return nil
	}
	return &contract.Vocabulary{Name: name}
}

// vocabularies reads stored vocabularies, each kept for vocabularyTTL.
type vocabularies struct {
	read func(ctx context.Context, key string, limit int64) ([]byte, error) // outputs.read
	now  func() time.Time
	mu   sync.Mutex
	kept map[string]keptVocabulary
}

type keptVocabulary struct {
	phrases []string
	at      time.Time
}

// phrases returns the stored vocabulary name's phrases (normalised), a
// permanent bad_vocabulary error where it is missing or invalid, or the
// read's own error (an outage: retried).
func (v *vocabularies) phrases(ctx context.Context, bucket, name string) ([]string, error) {
	v.mu.Lock()
	k, ok := v.kept[name]
	v.mu.Unlock()
	if ok && v.now().Sub(k.at) < vocabularyTTL {
		return k.phrases, nil
	}
	key := contract.VocabularyKey(name)
	b, err := v.read(ctx, key, contract.MaxVocabularyBytes+1)
	switch {
	case err != nil:
		return nil, err
	case b == nil:
		return nil, Permanentf(contract.ClassBadVocabulary, "vocabulary %q does not exist (s3://%s/%s; enqueue vocabulary create makes one)", name, bucket, key)
	}
	sv, err := contract.ParseStoredVocabulary(name, b)
	if err != nil {
		return nil, Permanent(contract.ClassBadVocabulary, err)
	}
	phrases := contract.NormalizePhrases(sv.Phrases)
	v.mu.Lock()
	if v.kept == nil {
		v.kept = map[string]keptVocabulary{}
	}
	v.kept[name] = keptVocabulary{phrases: phrases, at: v.now()}
	v.mu.Unlock()
	return phrases, nil
}

// vocabularyOf takes the job's vocabulary, or its queue's default where it
// says nothing: inline phrases as they are, a stored one read (or kept).
// One the model cannot take, or that is missing or invalid, is a
// bad_vocabulary record where the transcript would go, before any model
// time; a failed read is retried as any output bucket outage.
func (t *task) vocabularyOf(ctx context.Context) error {
	v := t.w.cfg.Vocab.For(t.d.queue)
	if t.job.Vocabulary != nil {
		v = t.job.Vocabulary
	}
	if !v.On() {
		return nil
	}
	if !t.w.takesVocabulary {
		return Permanentf(contract.ClassBadVocabulary, "job asks for a vocabulary; this worker's model takes none (-model-input-vocabulary, and no -model-buckets)")
	}
	if v.Name == "" {
		t.infer.vocabulary = contract.NormalizePhrases(v.Phrases)
		return nil
	}
	phrases, err := t.w.vocab.phrases(ctx, t.w.cfg.Outputs.Bucket, v.Name)
	if err != nil {
		return err
	}
	t.infer.vocabulary = phrases
	return nil
}
