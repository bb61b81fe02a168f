package audio

import (
	"math"
	"slices"
	"time"
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

// StitchOverlap is how far chunks cut where there is no pause overlap when
// word times let the overlap be resolved (stitch keeps each word once).
const StitchOverlap = time.Second

// ChunkSplit is how the worker cuts recordings of rate samples a second,
// and every benchmark that sends what it sends: at pauses (30-ms frames),
// into chunks of at most chunkSeconds, overlapping by overlap where no
// pause was found (StitchOverlap with word times, 0 without).
func ChunkSplit(rate int, chunkSeconds float64, overlap time.Duration) SplitConfig {
	return SplitConfig{Max: int(chunkSeconds * float64(rate)), Frame: rate * 30 / 1000, Overlap: int(overlap.Seconds() * float64(rate))}
}

// pauseRatio: a frame quieter than this fraction of the window's median
// frame energy (-20 dB) is a pause, where a cut loses nothing.
const pauseRatio = 0.01

// Split cuts x into chunks of at most cfg.Max samples. Each cut is made in
// the last pause of the second half of the window (else its quietest
// frame), so words are rarely cut in two. Where there is no pause
// (continuous speech), the next chunk starts cfg.Overlap samples before
// the cut. The chunks cover x, in order; each starts where the previous
// one ends, less its Overlap. Their samples are x's own. A Splitter cuts a
// stream the same way.
func Split(x []float32, cfg SplitConfig) []Chunk {
	s := NewSplitter(cfg)
	s.buf = x
	var out []Chunk
	for {
		c, ok := s.Next(true)
		if !ok {
			return out
		}
		out = append(out, c)
	}
}

// Splitter cuts a stream of samples into the chunks Split would give for
// the whole, each as soon as the samples after it decide where it ends.
type Splitter struct {
	max, frame, overlap int
	buf                 []float32
	off                 int  // index of buf[0] in the stream
	start, shared       int  // the next chunk's first sample and overlap
	done                bool // the last chunk is out
}

// NewSplitter cuts chunks as cfg says.
func NewSplitter(cfg SplitConfig) *Splitter {
	s := &Splitter{max: cfg.Max}
	if cfg.Max > 0 {
		s.frame = cfg.Frame
		if s.frame <= 0 || s.frame > cfg.Max/4 {
			s.frame = max(1, cfg.Max/64)
		}
		s.overlap = min(max(cfg.Overlap, 0), cfg.Max/4)
	}
	return s
}

// Write appends samples to the stream. The chunks Next returned before are
// no longer valid.
func (s *Splitter) Write(x []float32) {
	if drop := s.start - s.off; drop > 0 {
		s.buf = s.buf[:copy(s.buf, s.buf[drop:])]
		s.off = s.start
	}
	s.buf = append(s.buf, x...)
}

// Next returns the next chunk whose end is known, or false if there is
// none yet; final says that the stream has ended (every chunk is then
// known). The chunk's samples are the splitter's, valid until Write.
func (s *Splitter) Next(final bool) (Chunk, bool) {
	end := s.off + len(s.buf)
	switch {
	case s.done:
		return Chunk{}, false
	case s.max <= 0 || end-s.start <= s.max:
		if !final {
			return Chunk{}, false
		}
		s.done = true
		return Chunk{Offset: s.start, Samples: s.buf[s.start-s.off:], Overlap: s.shared}, true
	}
	c, pause := cutPoint(s.buf, s.start+s.max/2-s.off, s.start+s.max-s.off, s.frame)
	c += s.off
	// Always forward, never past Max (found by FuzzSplit: tiny bounds once
	// looped forever).
	cut := min(max(c, s.start+1), s.start+s.max)
	chunk := Chunk{Offset: s.start, Samples: s.buf[s.start-s.off : cut-s.off], Overlap: s.shared}
	s.shared = 0
	if !pause && s.overlap > 0 && cut-s.overlap > s.start {
		s.shared = s.overlap
	}
	s.start = cut - s.shared
	return chunk, true
}

// minPause is how many frames long a pause must be for a cut to prefer
// it (six 30-ms frames: 0.18 s). Shorter quiet spans are also inside words
// (the closure before a stop consonant), and only the quietest of them is
// cut at, as before.
const minPause = 6

// cutPoint returns where to cut within [lo, hi) and whether the cut is in
// a pause: a span at least minPause frames long whose every frame is far
// quieter than the window's median frame. The cut is the middle of the last
// such span, so a chunk fills as much of its window as the speech allows
// (a GPU pads every chunk to the longest); where there is none, it is the
// middle of the lowest-energy frame, a pause only if that frame is.
func cutPoint(x []float32, lo, hi, frame int) (int, bool) {
	best, bestE := hi, math.Inf(1)
	hop := max(1, frame/2)
	var energies []float64
	for f := lo; f+frame <= hi; f += hop {
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
	quiet := pauseRatio * median(energies)
	if cut, ok := lastPause(energies, quiet, lo, frame, hop); ok {
		return cut, true
	}
	return best, bestE <= quiet
}

// lastPause returns the middle of the last run of frames (energies, the
// first at lo, hop apart) no louder than quiet that spans minPause frames.
func lastPause(energies []float64, quiet float64, lo, frame, hop int) (int, bool) {
	end := len(energies) // one past the run's last frame
	for i := len(energies) - 1; i >= -1; i-- {
		if i >= 0 && energies[i] <= quiet {
			continue
		}
		// frames i+1 .. end-1 are quiet
		if first := i + 1; end > first && (end-1-first)*hop+frame >= minPause*frame {
			startAt, stopAt := lo+first*hop, lo+(end-1)*hop+frame
			return (startAt + stopAt) / 2, true
		}
		end = i
	}
	return 0, false
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	slices.Sort(s) // windows have a few thousand frames
	return s[len(s)/2]
}
