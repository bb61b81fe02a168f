package audio

import "math"

// Chunk is a piece of a longer recording.
type Chunk struct {
	Offset  int // first sample's index in the recording
	Samples []float32
}

// SplitConfig bounds chunk lengths, in samples.
type SplitConfig struct {
	Max   int // no chunk is longer
	Frame int // energy frame used to find quiet points (e.g. 30 ms)
}

// Split cuts x into chunks of at most cfg.Max samples. Each cut is made in
// the quietest frame of the second half of the window, so words are rarely
// cut in two. The chunks cover x exactly, in order.
func Split(x []float32, cfg SplitConfig) []Chunk {
	if cfg.Max <= 0 || len(x) <= cfg.Max {
		return []Chunk{{Offset: 0, Samples: x}}
	}
	frame := cfg.Frame
	if frame <= 0 || frame > cfg.Max/4 {
		frame = max(1, cfg.Max/64)
	}
	var out []Chunk
	for start := 0; start < len(x); {
		if len(x)-start <= cfg.Max {
			out = append(out, Chunk{Offset: start, Samples: x[start:]})
			break
		}
		// Always forward, never past Max (found by FuzzSplit: tiny bounds
		// once looped forever).
		cut := min(max(quietestCut(x, start+cfg.Max/2, start+cfg.Max, frame), start+1), start+cfg.Max)
		out = append(out, Chunk{Offset: start, Samples: x[start:cut]})
		start = cut
	}
	return out
}

// quietestCut returns the middle of the lowest-energy frame that lies
// within [lo, hi).
func quietestCut(x []float32, lo, hi, frame int) int {
	best, bestE := hi, math.Inf(1)
	for f := lo; f+frame <= hi; f += max(1, frame/2) {
		var e float64
		for _, s := range x[f : f+frame] {
			e += float64(s) * float64(s)
		}
		if e < bestE {
			best, bestE = f+frame/2, e
		}
	}
	return best
}
