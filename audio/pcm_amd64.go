package audio

// pcm16MonoAVX2 converts 16-bit samples to float32 eight at a time: the
// first len(out)&^7 of them (data holds 2*len(out) bytes).
//
//go:noescape
func pcm16MonoAVX2(out []float32, data []byte)

// pcm16Mono converts 16-bit little-endian samples to float32 in [-1, 1),
// exactly as pcm16MonoGeneric does.
func pcm16Mono(out []float32, data []byte) {
	data = data[:2*len(out)]
	if haveFMA {
		n := len(out) &^ 7
		pcm16MonoAVX2(out[:n], data[:2*n])
		out, data = out[n:], data[2*n:]
	}
	pcm16MonoGeneric(out, data)
}

// pcm16StereoAVX2 mixes the first len(out)&^7 frames of 16-bit stereo as
// pcm16Stereo does (data holds 4*len(out) bytes).
//
//go:noescape
func pcm16StereoAVX2(out []float32, data []byte) (eL, eR, eS int64)

// pcm16Stereo writes each frame's (l+r)/2 as float32 and returns the
// exact sums of l², r² and (l+r)², as pcm16StereoGeneric does.
func pcm16Stereo(out []float32, data []byte) (eL, eR, eS int64) {
	data = data[:4*len(out)]
	if haveFMA {
		n := len(out) &^ 7
		eL, eR, eS = pcm16StereoAVX2(out[:n], data[:4*n])
		out, data = out[n:], data[4*n:]
	}
	l, r, s := pcm16StereoGeneric(out, data)
	return eL + l, eR + r, eS + s
}
