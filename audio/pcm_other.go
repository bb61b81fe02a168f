//go:build !amd64

package audio

// pcm16Mono converts 16-bit little-endian samples to float32 in [-1, 1).
func pcm16Mono(out []float32, data []byte) { pcm16MonoGeneric(out, data) }

// pcm16Stereo writes each frame's (l+r)/2 as float32 and returns the
// exact sums of l², r² and (l+r)².
func pcm16Stereo(out []float32, data []byte) (eL, eR, eS int64) {
	return pcm16StereoGeneric(out, data)
}
