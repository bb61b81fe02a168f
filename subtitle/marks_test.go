package subtitle

import (
	"strings"
	"testing"

	"github.com/fleetscribe/fleetscribe/contract"
)

// Words below the threshold are marked in every rendering, words without a
// confidence never are, and no marks is the default (byte for byte the
// unmarked rendering).
func TestMarksBelowThreshold(t *testing.T) {
	words := []contract.Word{
		{Word: "Start", Start: 0, End: 0.3, Confidence: 0.9},
		{Word: "metoprolol", Start: 0.4, End: 1.0, Confidence: 0.31},
		{Word: "twice", Start: 1.1, End: 1.4},
		{Word: "daily.", Start: 1.5, End: 1.8, Confidence: 0.49},
		{Word: "Okay.", Start: 3.5, End: 3.9, Confidence: 0.95},
	}
	tr := contract.Transcript{Text: "Start metoprolol twice daily. Okay.", Words: words, Segments: BuildSegments(words), DurationSec: 4}
	m := Marks{Below: 0.5}
	if got := string(RenderTXTMarked(tr, m)); got != "Start [metoprolol?] twice [daily.?] Okay.\n" {
		t.Errorf("txt: %q", got)
	}
	srt := string(RenderSRTMarked(tr, m))
	if !strings.Contains(srt, "Start [metoprolol?] twice [daily.?]\n") || !strings.Contains(srt, "\nOkay.\n") {
		t.Errorf("srt:\n%s", srt)
	}
	vtt := string(RenderVTTMarked(tr, m))
	if !strings.Contains(vtt, "Start <c.low>metoprolol</c> twice <c.low>daily.</c>\n") {
		t.Errorf("vtt:\n%s", vtt)
	}
	for name, pair := range map[string][2][]byte{
		"txt": {RenderTXT(tr), RenderTXTMarked(tr, Marks{})},
		"srt": {RenderSRT(tr), RenderSRTMarked(tr, Marks{})},
		"vtt": {RenderVTT(tr), RenderVTTMarked(tr, Marks{})},
	} {
		if string(pair[0]) != string(pair[1]) || strings.Contains(string(pair[0]), "?]") {
			t.Errorf("%s: no marks is not the plain rendering:\n%s", name, pair[1])
		}
	}
	// With speakers: the speaker's label first, then the marked words.
	sp := tr
	sp.Words = append([]contract.Word(nil), words...)
	for i := range sp.Words {
		sp.Words[i].Speaker = "spk_0"
	}
	sp.Speakers = []contract.SpeakerSummary{{Label: "spk_0"}}
	sp.Segments = BuildSegments(sp.Words)
	if got := string(RenderTXTMarked(sp, m)); got != "spk_0: Start [metoprolol?] twice [daily.?] Okay.\n" {
		t.Errorf("txt with speakers: %q", got)
	}
	if srt := string(RenderSRTMarked(sp, m)); !strings.Contains(srt, "spk_0: Start [metoprolol?] twice [daily.?]\n") {
		t.Errorf("srt with speakers:\n%s", srt)
	}
	// Segments that are not the words' (text only): no marks, no failure.
	txtOnly := contract.Transcript{Text: "a b", Segments: []contract.Segment{{Start: 0, End: 1, Text: "a b"}}, Words: []contract.Word{{Word: "x", Confidence: 0.1}}}
	if srt := string(RenderSRTMarked(txtOnly, m)); !strings.Contains(srt, "\na b\n") {
		t.Errorf("segments not built from the words:\n%s", srt)
	}
}
