package audio

import (
	"errors"
	"math"
	"slices"
)

// Down-mixing to mono, so that speech survives any channel layout:
//
//   - Stereo is the mean of the channels, unless the channels cancel (one
//     of them inverted, as a miswired microphone or a phase-inverted
//     export gives): where the mean keeps less than a quarter of the
//     louder channel's energy, the louder channel is taken alone.
//   - 5.1 (WAV's FL, FR, FC, LFE, BL, BR) takes the ITU-R BS.775 stereo
//     down-mix (centre and surrounds at -3 dB, LFE dropped) and then the
//     mean, so dialogue in the centre arrives at -3 dB, not at a sixth.
//   - Other counts are the mean.
//
// mixFrames mixes interleaved frames of n channels, read by at(frame,
// channel), into out.
func mixFrames(out []float32, n int, at func(i, c int) float32) {
	switch n {
	case 1:
		for i := range out {
			out[i] = at(i, 0)
		}
	case 2:
		var eL, eR, eM float64
		for i := range out {
			l, r := at(i, 0), at(i, 1)
			m := (l + r) / 2
			out[i] = m
			eL += float64(l) * float64(l)
			eR += float64(r) * float64(r)
			eM += float64(m) * float64(m)
		}
		keepLouder(out, eL, eR, eM, func(i int) (float32, float32) { return at(i, 0), at(i, 1) })
	case 6:
		const g = 0.70710678 // -3 dB
		for i := range out {
			// (L + R) / 2 of L = FL + g FC + g BL, R = FR + g FC + g BR.
			out[i] = (at(i, 0)+at(i, 1))/2 + g*at(i, 2) + g/2*(at(i, 4)+at(i, 5))
		}
	default:
		inv := 1 / float32(n)
		for i := range out {
			var s float32
			for c := range n {
				s += at(i, c)
			}
			out[i] = s * inv
		}
	}
}

// keepLouder replaces a stereo mean that cancelled with the louder channel.
func keepLouder(out []float32, eL, eR, eM float64, lr func(i int) (float32, float32)) {
	if eM >= 0.25*max(eL, eR) || max(eL, eR) == 0 {
		return
	}
	for i := range out {
		l, r := lr(i)
		if eL >= eR {
			out[i] = l
		} else {
			out[i] = r
		}
	}
}

// Level normalisation of a chunk before it is sent: recordings arrive at
// any level (a phone far from the speaker is -40 dB), and a model trained
// on normal levels hears little in a quiet one.
const (
	normTarget  = 0.1    // RMS of the chunk's louder half of frames: -20 dBFS
	normMaxGain = 1000.0 // +60 dB at most: quieter than that is noise
	normPeak    = 0.99   // never past full scale
	normFrame   = 480    // 30 ms at 16 kHz
)

// ErrNonFinite is returned for samples that hold NaN or infinities: no
// gain can level them, and a recogniser hears nothing in them.
var ErrNonFinite = errors.New("audio has NaN or infinite samples")

// normOverflow is the peak past which a chunk is first brought to full
// scale: the float32 energy of a 30 ms frame overflows to infinity from
// peaks of about 1e18 (squares past 3.4e38), which made the gain 0.
const normOverflow = 1e6

// Normalize scales x in place so that its speech (the louder half of its
// 30 ms frames) has an RMS of -20 dBFS, without clipping and with at most
// +60 dB of gain; silence is left as it is. It returns the gain applied,
// or ErrNonFinite (x unchanged) when x holds NaN or infinities. Samples
// far beyond full scale (float recordings scaled by 1e30, say) are levelled
// like any other.
func Normalize(x []float32) (float64, error) {
	if len(x) == 0 {
		return 1, nil
	}
	frames, peak := frameEnergies(x)
	if math.IsNaN(peak) || math.IsInf(peak, 0) {
		return 1, ErrNonFinite
	}
	pre := 1.0
	if peak > normOverflow {
		pre = 1 / peak
		scale(x, float32(pre))
		frames, peak = frameEnergies(x)
	}
	slices.Sort(frames)
	loud := frames[len(frames)/2:]
	var sum float64
	for _, e := range loud {
		sum += e
	}
	rms := math.Sqrt(sum / float64(len(loud)))
	if rms < 1e-7 || peak == 0 {
		return pre, nil // digital silence
	}
	gain := min(normTarget/rms, normMaxGain, normPeak/peak)
	if math.Abs(gain-1) < 0.05 {
		return pre, nil
	}
	scale(x, float32(gain))
	return pre * gain, nil
}

// frameEnergies returns the mean energy of each 30 ms frame of x and the
// largest magnitude (NaN if any sample is NaN, else infinite if any is).
func frameEnergies(x []float32) ([]float64, float64) {
	frames := make([]float64, 0, len(x)/normFrame+1)
	var peakBits uint32
	for start := 0; start < len(x); start += normFrame {
		seg := x[start:min(start+normFrame, len(x))]
		e, m := energyMax(seg)
		peakBits = max(peakBits, m)
		frames = append(frames, float64(e)/float64(len(seg)))
	}
	return frames, float64(math.Float32frombits(peakBits))
}

// energyMaxGeneric is energyMax without vector instructions: four
// accumulators (the sum is the loop's critical path), and |v| compared
// as its bits: no branch per sample.
func energyMaxGeneric(x []float32) (float32, uint32) {
	var e0, e1, e2, e3 float32
	var m0, m1, m2, m3 uint32
	i := 0
	for ; i+4 <= len(x); i += 4 {
		v := x[i : i+4 : i+4]
		e0 += v[0] * v[0]
		e1 += v[1] * v[1]
		e2 += v[2] * v[2]
		e3 += v[3] * v[3]
		m0 = max(m0, math.Float32bits(v[0])&^(1<<31))
		m1 = max(m1, math.Float32bits(v[1])&^(1<<31))
		m2 = max(m2, math.Float32bits(v[2])&^(1<<31))
		m3 = max(m3, math.Float32bits(v[3])&^(1<<31))
	}
	for ; i < len(x); i++ {
		e0 += x[i] * x[i]
		m0 = max(m0, math.Float32bits(x[i])&^(1<<31))
	}
	return (e0 + e1) + (e2 + e3), max(m0, m1, m2, m3)
}

func scaleGeneric(x []float32, g float32) {
	for i := range x {
		x[i] *= g
	}
}
