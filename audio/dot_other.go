//go:build !amd64

package audio

// dot1 is the resampler's inner product of a and b[:len(a)].
func dot1(a, b []float32) float32 { return dotGeneric(a, b) }

// dot4 is dot1 of four pairs.
func dot4(a0, a1, a2, a3, b0, b1, b2, b3 []float32) [4]float32 {
	n := len(a0)
	return [4]float32{dotGeneric(a0, b0[:n]), dotGeneric(a1, b1[:n]), dotGeneric(a2, b2[:n]), dotGeneric(a3, b3[:n])}
}
