//go:build !amd64

package audio

// energyMax returns the sum of the squares of x and its largest |sample|
// as float bits (which order like the values for finite floats; NaN is
// above them all).
func energyMax(x []float32) (float32, uint32) { return energyMaxGeneric(x) }

// scale multiplies every sample of x by g.
func scale(x []float32, g float32) { scaleGeneric(x, g) }
