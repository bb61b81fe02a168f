package sphinx

import "slices"

// Pauses that divide a request into utterances.
const (
	pauseFrame   = 160 // 10 ms at 16 kHz
	minPauseRuns = 50  // 0.5 s of quiet frames
)

// pauseCuts returns where x divides into utterances: the middle of every
// pause of at least 0.5 s with sound on both sides. A pause is a run of
// 10 ms frames quieter than both 6 dB above the recording's floor (its
// quietest tenth of frames) and 30 dB below its speech (its loudest tenth).
func pauseCuts(x []float32) []int {
	n := len(x) / pauseFrame
	if n < 2*minPauseRuns {
		return nil
	}
	e := make([]float64, n)
	for i := range e {
		var sum float64
		for _, v := range x[i*pauseFrame : (i+1)*pauseFrame] {
			sum += float64(v) * float64(v)
		}
		e[i] = sum / pauseFrame
	}
	sorted := slices.Clone(e)
	slices.Sort(sorted)
	floor, speech := sorted[n/10], sorted[n-1-n/10]
	threshold := max(4*floor, speech/1000)
	var cuts []int
	run := 0
	for i, v := range e {
		if v < threshold {
			run++
			continue
		}
		if run >= minPauseRuns && run < i { // not at the start
			cuts = append(cuts, (i-run/2)*pauseFrame)
		}
		run = 0
	}
	return cuts // a pause that runs to the end divides nothing
}
