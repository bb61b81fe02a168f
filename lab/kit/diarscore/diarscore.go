// Package diarscore scores a diarization against its reference, for the
// demo and the speaker tests: diarization error rate (DER) as NIST's
// md-eval and pyannote.metrics define it (missed speech, false alarm and
// speaker confusion over the reference's speech, overlapped speech scored,
// a collar around every reference boundary left out, hypothesis speakers
// mapped one-to-one to reference speakers to maximise their shared time),
// and word-level diarization error (WDER: of the recognised words paired
// with reference words, those whose speaker, mapped, is not the
// reference's). Time is scored in 10-ms frames. make bench-diarization
// scores with pyannote.metrics as well and reports both.
package diarscore

import (
	"math"
	"slices"

	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/conversation"
	"github.com/fleetscribe/fleetscribe/lab/kit/wer"
)

// Turn is a speaker talking from Start to End (seconds).
type Turn struct {
	Speaker    string
	Start, End float64
}

// Word is a word said (reference) or recognised (hypothesis), with its
// speaker and time.
type Word struct {
	Text       string
	Speaker    string
	Start, End float64
}

const frame = 0.01 // seconds a frame

// Result is a DER and what it is made of, in seconds.
type Result struct {
	DER                             float64
	Total, Missed, FalseAlarm, Conf float64
	// Mapping is each hypothesis speaker's reference speaker ("" for none).
	Mapping map[string]string
}

// DER scores hyp against ref with a collar (seconds, each side of every
// reference boundary) left out of the score.
func DER(ref, hyp []Turn, collar float64) Result {
	end := 0.0
	for _, t := range append(slices.Clone(ref), hyp...) {
		end = max(end, t.End)
	}
	n := int(math.Ceil(end/frame)) + 1
	refIDs, hypIDs := ids(ref), ids(hyp)
	r := activity(ref, refIDs, n)
	h := activity(hyp, hypIDs, n)
	scored := make([]bool, n)
	for i := range scored {
		scored[i] = true
	}
	for _, t := range ref {
		for _, b := range []float64{t.Start, t.End} {
			lo, hi := max(0, int(math.Round((b-collar)/frame))), min(n, int(math.Round((b+collar)/frame)))
			for i := lo; i < hi; i++ {
				scored[i] = false
			}
		}
	}
	// Shared scored time of each (reference, hypothesis) pair, and the best
	// one-to-one mapping of them.
	shared := make([][]float64, len(refIDs))
	for i := range shared {
		shared[i] = make([]float64, len(hypIDs))
	}
	for f := range n {
		if !scored[f] {
			continue
		}
		for i := range len(refIDs) {
			if !r[i][f] {
				continue
			}
			for j := range len(hypIDs) {
				if h[j][f] {
					shared[i][j] += frame
				}
			}
		}
	}
	match := assign(shared)
	res := Result{Mapping: map[string]string{}}
	refName, hypName := names(refIDs), names(hypIDs)
	for j := range len(hypIDs) {
		res.Mapping[hypName[j]] = ""
	}
	for i, j := range match {
		if j >= 0 {
			res.Mapping[hypName[j]] = refName[i]
		}
	}
	for f := range n {
		if !scored[f] {
			continue
		}
		nr, nh, nc := 0, 0, 0
		for i := range len(refIDs) {
			if r[i][f] {
				nr++
				if j := match[i]; j >= 0 && h[j][f] {
					nc++
				}
			}
		}
		for j := range len(hypIDs) {
			if h[j][f] {
				nh++
			}
		}
		res.Total += float64(nr) * frame
		res.Missed += float64(max(0, nr-nh)) * frame
		res.FalseAlarm += float64(max(0, nh-nr)) * frame
		res.Conf += float64(min(nr, nh)-nc) * frame
	}
	if res.Total > 0 {
		res.DER = (res.Missed + res.FalseAlarm + res.Conf) / res.Total
	}
	return res
}

func ids(turns []Turn) map[string]int {
	m := map[string]int{}
	for _, t := range turns {
		if _, ok := m[t.Speaker]; !ok {
			m[t.Speaker] = len(m)
		}
	}
	return m
}

func names(m map[string]int) []string {
	out := make([]string, len(m))
	for k, v := range m {
		out[v] = k
	}
	return out
}

func activity(turns []Turn, id map[string]int, n int) [][]bool {
	a := make([][]bool, len(id))
	for i := range a {
		a[i] = make([]bool, n)
	}
	for _, t := range turns {
		lo, hi := max(0, int(math.Round(t.Start/frame))), min(n, int(math.Round(t.End/frame)))
		for f := lo; f < hi; f++ {
			a[id[t.Speaker]][f] = true
		}
	}
	return a
}

