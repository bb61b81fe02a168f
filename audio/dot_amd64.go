package audio

import "golang.org/x/sys/cpu"

// haveFMA: AVX2 and FMA3, every x86-64 server CPU since 2013.
var haveFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// dotFMA is dotGeneric with 8-wide fused multiply-adds; b must be at least
// as long as a.
//
//go:noescape
func dotFMA(a, b []float32) float32

// dot is the resampler's hot loop: the inner product of a and b[:len(a)].
func dot(a, b []float32) float32 {
	b = b[:len(a)]
	if haveFMA {
		return dotFMA(a, b)
	}
	return dotGeneric(a, b)
}

// dot2FMA is dotFMA of (a0, b0) and of (a1, b1), bit for bit, computed
// together; the lengths are equal and a multiple of 8.
//
//go:noescape
func dot2FMA(a0, b0, a1, b1 []float32) (s0, s1 float32)

// dot2 is dot(a0, b0) and dot(a1, b1), bit for bit; the lengths are
// equal and a multiple of 8 (the resampler's padded rows).
func dot2(a0, b0, a1, b1 []float32) (float32, float32) {
	n := len(a0)
	b0, a1, b1 = b0[:n], a1[:n], b1[:n]
	if haveFMA && n%8 == 0 {
		return dot2FMA(a0, b0, a1, b1)
	}
	return dotGeneric(a0, b0), dotGeneric(a1, b1)
}
