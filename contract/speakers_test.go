package contract

import (
	"encoding/json"
	"strings"
	"testing"
)

// A job's speakers are true, false or whole-number hints; every other
// shape is refused with an error that says what is wanted.
func TestSpeakerHintsJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want SpeakerHints
		err  string
	}{
		{in: `true`, want: SpeakerHints{}},
		{in: `false`, want: SpeakerHints{Off: true}},
		{in: `{}`, want: SpeakerHints{}},
		{in: `{"max": 2}`, want: SpeakerHints{Max: 2}},
		{in: `{"min": 2, "max": 4}`, want: SpeakerHints{Min: 2, Max: 4}},
		{in: `{"max": 0}`, err: `"speakers.max" is 0`},
		{in: `{"min": 3, "max": 2}`, err: "max 2 is below min 3"},
		{in: `{"max": 2.5}`, err: "must be a whole number"},
		{in: `{"max": "3"}`, err: "must be a whole number"},
		{in: `{"max": 31}`, err: "at most 30 speakers"},
		{in: `{"min": -1}`, err: "must not be negative"},
		{in: `{"speakers": 2}`, err: `unknown field "speakers"`},
		{in: `2`, err: `must be true, false or {"min": n, "max": n}`},
		{in: `null`, err: `must be true, false`},
	} {
		var h SpeakerHints
		err := json.Unmarshal([]byte(tc.in), &h)
		switch {
		case tc.err == "" && (err != nil || h != tc.want):
			t.Errorf("%s: %+v, %v; want %+v", tc.in, h, err, tc.want)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one saying %q", tc.in, err, tc.err)
		}
	}
}

// Hints written are read back the same, and the flag form matches.
func TestSpeakerHintsRoundTrip(t *testing.T) {
	for _, h := range []SpeakerHints{{}, {Off: true}, {Max: 3}, {Min: 2}, {Min: 2, Max: 5}} {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		var got SpeakerHints
		if err := json.Unmarshal(b, &got); err != nil || got != h {
			t.Errorf("%+v: %s read back as %+v, %v", h, b, got, err)
		}
		p, err := ParseSpeakerHints(h.String())
		if err != nil || p == nil || *p != h {
			t.Errorf("%+v: %q parsed as %+v, %v", h, h.String(), p, err)
		}
	}
	for _, bad := range []string{"max=0", "min=3,max=2", "max=2.5", "most=2", "2"} {
		if _, err := ParseSpeakerHints(bad); err == nil {
			t.Errorf("ParseSpeakerHints(%q) accepted", bad)
		}
	}
	if h, err := ParseSpeakerHints(""); h != nil || err != nil {
		t.Errorf(`"" means not said: %v, %v`, h, err)
	}
}

// A job asks for speakers or for split channels, not both; channels are
// mix or split.
func TestJobSpeakersAndChannels(t *testing.T) {
	ok := []string{
		`{"v":1,"bucket":"audio","key":"a.wav","speakers":{"max":2}}`,
		`{"v":1,"bucket":"audio","key":"a.wav","channels":"split"}`,
		`{"v":1,"bucket":"audio","key":"a.wav","speakers":false,"channels":"split"}`,
	}
	for _, body := range ok {
		if _, err := ParseMessage([]byte(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
	bad := map[string]string{
		`{"v":1,"bucket":"audio","key":"a.wav","speakers":true,"channels":"split"}`: "not both",
		`{"v":1,"bucket":"audio","key":"a.wav","channels":"stereo"}`:                `want mix or split`,
		`{"v":1,"bucket":"audio","key":"a.wav","speakers":{"max":0}}`:               `"speakers.max" is 0`,
	}
	for body, want := range bad {
		if _, err := ParseMessage([]byte(body)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", body, err, want)
		}
	}
	// Encode writes what a reader parses.
	b, err := Job{Bucket: "audio", Key: "a.wav", Speakers: &SpeakerHints{Min: 2}}.Encode()
	if err != nil || string(b) != `{"v":1,"bucket":"audio","key":"a.wav","speakers":{"min":2}}` {
		t.Errorf("Encode: %s, %v", b, err)
	}
}

// A transcript without speakers is byte for byte what v1 wrote: the new
// fields are left out.
func TestTranscriptWithoutSpeakersIsV1(t *testing.T) {
	b, err := json.Marshal(Transcript{Schema: TranscriptSchema, Words: []Word{{Word: "a", Start: 0, End: 1}}, Segments: []Segment{{Start: 0, End: 1, Text: "a"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{"speaker", "diarization"} {
		if strings.Contains(string(b), field) {
			t.Errorf("%s in %s", field, b)
		}
	}
}
