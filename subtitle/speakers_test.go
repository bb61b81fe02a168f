package subtitle

import (
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/contract"
)

// With speakers, a cue is one speaker's, the TXT a line a speaker's run of
// words, SRT cues start with the speaker and WebVTT cues are voice spans.
func TestSpeakerRenderings(t *testing.T) {
	words := []contract.Word{
		{Word: "Good", Start: 0, End: 0.3, Speaker: "spk_0"}, {Word: "morning.", Start: 0.3, End: 0.8, Speaker: "spk_0"},
		{Word: "Hello", Start: 0.9, End: 1.2, Speaker: "spk_1"}, {Word: "doctor.", Start: 1.2, End: 1.6, Speaker: "spk_1"},
		{Word: "Sit", Start: 1.7, End: 1.9, Speaker: "spk_0"}, {Word: "down.", Start: 1.9, End: 2.2, Speaker: "spk_0"},
	}
	segs := BuildSegments(words)
	if len(segs) != 3 || segs[0].Speaker != "spk_0" || segs[1].Speaker != "spk_1" || segs[1].Text != "Hello doctor." {
		t.Fatalf("segments %+v: want one a speaker's run", segs)
	}
	tr := contract.Transcript{Words: words, Segments: segs, Speakers: []contract.SpeakerSummary{{Label: "spk_0"}, {Label: "spk_1"}}}
	if got, want := string(RenderTXT(tr)), "spk_0: Good morning.\nspk_1: Hello doctor.\nspk_0: Sit down.\n"; got != want {
		t.Errorf("txt %q, want %q", got, want)
	}
	if srt := string(RenderSRT(tr)); !strings.Contains(srt, "00:00:00,900 --> 00:00:01,700\nspk_1: Hello doctor.\n") {
		t.Errorf("srt:\n%s", srt)
	}
	if vtt := string(RenderVTT(tr)); !strings.Contains(vtt, "\n<v spk_1>Hello doctor.\n") {
		t.Errorf("vtt:\n%s", vtt)
	}
	// Without speakers, nothing changes.
	tr.Speakers = nil
	for i := range tr.Words {
		tr.Words[i].Speaker = ""
	}
	tr.Segments = BuildSegments(tr.Words)
	if got := string(RenderTXT(contract.Transcript{Text: "a b"})); got != "a b\n" {
		t.Errorf("txt without speakers %q", got)
	}
	if vtt := string(RenderVTT(tr)); strings.Contains(vtt, "<v") {
		t.Errorf("vtt without speakers has a voice:\n%s", vtt)
	}
}
