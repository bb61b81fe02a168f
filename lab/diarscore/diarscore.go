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

	"github.com/fleetscribe/fleetscribe/lab/wer"
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

// WDER pairs hypothesis words with reference words (a minimum edit
// alignment of their text, aligned piece by piece between pauses no
// reference speech crosses) and returns the share of pairs whose
// hypothesis speaker, mapped, is not the reference's, and the pairs.
func WDER(ref, hyp []Word, mapping map[string]string) (float64, int) {
	pieces := cuts(ref)
	wrong, pairs := 0, 0
	for k := range len(pieces) + 1 {
		lo, hi := math.Inf(-1), math.Inf(1)
		if k > 0 {
			lo = pieces[k-1]
		}
		if k < len(pieces) {
			hi = pieces[k]
		}
		in := func(w Word) bool { m := (w.Start + w.End) / 2; return m >= lo && m < hi }
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
		rt, ht := texts(rw), texts(hw)
		for i, j := range wer.Align(rt, ht) {
			if j < 0 {
				continue
			}
			pairs++
			if mapping[hw[j].Speaker] != rw[i].Speaker {
				wrong++
			}
		}
	}
	if pairs == 0 {
		return 0, 0
	}
	return float64(wrong) / float64(pairs), pairs
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
