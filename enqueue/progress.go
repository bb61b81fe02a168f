package enqueue

import (
	"io"
	"time"

	"github.com/rs/zerolog"
	"github.com/schollz/progressbar/v3"
)

// BarProgress draws a progress bar with rate and ETA on a terminal. Its
// total is the number of items listed so far, so the ETA settles once the
// listing has finished (listing runs far ahead of sending).
type BarProgress struct {
	bar *progressbar.ProgressBar
}

// NewBarProgress returns a bar that draws on w (a terminal).
func NewBarProgress(w io.Writer) *BarProgress {
	// A known length from the start (the items listed so far, updated as
	// listing goes on): with an unknown one the library runs a spinner
	// goroutine that reads the bar's state without its lock.
	return &BarProgress{bar: progressbar.NewOptions64(1,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("listing"),
		progressbar.OptionShowCount(),
		progressbar.OptionShowIts(),
		progressbar.OptionSetItsString("keys"),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionSetWidth(30),
	)}
}

// Update implements Progress.
func (b *BarProgress) Update(c *Counters, _ time.Duration) {
	if total := max(c.Listed.Load(), 1); b.bar.GetMax64() != total {
		b.bar.ChangeMax64(total)
	}
	if c.ListingDone.Load() {
		b.bar.Describe("sending")
	}
	_ = b.bar.Set64(c.Finished())
}

// Done implements Progress.
func (b *BarProgress) Done(c *Counters, elapsed time.Duration) {
	b.bar.ChangeMax64(max(c.Listed.Load(), c.Finished(), 1))
	b.Update(c, elapsed)
	_ = b.bar.Finish()
	_, _ = io.WriteString(b.bar, "")
}

// LogProgress writes one structured log line per update, for logs that
// are not a terminal.
type LogProgress struct {
	Log  zerolog.Logger
	last int64
	at   time.Duration
}

// Update implements Progress.
func (l *LogProgress) Update(c *Counters, elapsed time.Duration) {
	l.line(c, elapsed, "progress")
}

// Done implements Progress.
func (l *LogProgress) Done(c *Counters, elapsed time.Duration) {
	l.line(c, elapsed, "finished")
}

func (l *LogProgress) line(c *Counters, elapsed time.Duration, msg string) {
	fin := c.Finished()
	rate := 0.0
	if d := (elapsed - l.at).Seconds(); d > 0 {
		rate = float64(fin-l.last) / d
	}
	l.last, l.at = fin, elapsed
	ev := l.Log.Info().
		Int64("listed", c.Listed.Load()).Int64("filtered", c.Filtered.Load()).
		Int64("skipped_done", c.SkippedDone.Load()).Int64("sent_before", c.SentBefore.Load()).
		Int64("sent", c.Sent.Load()).Int64("failed", c.Failed.Load()).
		Float64("keys_per_s", float64(int(rate*10))/10).Bool("listing_done", c.ListingDone.Load()).
		Dur("elapsed", elapsed.Round(time.Second))
	if c.ListingDone.Load() && rate > 0 {
		left := c.Listed.Load() - fin
		ev = ev.Dur("eta", time.Duration(float64(left)/rate*float64(time.Second)).Round(time.Second))
	}
	ev.Msg(msg)
}
