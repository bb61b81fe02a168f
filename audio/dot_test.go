package audio

import (
	"math"
	"math/rand/v2"
	"testing"
)

// dot, in vector instructions where the CPU has them, agrees with the
// exact inner product (float64) at every length and alignment, within
// float32 rounding of the sum of magnitudes.
func TestDotMatchesExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]float32, 460)
	for i := range buf {
		buf[i] = float32(rng.NormFloat64())
	}
	for n := 0; n <= 200; n++ {
		for off := range 3 {
			a, b := buf[off:off+n], buf[230+off:]
			var exact, mag float64
			for i := range a {
				exact += float64(a[i]) * float64(b[i])
				mag += math.Abs(float64(a[i]) * float64(b[i]))
			}
			for name, f := range map[string]func(a, b []float32) float32{"dot": dot, "dotGeneric": dotGeneric} {
				if got := float64(f(a, b)); math.Abs(got-exact) > 1e-6*mag+1e-30 {
					t.Fatalf("%s, %d floats at offset %d: %g, exact %g", name, n, off, got, exact)
				}
			}
		}
	}
}

// dot2 gives, bit for bit, what dot gives for each of its two pairs (the
// resampler pairs outputs where it can; streamed and whole resampling
// must agree exactly).
func TestDot2IsTwoDots(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]float32, 1200)
	for i := range buf {
		buf[i] = float32(rng.NormFloat64())
	}
	for n := 0; n <= 256; n += 8 {
		for off := range 3 {
			a0, b0, a1, b1 := buf[off:], buf[300+off:], buf[600+2*off:], buf[900+off:]
			g0, g1 := dot2(a0[:n], b0, a1[:n], b1)
			w0, w1 := dot(a0[:n], b0), dot(a1[:n], b1)
			if math.Float32bits(g0) != math.Float32bits(w0) || math.Float32bits(g1) != math.Float32bits(w1) {
				t.Fatalf("%d floats at offset %d: dot2 %v %v, dot %v %v", n, off, g0, g1, w0, w1)
			}
		}
	}
}

func BenchmarkDot90(b *testing.B) {
	x := make([]float32, 90)
	y := make([]float32, 200)
	for i := range x {
		x[i] = float32(i)
	}
	var s float32
	for b.Loop() {
		s += dot(x, y)
	}
	_ = s
}
