package audio

import (
	"math"
	"math/rand/v2"
	"testing"
)

// dot1, in vector instructions where the CPU has them, agrees with the
// exact inner product (float64) at every length (a multiple of 8, as the
// resampler's padded rows are) and alignment, within float32 rounding of
// the sum of magnitudes; so does the plain loop at every length.
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
			fs := map[string]func(a, b []float32) float32{"dotGeneric": dotGeneric}
			if n%8 == 0 {
				fs["dot1"] = dot1
			}
			for name, f := range fs {
				if got := float64(f(a, b)); math.Abs(got-exact) > 1e-6*mag+1e-30 {
					t.Fatalf("%s, %d floats at offset %d: %g, exact %g", name, n, off, got, exact)
				}
			}
		}
	}
}

// dot4 gives, bit for bit, what dot1 gives for each of its four pairs
// (the resampler takes outputs four at a time where it can, which depends
// on where a stream's blocks end; streamed and whole resampling must
// agree exactly).
func TestDot4IsFourDots(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]float32, 2400)
	for i := range buf {
		buf[i] = float32(rng.NormFloat64())
	}
	for n := 0; n <= 256; n += 8 {
		for off := range 3 {
			var a, b [4][]float32
			for i := range 4 {
				a[i] = buf[300*i+off : 300*i+off+n]
				b[i] = buf[1200+300*i+(i+1)*off:]
			}
			got := dot4(a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3])
			for i := range 4 {
				if want := dot1(a[i], b[i]); math.Float32bits(got[i]) != math.Float32bits(want) {
					t.Fatalf("%d floats at offset %d, output %d: dot4 %v, dot1 %v", n, off, i, got[i], want)
				}
			}
		}
	}
}

// dotBenchInputs is a 96-tap row (a multiple of 8, as the resampler's
// padded rows are) and a longer input.
func dotBenchInputs() (row, x []float32) {
	row, x = make([]float32, 96), make([]float32, 200)
	for i := range row {
		row[i] = float32(i)
	}
	return row, x
}

func BenchmarkDot96(b *testing.B) {
	x, y := dotBenchInputs()
	var s float32
	for b.Loop() {
		s += dot1(x, y)
	}
	_ = s
}

func BenchmarkDot4x96(b *testing.B) {
	x, y := dotBenchInputs()
	var s float32
	for b.Loop() {
		r := dot4(x, x, x, x, y, y[1:], y[2:], y[3:])
		s += r[0]
	}
	_ = s
}
