package audio

import (
	"math"
	"slices"
	"sync"
)

// zeroCrossings is the windowed-sinc half-width, in zero crossings of the
// (possibly widened) low-pass kernel. With the Kaiser window below, 16
// puts the transition band within ±1 kHz of the output Nyquist frequency
// when 44.1 or 48 kHz is taken to 16 kHz: flat within 0.2 dB to 7 kHz,
// over 60 dB down from 9 kHz (TestResampleQuality).
const zeroCrossings = 16

// kaiserBeta trades the window's side lobes (about -66 dB at 6.3) against
// the width of the transition band.
const kaiserBeta = 6.3

// maxPhases bounds the kernel table for awkward rate ratios; phases are
// then quantised, an error far below 16-bit noise.
const maxPhases = 1024

// Resample converts x from rate from to rate to with a polyphase
// Kaiser-windowed sinc low-pass filter (cut-off at the lower Nyquist
// frequency). At equal rates it returns x itself, not a copy. A Resampler
// gives the same samples from a stream.
func Resample(x []float32, from, to int) []float32 {
	if from == to || len(x) == 0 {
		return x
	}
	k := kernelFor(from, to)
	out := make([]float32, k.outputs(int64(len(x))))
	k.fill(out, 0, x, 0, int64(len(x)))
	return out
}

// kernel is the polyphase filter of one rate conversion.
type kernel struct {
	up, down   int64 // output n sits at input n*down/up
	phases     int64
	half, taps int
	table      []float32 // phases rows of taps
}

var kernels sync.Map // [2]int{from, to} → *kernel

// kernelFor returns the filter for from → to, built once per process (it
// takes about a millisecond).
func kernelFor(from, to int) *kernel {
	if k, ok := kernels.Load([2]int{from, to}); ok {
		return k.(*kernel)
	}
	g := gcd(from, to)
	k := &kernel{up: int64(to / g), down: int64(from / g)}
	k.phases = min(k.up, maxPhases)
	scale := math.Min(1, float64(to)/float64(from)) // cut-off relative to input Nyquist
	k.half = int(math.Ceil(zeroCrossings / scale))  // taps each side
	// Rows padded with zeros to a multiple of 8 taps (the window is 0
	// there): whole vector steps for dot, no scalar tail.
	k.taps = (2*k.half + 7) &^ 7
	k.table = make([]float32, int(k.phases)*k.taps)
	for p := range int(k.phases) {
		frac := float64(p) / float64(k.phases)
		var sum float64
		row := k.table[p*k.taps : (p+1)*k.taps]
		for i := range row {
			d := float64(i-k.half+1) - frac // distance of tap from the output instant
			v := scale * sinc(scale*d) * kaiser(d, float64(k.half))
			row[i] = float32(v)
			sum += v
		}
		for i := range row { // unity DC gain for every phase
			row[i] = float32(float64(row[i]) / sum)
		}
	}
	actual, _ := kernels.LoadOrStore([2]int{from, to}, k)
	return actual.(*kernel)
}

// outputs is how many samples n inputs give.
func (k *kernel) outputs(n int64) int64 { return (n*k.up + k.down - 1) / k.down }

// first is the first input that output i reads.
func (k *kernel) first(i int64) int64 { return i*k.down/k.up - int64(k.half) + 1 }

// fill computes outputs i0, i0+1, ... into out. x holds the inputs from
// index xOff on; inputs before 0 or from end on are zero. Every input an
// output reads, other than those, must be in x.
func (k *kernel) fill(out []float32, i0 int64, x []float32, xOff, end int64) {
	avail := min(end, xOff+int64(len(x)))
	taps := int64(k.taps)
	// Output i sits at input (i*down)/up: its whole part q and phase p
	// step by down/up and down%up from one output to the next (no
	// division per output).
	p, q := (i0*k.down)%k.up, (i0*k.down)/k.up
	dq, dp := k.down/k.up, k.down%k.up
	step := func(p, q int64) (int64, int64) {
		if p += dp; p >= k.up {
			return p - k.up, q + dq + 1
		}
		return p, q + dq
	}
	row := func(p int64) []float32 {
		if k.phases != k.up {
			p = p * k.phases / k.up
		}
		return k.table[int(p)*k.taps : int(p+1)*k.taps]
	}
	half := int64(k.half)
	for j := 0; j < len(out); {
		start := q - half + 1
		if start >= xOff && start+taps <= avail {
			// This output and, when they too have all their inputs, the
			// next three in one call (each the same sum, bit for bit, as
			// alone).
			if j+4 <= len(out) {
				p1, q1 := step(p, q)
				p2, q2 := step(p1, q1)
				p3, q3 := step(p2, q2)
				if q3-half+1+taps <= avail {
					// Where each output's inputs start in x.
					s0, s1, s2, s3 := start-xOff, q1-half+1-xOff, q2-half+1-xOff, q3-half+1-xOff
					r := dot4(row(p), row(p1), row(p2), row(p3),
						x[s0:s0+taps], x[s1:s1+taps], x[s2:s2+taps], x[s3:s3+taps])
					copy(out[j:j+4], r[:])
					j += 4
					p, q = step(p3, q3)
					continue
				}
			}
			out[j] = dot1(row(p), x[start-xOff:start-xOff+taps])
		} else {
			var acc float32
			for t, h := range row(p) {
				if n := start + int64(t); n >= 0 && n < end {
					acc += h * x[n-xOff]
				}
			}
			out[j] = acc
		}
		p, q = step(p, q)
		j++
	}
}

