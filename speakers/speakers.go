// Package speakers joins words to speakers: the words a recogniser timed
// and the turns a diarization model found (or the channels a recording
// was split into) become a transcript with a speaker on every word,
// speaker turns and a summary per speaker. It is pure: no I/O, no model,
// nothing but the transcript's own values, so every rule is a table test.
//
// The rules (those of WhisperX's assign_word_speakers, which users of
// hosted services expect):
//
//   - A word goes to the speaker whose turns overlap it longest. Where two
//     speakers' turns hold a word alike (both talking throughout it), it
//     goes to the speaker of the word before, if that is one of them (the
//     speaker who was talking goes on: a recogniser follows one voice
//     through overlapped speech, and a diarizer's overlap is more often a
//     second voice starting than the first stopping mid-word), else to
//     the one whose turn began first.
//   - A word no turn overlaps (the diarizer heard a pause, the recogniser
//     a word) goes to the nearest turn in time.
//   - With no turns at all (a diarizer that heard no speech where the
//     recogniser found words), every word is one speaker's: SpeakerLabel(0).
//
// Turns of two speakers may overlap: overlapped speech is data, kept in
// the turns and counted in the summary's overlap time, never an error.
package speakers

import (
	"cmp"
	"maps"
	"math"
	"slices"

	"github.com/fleetscribe/fleetscribe/contract"
)

// Assign sets the speaker of every word from turns (see the package's
// rules). turns need not be sorted.
func Assign(words []contract.Word, turns []contract.SpeakerTurn) {
	if len(turns) == 0 {
		for i := range words {
			words[i].Speaker = contract.SpeakerLabel(0)
		}
		return
	}
	sorted := slices.Clone(turns)
	slices.SortFunc(sorted, func(a, b contract.SpeakerTurn) int { return cmp.Compare(a.Start, b.Start) })
	// Turns are sorted by start; the longest turn bounds how far back a
	// turn overlapping a word can start.
	longest := 0.0
	for _, t := range sorted {
		longest = max(longest, t.End-t.Start)
	}
	prev := ""
	for i := range words {
		words[i].Speaker = best(words[i], sorted, longest, prev)
		prev = words[i].Speaker
	}
}

// best is the speaker of w among turns sorted by start, prev the speaker
// of the word before.
func best(w contract.Word, turns []contract.SpeakerTurn, longest float64, prev string) string {
	mid := (w.Start + w.End) / 2
	lo, _ := slices.BinarySearchFunc(turns, w.Start-longest, func(t contract.SpeakerTurn, x float64) int { return cmp.Compare(t.Start, x) })
	overlap := map[string]float64{}
	began := map[string]float64{}
	for _, t := range turns[lo:] {
		if t.Start > w.End {
			break
		}
		if o := min(t.End, w.End) - max(t.Start, w.Start); o > 0 || t.Start <= mid && mid <= t.End {
			overlap[t.Speaker] += max(o, 0)
			if b, ok := began[t.Speaker]; !ok || t.Start < b {
				began[t.Speaker] = t.Start
			}
		}
	}
	if len(overlap) > 0 {
		most := slices.Max(slices.Collect(maps.Values(overlap)))
		label := ""
		for _, s := range slices.Sorted(maps.Keys(overlap)) {
			switch {
			case overlap[s] < most-tie:
			case s == prev:
				return s
			case label == "" || began[s] < began[label]:
				label = s
			}
		}
		return label
	}
	// Nearest turn: the gap from the word to each turn, the smaller wins.
	label, gap := "", math.Inf(1)
	for _, t := range turns {
		d := max(t.Start-w.End, w.Start-t.End)
		if d < gap {
			label, gap = t.Speaker, d
		}
	}
	return label
}