// assign returns, for each row, the column of a one-to-one matching that
// maximises the sum of w (-1: unmatched): exhaustive over permutations for
// the few speakers of a conversation, greedy beyond eight.
func assign(w [][]float64) []int {
	rows := len(w)
	cols := 0
	if rows > 0 {
		cols = len(w[0])
	}
	best := make([]int, rows)
	for i := range best {
		best[i] = -1
	}
	if rows == 0 || cols == 0 {
		return best
	}
	if rows > 8 || cols > 8 {
		used := make([]bool, cols)
		for {
			bi, bj, bv := -1, -1, 0.0
			for i := range rows {
				if best[i] >= 0 {
					continue
				}
				for j := range cols {
					if !used[j] && w[i][j] > bv {
						bi, bj, bv = i, j, w[i][j]
					}
				}
			}
			if bi < 0 {
				return best
			}
			best[bi], used[bj] = bj, true
		}
	}
	cur := make([]int, rows)
	used := make([]bool, cols)
	bestV := -1.0
	var rec func(i int, v float64)
	rec = func(i int, v float64) {
		if i == rows {
			if v > bestV {
				bestV = v
				copy(best, cur)
			}
			return
		}
		cur[i] = -1
		rec(i+1, v)
		for j := range cols {
			if !used[j] {
				used[j], cur[i] = true, j
				rec(i+1, v+w[i][j])
				used[j] = false
			}
		}
	}
	rec(0, 0)
	return best
}

// WDERResult is the word-level speaker error: of the recognised words
// paired with reference words outside overlapped speech, the share whose
// speaker, mapped, is not the reference's; and of those paired inside it
// (where either voice may have said a word, and a word's own times cannot
// say which), how many have one of the voices talking there.
type WDERResult struct {
	WDER                  float64
	Pairs, Wrong          int
	OverlapPairs, OnVoice int // inside overlapped speech: pairs, and those on a voice talking there
}

// WDER pairs hypothesis words with reference words: a minimum edit
// alignment of the two word sequences in time order in which a pair (the
// same word or a substitute) must lie within pairSlack seconds (with
// voices talking at once, or words that recur in every sentence, text
// alone would pair a word with another voice's), piece by piece between
// pauses that no reference speech crosses, so its memory stays small on
// long recordings. A reference word within collar seconds of speech of
// another reference voice is inside overlapped speech.
func WDER(ref, hyp []Word, mapping map[string]string, collar float64) WDERResult {
	ref, hyp = byMiddle(ref), byMiddle(hyp)
	pieces := cuts(ref)
	var res WDERResult
	for k := range len(pieces) + 1 {
		lo, hi := math.Inf(-1), math.Inf(1)
		if k > 0 {
			lo = pieces[k-1]
		}
		if k < len(pieces) {
			hi = pieces[k]
		}
		in := func(w Word) bool { m := mid(w); return m >= lo && m < hi }
		var rw, hw []Word
		for _, w := range ref {
			if in(w) {
				rw = append(rw, w)
			}
		}
		for _, w := range hyp {
			if in(w) {
				hw = append(hw, w)
			}
		}
		for i, j := range align(rw, hw) {
			if j < 0 {
				continue
			}
			said := mapping[hw[j].Speaker]
			if voices := talking(rw, rw[i], collar); len(voices) > 1 {
				res.OverlapPairs++
				if voices[said] {
					res.OnVoice++
				}
				continue
			}
			res.Pairs++
			if said != rw[i].Speaker {
				res.Wrong++
			}
		}
	}
	if res.Pairs > 0 {
		res.WDER = float64(res.Wrong) / float64(res.Pairs)
	}
	return res
}

// talking is the voices whose reference words lie within collar seconds of w.
func talking(ref []Word, w Word, collar float64) map[string]bool {
	out := map[string]bool{w.Speaker: true}
	for _, o := range ref {
		if o.Start <= w.End+collar && o.End >= w.Start-collar {
			out[o.Speaker] = true
		}
	}
	return out
}

// pairSlack is how far apart (their middles, seconds) an aligned pair of
// words may be: the reference's word times are spread over their sentence
// (SpreadWords), the recogniser's are its own.
const pairSlack = 1.0

func mid(w Word) float64 { return (w.Start + w.End) / 2 }

