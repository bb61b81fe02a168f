//go:build !amd64

package audio

// dot is the resampler's hot loop: the inner product of a and b[:len(a)].
func dot(a, b []float32) float32 { return dotGeneric(a, b) }

// dot2 is dot(a0, b0) and dot(a1, b1).
func dot2(a0, b0, a1, b1 []float32) (float32, float32) {
	return dotGeneric(a0, b0), dotGeneric(a1, b1[:len(a0)])
}
