package audio

// Sample rates outside this range are refused as corrupt in every format.
const (
	minRate = 1000
	maxRate = 768000
)

// maxDecodedFrames bounds what one recording may decode to (24 hours at
// 48 kHz): a decompression bomb is refused, not decoded until memory runs
// out. The worker's duration limit is far below it.
const maxDecodedFrames = 24 * 3600 * 48000

func checkRate(format string, rate int) error {
	if rate < minRate || rate > maxRate {
		return corrupt(format, "sample rate %d Hz", rate)
	}
	return nil
}
