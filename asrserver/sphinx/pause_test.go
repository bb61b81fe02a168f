package sphinx

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// Pauses of 0.5 s or more between sounds divide a recording at their
// middles; shorter ones, and quiet at either end, do not.
func TestPauseCuts(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	var x []float32
	tone := func(s float64) {
		for i := range int(s * 16000) {
			x = append(x, float32(0.3*math.Sin(float64(i)*0.2)))
		}
	}
	quiet := func(s, level float64) {
		for range int(s * 16000) {
			x = append(x, float32(rng.NormFloat64()*level))
		}
	}
	quiet(1, 0.0005) // leading quiet: no cut
	tone(2)
	quiet(0.3, 0.0005) // too short
	tone(2)
	quiet(1.0, 0.0005) // cut at its middle
	tone(1)
	quiet(0.8, 0) // digital silence: cut
	tone(1)
	quiet(2, 0.0005) // trailing quiet: no cut
	got := pauseCuts(x)
	want := []float64{1 + 2 + 0.3 + 2 + 0.5, 1 + 2 + 0.3 + 2 + 1 + 1 + 0.4}
	if len(got) != len(want) {
		t.Fatalf("cuts at %v, want about %v s", got, want)
	}
	for i := range got {
		if d := math.Abs(float64(got[i])/16000 - want[i]); d > 0.02 {
			t.Errorf("cut %d at %.2f s, want %.2f s", i, float64(got[i])/16000, want[i])
		}
	}

	// Sound with short dips (syllables, breaths): one utterance.
	x = x[:0]
	for range 20 {
		tone(0.4)
		quiet(0.3, 0.0005)
	}
	if got := pauseCuts(x); len(got) != 0 {
		t.Errorf("short dips cut at %v", got)
	}
	if got := pauseCuts(slices.Repeat([]float32{0}, 16000*5)); len(got) != 0 {
		t.Errorf("silence cut at %v", got)
	}
}
