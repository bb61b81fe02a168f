package audio

import "math"

// zeroCrossings is the windowed-sinc half-width, in zero crossings of the
// (possibly widened) low-pass kernel: 16 gives over 80 dB of stop-band
// rejection with the Blackman window.
const zeroCrossings = 16

// maxPhases bounds the kernel table for awkward rate ratios; phases are
// then quantised, an error far below 16-bit noise.
const maxPhases = 1024

// Resample converts x from rate from to rate to with a polyphase windowed
// sinc low-pass filter (cut-off at the lower Nyquist frequency). At equal
// rates it returns x itself, not a copy.
func Resample(x []float32, from, to int) []float32 {
	if from == to || len(x) == 0 {
		return x
	}
	g := gcd(from, to)
	up, down := to/g, from/g // output n sits at input n*down/up
	phases := up
	if phases > maxPhases {
		phases = maxPhases
	}
	scale := math.Min(1, float64(to)/float64(from)) // cut-off relative to input Nyquist
	half := int(math.Ceil(zeroCrossings / scale))   // taps each side
	taps := 2 * half
	table := make([]float32, phases*taps)
	for p := 0; p < phases; p++ {
		frac := float64(p) / float64(phases)
		var sum float64
		row := table[p*taps : (p+1)*taps]
		for k := 0; k < taps; k++ {
			d := float64(k-half+1) - frac // distance of tap from the output instant
			v := scale * sinc(scale*d) * blackman(d, float64(half))
			row[k] = float32(v)
			sum += v
		}
		for k := range row { // unity DC gain for every phase
			row[k] = float32(float64(row[k]) / sum)
		}
	}
	n := int((int64(len(x))*int64(up) + int64(down) - 1) / int64(down))
	out := make([]float32, n)
	for i := range out {
		pos := int64(i) * int64(down)
		base := int(pos / int64(up))
		p := int(pos % int64(up))
		if phases != up {
			p = int(int64(p) * int64(phases) / int64(up))
		}
		row := table[p*taps : (p+1)*taps]
		start := base - half + 1
		var acc float32
		if start >= 0 && start+taps <= len(x) {
			seg := x[start : start+taps]
			for k, h := range row {
				acc += h * seg[k]
			}
		} else {
			for k, h := range row {
				if j := start + k; j >= 0 && j < len(x) {
					acc += h * x[j]
				}
			}
		}
		out[i] = acc
	}
	return out
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// blackman is the Blackman window over [-half, half].
func blackman(d, half float64) float64 {
	if d <= -half || d >= half {
		return 0
	}
	t := (d + half) / (2 * half)
	return 0.42 - 0.5*math.Cos(2*math.Pi*t) + 0.08*math.Cos(4*math.Pi*t)
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
