package audio

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// The vector conversions of 16-bit PCM give exactly what the plain loops
// give, at every length and alignment, full scale included.
func TestPCM16VectorMatchesGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	raw := make([]byte, 4*200+3)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	raw[10], raw[11] = 0x00, 0x80 // -32768
	raw[12], raw[13] = 0x00, 0x80
	raw[20], raw[21] = 0xff, 0x7f // 32767
	for n := 0; n <= 100; n++ {
		for off := range 3 {
			data := raw[off:]
			want, got := make([]float32, n), make([]float32, n)
			pcm16MonoGeneric(want, data[:2*n])
			pcm16Mono(got, data[:2*n])
			if !sameBits(got, want) {
				t.Fatalf("mono, %d samples at offset %d: %v, want %v", n, off, got, want)
			}
			l0, r0, s0 := pcm16StereoGeneric(want, data[:4*n])
			l1, r1, s1 := pcm16Stereo(got, data[:4*n])
			if !sameBits(got, want) || l0 != l1 || r0 != r1 || s0 != s1 {
				t.Fatalf("stereo, %d frames at offset %d: energies %d %d %d, want %d %d %d; samples equal: %v",
					n, off, l1, r1, s1, l0, r0, s0, sameBits(got, want))
			}
		}
	}
}

func BenchmarkPCM16(b *testing.B) {
	data := make([]byte, 4*32768)
	for i := range data {
		data[i] = byte(i * 7)
	}
	out := make([]float32, 32768)
	b.Run("mono", func(b *testing.B) {
		for b.Loop() {
			pcm16Mono(out, data[:2*len(out)])
		}
	})
	b.Run("stereo", func(b *testing.B) {
		for b.Loop() {
			pcm16Stereo(out, data)
		}
	})
}

// The vector energy and peak agree with the plain loop (the sum within
// float32 rounding, the peak exactly, NaN and infinity included), and
// scaling gives exactly the plain loop's samples.
func TestEnergyMaxAndScaleVectorMatchGeneric(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	x := make([]float32, 600)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	for n := 0; n <= 500; n += 7 {
		for _, special := range []float32{0, float32(math.Inf(-1)), float32(math.NaN()), -3.5} {
			y := slices.Clone(x[:n])
			if n > 0 && special != 0 {
				y[n/2] = special
			}
			gs, gm := energyMax(y)
			ws, wm := energyMaxGeneric(y)
			if gm != wm || !(math.Abs(float64(gs-ws)) <= 1e-5*math.Abs(float64(ws)) || math.IsNaN(float64(ws)) && math.IsNaN(float64(gs)) || gs == ws) {
				t.Fatalf("%d samples (special %v): sum %v peak bits %#x, want %v %#x", n, special, gs, gm, ws, wm)
			}
			a, b := slices.Clone(y), slices.Clone(y)
			scale(a, 1.7)
			scaleGeneric(b, 1.7)
			if !sameBits(a, b) {
				t.Fatalf("%d samples: scale differs from the plain loop", n)
			}
		}
	}
}
