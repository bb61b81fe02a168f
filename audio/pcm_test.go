package audio

import (
	"math/rand/v2"
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
