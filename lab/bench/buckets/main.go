// Command buckets chooses the bucket lengths of bucket batching by
// measurement: it chunks a realistic mix of recording lengths (10 s to
// 20 min, log-uniform, speech-like bursts and pauses) with the worker's own
// splitter, then for each candidate set of buckets reports the padding
// overhead (audio computed that is only zeros), the batches Triton's
// batcher forms from a full queue when it groups identical shapes only, and
// the throughput those batches give under a cost model of a
// Parakeet-TDT-shaped model: a batch of B rows padded to L seconds takes
// L/45 * (t0 + t1*B), where the decode loop's per-step latency t0 and the
// per-row cost t1 come from that model's offline figures (7.5 clips/s of
// 45 s audio at batch 1, 360 at batch 128). It ends with a RESULT line.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/synth"
	"github.com/fleetscribe/fleetscribe/modelspec"
)

const rate = modelspec.SampleRate

func main() {
	recordings := flag.Int("recordings", 150, "recordings in the mix")
	chunkSeconds := flag.Float64("chunk-seconds", 30, "the worker's -chunk-seconds")
	queues := flag.String("queues", "8,16,64", "queue depths (chunks waiting when a batch is formed) to model: light to saturating load")
	maxBatch := flag.Int("max-batch", 32, "max_batch_size")
	seed := flag.Uint64("seed", 1, "random seed")
	flag.Parse()

	rng := rand.New(rand.NewPCG(*seed, 7))
	var lengths []int // chunk lengths in samples
	var total float64
	for range *recordings {
		sec := synth.RecordingSeconds(rng)
		total += sec
		x := synth.SpeechLike(rng, int(sec*rate), rate)
		for _, c := range audio.Split(x, audio.ChunkSplit(modelspec.SampleRate, *chunkSeconds, 0)) {
			lengths = append(lengths, len(c.Samples))
		}
	}
	fmt.Printf("%d recordings, %.1f h of audio, %d chunks (chunk-seconds %g)\n", *recordings, total/3600, len(lengths), *chunkSeconds)
	fmt.Printf("chunk length percentiles (s): p10 %.1f  p50 %.1f  p90 %.1f\n\n",
		pct(lengths, 0.1), pct(lengths, 0.5), pct(lengths, 0.9))

	max := *chunkSeconds
	candidates := [][]float64{
		{max},
		{max / 2, max},
		{max / 3, 2 * max / 3, max},
		{10, 20, 25, 30},
		{max / 6, max / 3, max / 2, 2 * max / 3, 5 * max / 6, max},
		{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30},
	}
	var depths []int
	for _, s := range strings.Split(*queues, ",") {
		var d int
		if _, err := fmt.Sscan(s, &d); err != nil || d < 1 {
			fmt.Fprintln(os.Stderr, "bad -queues")
			os.Exit(2)
		}
		depths = append(depths, d)
	}
	type row struct {
		name         string
		pad, batch   float64
		usefulPerRun float64 // modelled audio-seconds per GPU-second, averaged over the depths
	}
	var rows []row
	fmt.Printf("%-28s %8s", "buckets (s)", "padding")
	for _, d := range depths {
		fmt.Printf("  %14s", fmt.Sprintf("queue %d", d))
	}
	fmt.Println("   (mean batch / modelled audio-s per s)")
	line := func(name string, pad float64, buckets []int) row {
		r := row{name: name, pad: pad}
		if pad >= 0 {
			fmt.Printf("%-28s %7.1f%%", name, 100*pad)
		} else {
			fmt.Printf("%-28s %8s", name, "-")
		}
		for _, d := range depths {
			b, tput := simulate(rng, lengths, buckets, d, *maxBatch)
			fmt.Printf("  %5.1f / %6.0f", b, tput)
			r.batch += b / float64(len(depths))
			r.usefulPerRun += tput / float64(len(depths))
		}
		fmt.Println()
		return r
	}
	for _, c := range candidates {
		if c[len(c)-1] < max {
			continue
		}
		buckets := make([]int, len(c))
		for i, s := range c {
			buckets[i] = int(s * rate)
		}
		rows = append(rows, line(fmtSet(c), padding(lengths, buckets), buckets))
	}
	line("ragged (model pads)", -1, nil)
	line("unpadded, not ragged", -1, []int{})
	best := slices.MaxFunc(rows, func(a, b row) int {
		switch {
		case a.usefulPerRun < b.usefulPerRun:
			return -1
		case a.usefulPerRun > b.usefulPerRun:
			return 1
		}
		return 0
	})
	fmt.Printf("\nbest: %s (padding %.1f%%, mean batch %.2f)\n", best.name, 100*best.pad, best.batch)
	fmt.Printf("RESULT buckets=%s padding_pct=%.1f mean_batch=%.2f chunks=%d\n", strings.ReplaceAll(best.name, " ", ""), 100*best.pad, best.batch, len(lengths))
	if len(rows) == 0 {
		os.Exit(1)
	}
}

func bucketOf(n int, buckets []int) int {
	for _, b := range buckets {
		if n <= b {
			return b
		}
	}
	return buckets[len(buckets)-1]
}

func padding(lengths, buckets []int) float64 {
	var real, padded float64
	for _, n := range lengths {
		real += float64(n)
		padded += float64(bucketOf(n, buckets))
	}
	return padded/real - 1
}

// Cost model of one batch execution (see the package comment).
const (
	t0 = 0.131  // s per batch of 45 s audio: the latency-bound decode loop
	t1 = 0.0017 // s per row of 45 s audio
)

// simulate drains random full queues of chunks the way Triton's batcher
// does, and returns the mean batch size and the modelled throughput in
// audio-seconds per second. buckets nil means ragged batching (any lengths
// together, padded to the longest); an empty, non-nil slice means chunks at
// their own length without ragged batching (identical lengths only).
func simulate(rng *rand.Rand, lengths, buckets []int, queue, maxBatch int) (meanBatch, throughput float64) {
	type chunk struct{ real, shape int }
	var batches, rows int
	var audioSec, gpuSec float64
	for range 200 {
		q := make([]chunk, queue)
		for i := range q {
			n := lengths[rng.IntN(len(lengths))]
			shape := n
			switch {
			case buckets == nil:
				shape = 0 // ragged: every shape matches
			case len(buckets) > 0:
				shape = bucketOf(n, buckets)
			}
			q[i] = chunk{n, shape}
		}
		for len(q) > 0 {
			head := q[0]
			var rest []chunk
			n, longest := 0, 0
			for _, c := range q {
				if c.shape == head.shape && n < maxBatch {
					n++
					audioSec += float64(c.real) / rate
					longest = max(longest, max(c.real, c.shape))
				} else {
					rest = append(rest, c)
				}
			}
			batches++
			rows += n
			gpuSec += float64(longest) / rate / 45 * (t0 + t1*float64(n))
			q = rest
		}
	}
	return float64(rows) / float64(batches), audioSec / gpuSec
}

func pct(lengths []int, p float64) float64 {
	s := slices.Clone(lengths)
	slices.Sort(s)
	return float64(s[int(p*float64(len(s)-1))]) / rate
}

func fmtSet(c []float64) string {
	var parts []string
	for _, s := range c {
		parts = append(parts, fmt.Sprintf("%g", math.Round(s*10)/10))
	}
	return strings.Join(parts, ",")
}