// Join closes each speaker's gaps of less than gap seconds between turns
// (the seams between a recording's chunks, a breath) and returns the turns
// in time order; turns of different speakers are left as they are, overlap
// included.
func Join(turns []contract.SpeakerTurn, gap float64) []contract.SpeakerTurn {
	byLabel := slices.Clone(turns)
	slices.SortFunc(byLabel, func(a, b contract.SpeakerTurn) int {
		return cmp.Or(cmp.Compare(a.Speaker, b.Speaker), cmp.Compare(a.Start, b.Start))
	})
	var out []contract.SpeakerTurn
	for _, t := range byLabel {
		if t.End <= t.Start {
			continue
		}
		if n := len(out); n > 0 && out[n-1].Speaker == t.Speaker && t.Start-out[n-1].End < gap {
			out[n-1].End = max(out[n-1].End, t.End)
			continue
		}
		out = append(out, t)
	}
	Sort(out)
	return out
}

// Sort puts turns in time order (start, end, then speaker).
func Sort(turns []contract.SpeakerTurn) {
	slices.SortFunc(turns, func(a, b contract.SpeakerTurn) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(a.End, b.End), cmp.Compare(a.Speaker, b.Speaker))
	})
}

// Summarize returns each speaker's talk time (the union of their turns)
// and words, in order of first appearance (turn or word), and the time two
// or more speakers talk at once.
func Summarize(words []contract.Word, turns []contract.SpeakerTurn) (summary []contract.SpeakerSummary, overlap float64) {
	first := map[string]float64{}
	note := func(label string, at float64) {
		if f, ok := first[label]; !ok || at < f {
			first[label] = at
		}
	}
	talk := map[string]float64{}
	count := map[string]int{}
	for _, t := range Join(turns, 0) {
		talk[t.Speaker] += t.End - t.Start
		note(t.Speaker, t.Start)
	}
	for _, w := range words {
		if w.Speaker == "" {
			continue
		}
		count[w.Speaker]++
		note(w.Speaker, w.Start)
	}
	labels := slices.Collect(maps.Keys(first))
	slices.SortFunc(labels, func(a, b string) int { return cmp.Or(cmp.Compare(first[a], first[b]), cmp.Compare(a, b)) })
	for _, l := range labels {
		summary = append(summary, contract.SpeakerSummary{Label: l, TalkSeconds: round3(talk[l]), Words: count[l]})
	}
	return summary, round3(overlapTime(turns))
}

// overlapTime is the time covered by turns of two or more speakers at once.
func overlapTime(turns []contract.SpeakerTurn) float64 {
	type edge struct {
		at    float64
		delta int
	}
	var edges []edge
	for _, t := range Join(turns, 0) { // one speaker's own turns never overlap themselves
		edges = append(edges, edge{t.Start, 1}, edge{t.End, -1})
	}
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.delta, b.delta)) })
	total, open, since := 0.0, 0, 0.0
	for _, e := range edges {
		if open >= 2 {
			total += e.at - since
		}
		open += e.delta
		since = e.at
	}
	return total
}

// ChannelTurns are the turns of one channel's speaker, from its words:
// runs of words less than gap seconds apart.
func ChannelTurns(words []contract.Word, label string, gap float64) []contract.SpeakerTurn {
	var out []contract.SpeakerTurn
	for _, w := range words {
		if n := len(out); n > 0 && w.Start-out[n-1].End < gap {
			out[n-1].End = max(out[n-1].End, w.End)
			continue
		}
		out = append(out, contract.SpeakerTurn{Speaker: label, Start: w.Start, End: w.End})
	}
	return out
}

// MergeWords puts the words of several channels (each in time order) into
// one time order, a word's channel before the next's at the same time.
func MergeWords(channels [][]contract.Word) []contract.Word {
	var out []contract.Word
	for _, ws := range channels {
		out = append(out, ws...)
	}
	slices.SortStableFunc(out, func(a, b contract.Word) int { return cmp.Compare(a.Start, b.Start) })
	return out
}

// tie is how close two speakers' overlaps with a word are to be alike
// (seconds): word and turn times are given to the millisecond.
const tie = 0.002

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }
