package contract

import (
	"strings"
	"testing"
)

func TestJobVocabulary(t *testing.T) {
	ok := map[string]Vocabulary{
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":"cardiology-2026"}`:                       {Name: "cardiology-2026"},
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["metoprolol","Dr. Okafor"]}}`: {Phrases: []string{"metoprolol", "Dr. Okafor"}},
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":false}`:                                   {Off: true},
	}
	for body, want := range ok {
		jobs, err := ParseMessage([]byte(body))
		if err != nil {
			t.Errorf("%s: %v", body, err)
			continue
		}
		got := jobs[0].Vocabulary
		if got == nil || got.Off != want.Off || got.Name != want.Name || strings.Join(got.Phrases, "|") != strings.Join(want.Phrases, "|") {
			t.Errorf("%s: %+v, want %+v", body, got, want)
		}
		// Encode writes what a reader parses.
		b, err := jobs[0].Encode()
		if err != nil || string(b) != body {
			t.Errorf("Encode: %s, %v; want %s", b, err, body)
		}
	}
	many := `{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":[` + strings.Repeat(`"x",`, MaxInlinePhrases) + `"y"]}}`
	bad := map[string]string{
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":true}`:                                             `want a name, {"phrases": [...]} or false`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":""}`:                                               `want 1 to 200 characters`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":"../other"}`:                                       `only letters, digits`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":".hidden"}`:                                        `must not start with '.'`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":[]}}`:                                   `no phrases`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrase":["x"]}}`:                                 `unknown field "phrase"`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["ok","  "]}}`:                          `phrase 2: empty`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["a\u0007b"]}}`:                         `character U+0007`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["50 mg <b>"]}}`:                        `character U+003C`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["` + strings.Repeat("a", 101) + `"]}}`: `101 characters, limit 100`,
		`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["a b c d e f g h i j k"]}}`:            `11 words, limit 10`,
		many: `101 phrases, limit 100`,
	}
	for body, want := range bad {
		if _, err := ParseMessage([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.90s: %v, want an error saying %q", body, err, want)
		}
	}
	// A phrase's text is never in an error (medical data): its position is.
	if _, err := ParseMessage([]byte(`{"v":1,"bucket":"audio","key":"a.wav","vocabulary":{"phrases":["secret\u0000"]}}`)); err == nil || strings.Contains(err.Error(), "secret") {
		t.Errorf("error %v names the phrase's text", err)
	}
}

func TestStoredVocabulary(t *testing.T) {
	sv, err := ParseStoredVocabulary("cardiology", []byte(`{"name":"cardiology","phrases":["metoprolol"," atorvastatin ","metoprolol"]}`))
	if err != nil || len(sv.Phrases) != 3 {
		t.Fatalf("%+v, %v", sv, err)
	}
	if got := NormalizePhrases(sv.Phrases); strings.Join(got, "|") != "metoprolol|atorvastatin" {
		t.Errorf("NormalizePhrases: %q", got)
	}
	if VocabularyKey("cardiology") != "vocabularies/cardiology.json" {
		t.Errorf("key %s", VocabularyKey("cardiology"))
	}
	thousand := `{"name":"big","phrases":[` + strings.Repeat(`"x",`, MaxPhrases) + `"y"]}`
	for name, c := range map[string]struct{ body, want string }{
		"cardiology": {`{"name":"other","phrases":["x"]}`, `names itself "other"`},
		"big":        {thousand, `1001 phrases, limit 1000`},
		"x":          {`{"name":"x","phrases":["a"],"extra":1}`, `unknown field "extra"`},
		"y":          {`["a"]`, `not a vocabulary object`},
		"z":          {`{"name":"z","phrases":["` + strings.Repeat("a ", 30000) + `"]}`, `bytes, limit 50000`},
	} {
		if _, err := ParseStoredVocabulary(name, []byte(c.body)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}
