package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// A custom vocabulary: phrases the recogniser should favour where the
// audio allows them (drug names, clinical terms, clinicians' surnames),
// asked for per job in one of two ways, as Amazon Transcribe's custom
// vocabularies and Deepgram's key terms are:
//
//   - by name: "vocabulary": "cardiology", a vocabulary stored in the
//     worker's output bucket at VocabularyKey("cardiology") (enqueue
//     vocabulary create writes one), read when a job names it;
//   - inline: "vocabulary": {"phrases": ["metoprolol", "Dr. Okafor"]}, up
//     to MaxInlinePhrases.
//
// "vocabulary": false turns a queue's default off. A job that says nothing
// takes its queue's default (the worker's -default-vocabulary).

// Bounds of a vocabulary. A stored one holds up to MaxPhrases phrases (a
// GPU boosting tree of a thousand phrases is what NeMo's phrase boosting
// is measured with) in at most MaxVocabularyBytes of JSON (Transcribe's
// 50 KB); an inline one, which travels in every message of the job, up to
// MaxInlinePhrases. A phrase is at most MaxPhraseRunes characters and
// MaxPhraseWords words.
const (
	MaxPhrases         = 1000
	MaxInlinePhrases   = 100
	MaxPhraseRunes     = 100
	MaxPhraseWords     = 10
	MaxVocabularyBytes = 50_000
	maxVocabularyName  = 200
)

// VocabularyPrefix is where stored vocabularies live in the output bucket.
const VocabularyPrefix = "vocabularies/"

// VocabularyKey is the output bucket's key of the vocabulary named name.
func VocabularyKey(name string) string { return VocabularyPrefix + name + ".json" }

// Vocabulary is a job's vocabulary: a stored one's Name, inline Phrases,
// or Off (none, over the queue's default). Its JSON is a string (the
// name), {"phrases": [...]}, or false.
type Vocabulary struct {
	Off     bool
	Name    string
	Phrases []string
	named   bool // read from a string, even an empty one
}

// On reports whether v asks for a vocabulary.
func (v *Vocabulary) On() bool { return v != nil && !v.Off }

// MarshalJSON writes false, the name, or the inline phrases.
func (v Vocabulary) MarshalJSON() ([]byte, error) {
	switch {
	case v.Off:
		return []byte("false"), nil
	case v.Name != "":
		return json.Marshal(v.Name)
	}
	return json.Marshal(struct {
		Phrases []string `json:"phrases"`
	}{v.Phrases})
}

// UnmarshalJSON reads false, a name or {"phrases": [...]}; anything else
// is an error that says what is wanted.
func (v *Vocabulary) UnmarshalJSON(b []byte) error {
	t := bytes.TrimSpace(b)
	switch {
	case string(t) == "false":
		*v = Vocabulary{Off: true}
		return nil
	case len(t) > 0 && t[0] == '"':
		var name string
		if err := json.Unmarshal(t, &name); err != nil {
			return err
		}
		*v = Vocabulary{Name: name, named: true}
		return nil
	case len(t) > 0 && t[0] == '{':
		var in struct {
			Phrases []string `json:"phrases"`
		}
		dec := json.NewDecoder(bytes.NewReader(t))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return fmt.Errorf(`vocabulary: want a name, {"phrases": [...]} or false: %w`, err)
		}
		*v = Vocabulary{Phrases: in.Phrases}
		return nil
	}
	return fmt.Errorf(`vocabulary %s: want a name, {"phrases": [...]} or false`, truncate(string(t), 40))
}

// Validate checks a job's vocabulary: a valid name, or inline phrases
// within MaxInlinePhrases (see CheckPhrases).
func (v *Vocabulary) Validate() error {
	switch {
	case v == nil || v.Off:
		return nil
	case v.Name != "" && v.Phrases != nil:
		return errors.New("vocabulary: a name or phrases, not both")
	case v.Name != "" || v.named:
		return CheckVocabularyName(v.Name)
	}
	return CheckPhrases(v.Phrases, MaxInlinePhrases)
}

