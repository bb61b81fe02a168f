package audio

import (
	"math"
	"slices"
)

// Chunk is a piece of a longer recording.
type Chunk struct {
	Offset  int // first sample's index in the recording
	Samples []float32
	// Overlap is how many samples at the start repeat the end of the
	// previous chunk: where no pause was found to cut at, chunks overlap so
	// that the word cut in two is heard whole in one of them.
	Overlap int
}

// SplitConfig bounds chunk lengths, in samples.
type SplitConfig struct {
	Max   int // no chunk is longer
	Frame int // energy frame used to find quiet points (e.g. 30 ms)
	// Overlap is the overlap of chunks cut where there is no pause (0:
	// none; chunks then always meet end to end).
	Overlap int
}

// pauseRatio: a frame quieter than this fraction of the window's median
// frame energy (-20 dB) is a pause, where a cut loses nothing.
const pauseRatio = 0.01

// Split cuts x into chunks of at most cfg.Max samples. Each cut is made in
// the quietest frame of the second half of the window, so words are rarely
// cut in two. Where that frame is not a pause (continuous speech), the
// next chunk starts cfg.Overlap samples before the cut. The chunks cover
// x, in order; each starts where the previous one ends, less its Overlap.
func Split(x []float32, cfg SplitConfig) []Chunk {
	if cfg.Max <= 0 || len(x) <= cfg.Max {
		return []Chunk{{Offset: 0, Samples: x}}
	}
	frame := cfg.Frame
	if frame <= 0 || frame > cfg.Max/4 {
		frame = max(1, cfg.Max/64)
	}
	overlap := min(max(cfg.Overlap, 0), cfg.Max/4)
	var out []Chunk
	start, shared := 0, 0
	for start < len(x) {
		if len(x)-start <= cfg.Max {
			out = append(out, Chunk{Offset: start, Samples: x[start:], Overlap: shared})
			break
		}
		c, pause := quietestCut(x, start+cfg.Max/2, start+cfg.Max, frame)
		// Always forward, never past Max (found by FuzzSplit: tiny bounds
		// once looped forever).
		cut := min(max(c, start+1), start+cfg.Max)
		out = append(out, Chunk{Offset: start, Samples: x[start:cut], Overlap: shared})
		shared = 0
		if !pause && overlap > 0 && cut-overlap > start {
			shared = overlap
		}
		start = cut - shared
	}
	return out
}

// quietestCut returns the middle of the lowest-energy frame that lies
// within [lo, hi), and whether that frame is a pause: far quieter than the
// window's median frame.
func quietestCut(x []float32, lo, hi, frame int) (int, bool) {
	best, bestE := hi, math.Inf(1)
	var energies []float64
	for f := lo; f+frame <= hi; f += max(1, frame/2) {
		var e float64
		for _, s := range x[f : f+frame] {
			e += float64(s) * float64(s)
		}
		energies = append(energies, e)
		if e < bestE {
			best, bestE = f+frame/2, e
		}
	}
	if len(energies) == 0 {
		return best, true
	}
	return best, bestE <= pauseRatio*median(energies)
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	slices.Sort(s) // windows have a few thousand frames
	return s[len(s)/2]
}
