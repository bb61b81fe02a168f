package speakers

import (
	"slices"
	"testing"

	"github.com/fleetscribe/fleetscribe/contract"
)

func w(word string, start, end float64) contract.Word {
	return contract.Word{Word: word, Start: start, End: end}
}

func turn(who string, start, end float64) contract.SpeakerTurn {
	return contract.SpeakerTurn{Speaker: who, Start: start, End: end}
}

func TestAssign(t *testing.T) {
	for _, tc := range []struct {
		name  string
		words []contract.Word
		turns []contract.SpeakerTurn
		want  []string
	}{
		{"inside one turn each", []contract.Word{w("a", 0.1, 0.4), w("b", 2.1, 2.5)},
			[]contract.SpeakerTurn{turn("spk_0", 0, 1), turn("spk_1", 2, 3)}, []string{"spk_0", "spk_1"}},
		{"across a change the longer overlap wins", []contract.Word{w("a", 0.8, 1.4)},
			[]contract.SpeakerTurn{turn("spk_0", 0, 1), turn("spk_1", 1, 3)}, []string{"spk_1"}},
		{"turns unsorted", []contract.Word{w("a", 0.8, 1.4), w("b", 0.1, 0.2)},
			[]contract.SpeakerTurn{turn("spk_1", 1, 3), turn("spk_0", 0, 1)}, []string{"spk_1", "spk_0"}},
		{"overlap: the speaker of the word before goes on", []contract.Word{w("a", 0.1, 0.3), w("b", 1.5, 1.7), w("c", 1.8, 1.9)},
			[]contract.SpeakerTurn{turn("spk_1", 0, 0.4), turn("spk_0", 0.5, 3), turn("spk_1", 1, 3)}, []string{"spk_1", "spk_1", "spk_1"}},
		{"overlap at the start: the turn that began first", []contract.Word{w("a", 1.2, 1.5)},
			[]contract.SpeakerTurn{turn("spk_0", 1, 3), turn("spk_1", 0.5, 2)}, []string{"spk_1"}},
		{"overlap after a pause: the word before is nobody there", []contract.Word{w("a", 0.1, 0.3), w("b", 5.2, 5.4)},
			[]contract.SpeakerTurn{turn("spk_0", 0, 1), turn("spk_2", 5, 6), turn("spk_1", 4.5, 6)}, []string{"spk_0", "spk_1"}},
		{"no turn holds it: the nearest", []contract.Word{w("a", 1.5, 1.6), w("b", 2.6, 2.8)},
			[]contract.SpeakerTurn{turn("spk_0", 0, 1.4), turn("spk_1", 2.9, 4)}, []string{"spk_0", "spk_1"}},
		{"a word of no length inside a turn", []contract.Word{w("a", 2.5, 2.5)},
			[]contract.SpeakerTurn{turn("spk_0", 0, 2), turn("spk_1", 2, 3)}, []string{"spk_1"}},
		{"no turns at all: one speaker", []contract.Word{w("a", 0, 1), w("b", 1, 2)}, nil, []string{"spk_0", "spk_0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			words := slices.Clone(tc.words)
			Assign(words, tc.turns)
			var got []string
			for _, x := range words {
				got = append(got, x.Speaker)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("speakers %v, want %v", got, tc.want)
			}
		})
	}
}

func TestJoin(t *testing.T) {
	got := Join([]contract.SpeakerTurn{turn("spk_0", 5, 6), turn("spk_0", 0, 1), turn("spk_1", 0.5, 2), turn("spk_0", 1.2, 3), turn("spk_0", 3.5, 4), turn("spk_1", 2, 2)}, 0.3)
	want := []contract.SpeakerTurn{turn("spk_0", 0, 3), turn("spk_1", 0.5, 2), turn("spk_0", 3.5, 4), turn("spk_0", 5, 6)}
	if !slices.Equal(got, want) {
		t.Errorf("Join: %v, want %v (a seam of 0.2 s closed, 0.5 s kept, the other speaker's overlap kept, an empty turn dropped)", got, want)
	}
}

func TestSummarize(t *testing.T) {
	turns := []contract.SpeakerTurn{turn("spk_1", 3, 5), turn("spk_0", 1, 4), turn("spk_0", 3.5, 4.5), turn("spk_2", 4, 4.2)}
	words := []contract.Word{{Word: "a", Start: 1, End: 2, Speaker: "spk_0"}, {Word: "b", Start: 3.2, End: 3.4, Speaker: "spk_1"}, {Word: "c", Start: 3.4, End: 3.6, Speaker: "spk_0"}}
	sum, overlap := Summarize(words, turns)
	want := []contract.SpeakerSummary{{Label: "spk_0", TalkSeconds: 3.5, Words: 2}, {Label: "spk_1", TalkSeconds: 2, Words: 1}, {Label: "spk_2", TalkSeconds: 0.2}}
	if !slices.Equal(sum, want) {
		t.Errorf("summary %+v, want %+v (talk time the union of a speaker's turns, in order of first appearance)", sum, want)
	}
	// spk_0 and spk_1 together from 3 to 4.5 (spk_2 inside it adds no time).
	if overlap != 1.5 {
		t.Errorf("overlap %v, want 1.5", overlap)
	}
}

func TestChannelTurnsAndMergeWords(t *testing.T) {
	left := []contract.Word{{Word: "a", Start: 0, End: 0.5}, {Word: "b", Start: 0.8, End: 1}, {Word: "c", Start: 3, End: 3.5}}
	right := []contract.Word{{Word: "x", Start: 0.9, End: 1.2}}
	if got, want := ChannelTurns(left, "ch_0", 1), []contract.SpeakerTurn{turn("ch_0", 0, 1), turn("ch_0", 3, 3.5)}; !slices.Equal(got, want) {
		t.Errorf("turns %v, want %v", got, want)
	}
	var order []string
	for _, x := range MergeWords([][]contract.Word{left, right}) {
		order = append(order, x.Word)
	}
	if !slices.Equal(order, []string{"a", "b", "x", "c"}) {
		t.Errorf("merged %v", order)
	}
}