// CheckVocabularyName refuses a name that is not 1-200 letters, digits,
// '.', '-' and '_' (Transcribe's rule), or that starts with '.'.
func CheckVocabularyName(name string) error {
	if name == "" || len(name) > maxVocabularyName {
		return fmt.Errorf("vocabulary name %q: want 1 to %d characters", truncate(name, 40), maxVocabularyName)
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_') {
			return fmt.Errorf("vocabulary name %q: only letters, digits, '.', '-' and '_'", truncate(name, 40))
		}
	}
	if name[0] == '.' {
		return fmt.Errorf("vocabulary name %q: must not start with '.'", truncate(name, 40))
	}
	return nil
}

// CheckPhrases refuses an empty list, more than most phrases, and a phrase
// that is empty, longer than MaxPhraseRunes characters or MaxPhraseWords
// words, not valid UTF-8, or holds a control character or a character
// that is neither a letter, a digit, a space nor one of .'-&/ (what a
// recogniser can spell). Errors name the phrase by its position (phrases
// are medical data: their text is never in an error).
func CheckPhrases(phrases []string, most int) error {
	if len(phrases) == 0 {
		return errors.New("vocabulary has no phrases")
	}
	if len(phrases) > most {
		return fmt.Errorf("vocabulary has %d phrases, limit %d", len(phrases), most)
	}
	for i, p := range phrases {
		if err := checkPhrase(p); err != nil {
			return fmt.Errorf("vocabulary phrase %d: %w", i+1, err)
		}
	}
	return nil
}

func checkPhrase(p string) error {
	if !utf8.ValidString(p) {
		return errors.New("not valid UTF-8")
	}
	t := strings.TrimSpace(p)
	switch n := utf8.RuneCountInString(t); {
	case n == 0:
		return errors.New("empty")
	case n > MaxPhraseRunes:
		return fmt.Errorf("%d characters, limit %d", n, MaxPhraseRunes)
	}
	if n := len(strings.Fields(t)); n > MaxPhraseWords {
		return fmt.Errorf("%d words, limit %d", n, MaxPhraseWords)
	}
	for _, r := range t {
		if unicode.IsLetter(r) || unicode.IsDigit(r) || r == ' ' || strings.ContainsRune(".'-&/", r) {
			continue
		}
		return fmt.Errorf("character %U, which a recogniser cannot spell (letters, digits, spaces and .'-&/ only)", r)
	}
	return nil
}

// StoredVocabulary is the JSON object at VocabularyKey(name).
type StoredVocabulary struct {
	Name    string   `json:"name"`
	Phrases []string `json:"phrases"`
}

// ParseStoredVocabulary reads a stored vocabulary, refusing one over
// MaxVocabularyBytes, with unknown fields, whose name is not name, or
// whose phrases CheckPhrases refuses (up to MaxPhrases).
func ParseStoredVocabulary(name string, b []byte) (StoredVocabulary, error) {
	if len(b) > MaxVocabularyBytes {
		return StoredVocabulary{}, fmt.Errorf("vocabulary %q is %d bytes, limit %d", name, len(b), MaxVocabularyBytes)
	}
	var sv StoredVocabulary
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&sv); err != nil {
		return StoredVocabulary{}, fmt.Errorf("vocabulary %q is not a vocabulary object: %w", name, err)
	}
	if sv.Name != name {
		return StoredVocabulary{}, fmt.Errorf("vocabulary %q names itself %q", name, truncate(sv.Name, 40))
	}
	if err := CheckPhrases(sv.Phrases, MaxPhrases); err != nil {
		return StoredVocabulary{}, fmt.Errorf("vocabulary %q: %w", name, err)
	}
	return sv, nil
}

// NormalizePhrases trims each phrase and drops repeats, keeping the first
// order: what the model is sent.
func NormalizePhrases(phrases []string) []string {
	seen := make(map[string]bool, len(phrases))
	out := make([]string, 0, len(phrases))
	for _, p := range phrases {
		t := strings.Join(strings.Fields(p), " ")
		if !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	return out
}
