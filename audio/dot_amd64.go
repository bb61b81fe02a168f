package audio

import "golang.org/x/sys/cpu"

// haveFMA: AVX2 and FMA3, every x86-64 server CPU since 2013.
var haveFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dot1FMA is the inner product of n floats (n a multiple of 8) in the
// order described in dot_amd64.s.
//
//go:noescape
func dot1FMA(a, b *float32, n int) float32

// dot4FMA is dot1FMA of four pairs at once, bit for bit.
//
//go:noescape
func dot4FMA(a0, a1, a2, a3, b0, b1, b2, b3 *float32, n int, out *[4]float32)

// dot1 is the resampler's inner product of a and b[:len(a)], where len(a)
// is a multiple of 8 (its padded rows).
func dot1(a, b []float32) float32 {
	b = b[:len(a)]
	if haveFMA && len(a) > 0 && len(a)%8 == 0 {
		return dot1FMA(&a[0], &b[0], len(a))
	}
	return dotGeneric(a, b)
}

// dot4 is dot1 of four pairs, bit for bit, computed together; the a are
// of one length and each b at least as long.
func dot4(a0, a1, a2, a3, b0, b1, b2, b3 []float32) (out [4]float32) {
	n := len(a0)
	a1, a2, a3 = a1[:n], a2[:n], a3[:n]
	b0, b1, b2, b3 = b0[:n], b1[:n], b2[:n], b3[:n]
	if haveFMA && n > 0 && n%8 == 0 {
		dot4FMA(&a0[0], &a1[0], &a2[0], &a3[0], &b0[0], &b1[0], &b2[0], &b3[0], n, &out)
		return out
	}
	return [4]float32{dotGeneric(a0, b0), dotGeneric(a1, b1), dotGeneric(a2, b2), dotGeneric(a3, b3)}
}
