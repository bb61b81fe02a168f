package audio

// energyMaxAVX2 is energyMaxGeneric over a multiple of 8 samples.
//
//go:noescape
func energyMaxAVX2(x []float32) (sum float32, maxBits uint32)

// scaleAVX2 multiplies a multiple of 8 samples by gain.
//
//go:noescape
func scaleAVX2(x []float32, gain float32)

// energyMax returns the sum of the squares of x and its largest |sample|
// as float bits (which order like the values for finite floats; NaN is
// above them all).
func energyMax(x []float32) (float32, uint32) {
	if !haveFMA {
		return energyMaxGeneric(x)
	}
	n := len(x) &^ 7
	s, m := energyMaxAVX2(x[:n])
	ts, tm := energyMaxGeneric(x[n:])
	return s + ts, max(m, tm)
}

// scale multiplies every sample of x by g.
func scale(x []float32, g float32) {
	if haveFMA {
		n := len(x) &^ 7
		scaleAVX2(x[:n], g)
		x = x[n:]
	}
	scaleGeneric(x, g)
}
