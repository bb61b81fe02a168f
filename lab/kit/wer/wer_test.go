package wer

import "testing"

func TestErrors(t *testing.T) {
	cases := []struct {
		ref, hyp     string
		edits, words int
	}{
		{"the cat sat", "the cat sat", 0, 3},
		{"The cat, sat.", "the cat sat", 0, 3},
		{"the cat sat", "the bat sat", 1, 3},      // substitution
		{"the cat sat", "the sat", 1, 3},          // deletion
		{"the cat sat", "the cat sat down", 1, 3}, // insertion
		{"mild chest pain", "my old chest pain", 2, 3},
		{"", "", 0, 0},
		{"a b", "", 2, 2},
	}
	for _, c := range cases {
		e, n := Errors(c.ref, c.hyp)
		if e != c.edits || n != c.words {
			t.Errorf("Errors(%q, %q) = %d, %d; want %d, %d", c.ref, c.hyp, e, n, c.edits, c.words)
		}
	}
	if r := Rate("a b c d", "a b c x"); r != 0.25 {
		t.Errorf("Rate = %v, want 0.25", r)
	}
}

func TestAlign(t *testing.T) {
	for _, c := range []struct {
		ref, hyp string
		want     []int
	}{
		{"a b c", "a b c", []int{0, 1, 2}},
		{"a b c", "a x c", []int{0, 1, 2}},   // substitution
		{"a b c", "a c", []int{0, -1, 1}},    // deletion
		{"a b c", "z a b c", []int{1, 2, 3}}, // insertion before
		{"a b", "", []int{-1, -1}},
	} {
		got := Align(Normalize(c.ref), Normalize(c.hyp))
		if len(got) != len(c.want) {
			t.Fatalf("%q/%q: %v", c.ref, c.hyp, got)
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%q/%q: %v, want %v", c.ref, c.hyp, got, c.want)
				break
			}
		}
	}
}