// Resampler converts a stream of samples from one rate to another, giving
// exactly the samples Resample gives for the whole.
type Resampler struct {
	k    *kernel // nil: equal rates, samples pass through
	buf  []float32
	off  int64 // index of buf[0] in the input
	in   int64 // inputs so far
	next int64 // the next output
}

// NewResampler converts from rate from to rate to.
func NewResampler(from, to int) *Resampler {
	if from == to {
		return &Resampler{}
	}
	return &Resampler{k: kernelFor(from, to)}
}

// Write takes the next inputs and appends to out the outputs they
// complete, returning it. x is not kept.
func (r *Resampler) Write(out, x []float32) []float32 {
	if r.k == nil {
		return append(out, x...)
	}
	r.buf = append(r.buf, x...)
	r.in += int64(len(x))
	// Output i is complete once its last tap, input first(i)+taps-1, is in
	// (padding included: dot reads it).
	last := r.in - int64(r.k.taps-r.k.half) // outputs below last*up/down
	if last <= 0 {
		return out
	}
	ready := (last*r.k.up + r.k.down - 1) / r.k.down
	out = r.emit(out, ready)
	// Drop the inputs no later output reads.
	if drop := r.k.first(r.next) - r.off; drop > 0 && drop >= int64(len(r.buf))/2 {
		r.off += drop
		r.buf = r.buf[:copy(r.buf, r.buf[drop:])]
	}
	return out
}

// Flush appends the outputs that remain once the input has ended.
func (r *Resampler) Flush(out []float32) []float32 {
	if r.k == nil {
		return out
	}
	return r.emit(out, r.k.outputs(r.in))
}

// emit appends outputs up to (not including) until.
func (r *Resampler) emit(out []float32, until int64) []float32 {
	if until <= r.next {
		return out
	}
	n := len(out)
	// Grown, not cleared: fill writes every output.
	out = slices.Grow(out, int(until-r.next))[:n+int(until-r.next)]
	r.k.fill(out[n:], r.next, r.buf, r.off, r.in)
	r.next = until
	return out
}

// dotGeneric is the inner product of two slices of equal length, eight
// accumulators at a time (1.4 times faster than one); dot is this, or the
// same in vector instructions where the CPU has them (dot_amd64.s).
func dotGeneric(a, b []float32) float32 {
	b = b[:len(a)]
	var s0, s1, s2, s3, s4, s5, s6, s7 float32
	i := 0
	for ; i+8 <= len(a); i += 8 {
		aa, bb := a[i:i+8:i+8], b[i:i+8:i+8]
		s0 += aa[0] * bb[0]
		s1 += aa[1] * bb[1]
		s2 += aa[2] * bb[2]
		s3 += aa[3] * bb[3]
		s4 += aa[4] * bb[4]
		s5 += aa[5] * bb[5]
		s6 += aa[6] * bb[6]
		s7 += aa[7] * bb[7]
	}
	for ; i < len(a); i++ {
		s0 += a[i] * b[i]
	}
	return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
}

func sinc(x float64) float64 {
	if x == 0 {
		return 1
	}
	return math.Sin(math.Pi*x) / (math.Pi * x)
}

// kaiser is the Kaiser window of half-width half at distance d.
func kaiser(d, half float64) float64 {
	if d <= -half || d >= half {
		return 0
	}
	r := d / half
	return besselI0(kaiserBeta*math.Sqrt(1-r*r)) / besselI0(kaiserBeta)
}

// besselI0 is the modified Bessel function of the first kind, order 0, by
// its power series (it converges fast for the arguments used here).
func besselI0(x float64) float64 {
	sum, term := 1.0, 1.0
	for k := 1; k < 50; k++ {
		term *= (x / (2 * float64(k))) * (x / (2 * float64(k)))
		sum += term
		if term < sum*1e-17 {
			break
		}
	}
	return sum
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