func byMiddle(ws []Word) []Word {
	out := slices.Clone(ws)
	slices.SortStableFunc(out, func(a, b Word) int {
		switch ma, mb := mid(a), mid(b); {
		case ma < mb:
			return -1
		case ma > mb:
			return 1
		}
		return 0
	})
	return out
}

// align returns, for each reference word, the hypothesis word a minimum
// edit alignment pairs it with (-1: deleted), pairs only within pairSlack.
func align(ref, hyp []Word) []int {
	rt, ht := texts(ref), texts(hyp)
	return wer.AlignFunc(len(ref), len(hyp), func(i, j int) int {
		switch {
		case math.Abs(mid(ref[i])-mid(hyp[j])) > pairSlack:
			return wer.Forbidden
		case rt[i] == ht[j]:
			return 0
		}
		return 1
	})
}

// texts are the words' normalised texts (a word the normaliser splits
// keeps its first piece, so the lists stay as long as the words).
func texts(ws []Word) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		if n := wer.Normalize(w.Text); len(n) > 0 {
			out[i] = n[0]
		}
	}
	return out
}

// cuts are times at least 30 s apart that no reference word spans and
// that lie in a pause of at least half a second.
func cuts(ref []Word) []float64 {
	sorted := slices.Clone(ref)
	slices.SortFunc(sorted, func(a, b Word) int {
		switch {
		case a.Start < b.Start:
			return -1
		case a.Start > b.Start:
			return 1
		}
		return 0
	})
	var out []float64
	last, reach := 0.0, 0.0
	for _, w := range sorted {
		if w.Start-reach >= 0.5 && (w.Start+reach)/2-last >= 30 {
			last = (w.Start + reach) / 2
			out = append(out, last)
		}
		reach = max(reach, w.End)
	}
	return out
}

// SpreadWords gives each word of a sentence said from start to end a time
// in proportion to its letters: the reference words of synthesised speech,
// whose own times the synthesiser does not say.
func SpreadWords(text, speaker string, start, end float64) []Word {
	ws := wer.Normalize(text)
	total := 0
	for _, w := range ws {
		total += len(w) + 1
	}
	out := make([]Word, len(ws))
	at := start
	for i, w := range ws {
		d := (end - start) * float64(len(w)+1) / float64(max(total, 1))
		out[i] = Word{Text: w, Speaker: speaker, Start: at, End: at + d}
		at += d
	}
	return out
}

// Reference is a synthetic conversation's sentences as turns and words of
// its voices.
func Reference(c conversation.Conversation) ([]Turn, []Word) {
	turns := make([]Turn, len(c.Utterances))
	var words []Word
	for i, u := range c.Utterances {
		turns[i] = Turn{Speaker: c.Voices[u.Speaker], Start: u.Start, End: u.End}
		words = append(words, SpreadWords(u.Text, c.Voices[u.Speaker], u.Start, u.End)...)
	}
	return turns, words
}

// Hypothesis is a transcript's speaker turns and words.
func Hypothesis(t contract.Transcript) ([]Turn, []Word) {
	turns := make([]Turn, len(t.SpeakerTurns))
	for i, s := range t.SpeakerTurns {
		turns[i] = Turn{Speaker: s.Speaker, Start: s.Start, End: s.End}
	}
	words := make([]Word, len(t.Words))
	for i, w := range t.Words {
		words[i] = Word{Text: w.Word, Speaker: w.Speaker, Start: w.Start, End: w.End}
	}
	return turns, words
}

// OverlapSeconds is the time two voices of c talk at once.
func OverlapSeconds(c conversation.Conversation) float64 {
	total := 0.0
	for i, a := range c.Utterances {
		for _, b := range c.Utterances[i+1:] {
			if a.Speaker != b.Speaker {
				total += max(0, min(a.End, b.End)-max(a.Start, b.Start))
			}
		}
	}
	return total
}

// ChannelWords counts the words of a split call's transcript said where
// one voice talks alone (within 0.3 s of its sentence), and those whose
// speaker is that voice's channel.
func ChannelWords(c conversation.Conversation, t contract.Transcript) (right, total int) {
	for _, w := range t.Words {
		mid := (w.Start + w.End) / 2
		who := -1
		for _, u := range c.Utterances {
			if u.Start-0.3 <= mid && mid <= u.End+0.3 {
				if who >= 0 && who != u.Speaker {
					who = -2 // both talk here
					break
				}
				who = u.Speaker
			}
		}
		if who < 0 {
			continue
		}
		total++
		if w.Speaker == contract.ChannelLabel(who) {
			right++
		}
	}
	return right, total
}
