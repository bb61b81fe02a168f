// Package synth makes speech-like test audio for benchmarks: bursts of
// noise (words) separated by pauses, which the splitter treats as speech,
// and the realistic mix of recording lengths the benchmarks use.
package synth

import (
	"math"
	"math/rand/v2"
)

// SpeechLike returns n samples at rate: words of 0.2-0.7 s of noise
// separated by pauses of about 0.05-1 s of near silence.
func SpeechLike(rng *rand.Rand, n, rate int) []float32 {
	x := make([]float32, n)
	for i := 0; i < n; {
		word := int((0.2 + 0.5*rng.Float64()) * float64(rate))
		for j := i; j < min(n, i+word); j++ {
			x[j] = float32(0.3 * rng.NormFloat64())
		}
		i += word
		pause := int((0.05 + 0.3*rng.ExpFloat64()) * float64(rate))
		for j := i; j < min(n, i+pause); j++ {
			x[j] = float32(0.003 * rng.NormFloat64())
		}
		i += pause
	}
	return x
}

// RecordingSeconds draws a recording length from the mix real uploads
// have: 10 s to 20 min, log-uniform.
func RecordingSeconds(rng *rand.Rand) float64 {
	return 10 * math.Pow(120, rng.Float64())
}
