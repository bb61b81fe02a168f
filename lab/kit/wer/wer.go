// Package wer computes word error rate, for the demo and the speech tests.
package wer

import (
	"strings"
	"unicode"
)

// Normalize lowercases s, drops punctuation and splits it into words.
func Normalize(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != '\''
	})
}

// Errors returns the word-level edit distance (substitutions, deletions
// and insertions) between reference and hypothesis, and the reference
// length.
func Errors(reference, hypothesis string) (edits, words int) {
	ref, hyp := Normalize(reference), Normalize(hypothesis)
	prev := make([]int, len(hyp)+1)
	cur := make([]int, len(hyp)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ref); i++ {
		cur[0] = i
		for j := 1; j <= len(hyp); j++ {
			sub := prev[j-1]
			if ref[i-1] != hyp[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(hyp)], len(ref)
}

// Rate returns edits per reference word (0 for an empty reference and hypothesis).
func Rate(reference, hypothesis string) float64 {
	e, n := Errors(reference, hypothesis)
	if n == 0 {
		if e == 0 {
			return 0
		}
		return 1
	}
	return float64(e) / float64(n)
}

// Align returns, for each reference word, the index of the hypothesis word
// a minimum edit alignment pairs it with (the same word or a substitute),
// or -1 where the reference word was deleted.
func Align(ref, hyp []string) []int {
	return AlignFunc(len(ref), len(hyp), func(i, j int) int { return boolInt(ref[i] != hyp[j]) })
}

// AlignFunc is Align of n reference and m hypothesis words, pairing
// reference word i with hypothesis word j costing sub(i, j): 0 for the
// same word, 1 for a substitute, Forbidden for a pair that may not be made.
func AlignFunc(n, m int, sub func(i, j int) int) []int {
	// d[i][j]: edits between ref[:i] and hyp[:j].
	d := make([][]int, n+1)
	for i := range d {
		d[i] = make([]int, m+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= n; i++ {
		for j := 1; j <= m; j++ {
			d[i][j] = min(d[i-1][j-1]+sub(i-1, j-1), d[i-1][j]+1, d[i][j-1]+1)
		}
	}
	out := make([]int, n)
	for i, j := n, m; i > 0; {
		switch {
		case j > 0 && sub(i-1, j-1) < Forbidden && d[i][j] == d[i-1][j-1]+sub(i-1, j-1):
			out[i-1] = j - 1
			i, j = i-1, j-1
		case d[i][j] == d[i-1][j]+1:
			out[i-1] = -1
			i--
		default:
			j--
		}
	}
	return out
}

// Forbidden is AlignFunc's cost of a pair that may not be made.
const Forbidden = 1 << 20

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
