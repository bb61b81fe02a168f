package worker

import (
	"context"
	"encoding/binary"
	"runtime"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/contract"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
)

func pcmWAV(rate, channels, bits, frames int) []byte {
	n := frames * channels * bits / 8
	b := make([]byte, 44+n)
	copy(b, "RIFF")
	binary.LittleEndian.PutUint32(b[4:], uint32(36+n))
	copy(b[8:], "WAVEfmt ")
	binary.LittleEndian.PutUint32(b[16:], 16)
	binary.LittleEndian.PutUint16(b[20:], 1)
	binary.LittleEndian.PutUint16(b[22:], uint16(channels))
	binary.LittleEndian.PutUint32(b[24:], uint32(rate))
	binary.LittleEndian.PutUint32(b[28:], uint32(rate*channels*bits/8))
	binary.LittleEndian.PutUint16(b[32:], uint16(channels*bits/8))
	binary.LittleEndian.PutUint16(b[34:], uint16(bits))
	copy(b[36:], "data")
	binary.LittleEndian.PutUint32(b[40:], uint32(n))
	return b
}

// The admission estimate bounds what decoding and resampling really
// allocate, for the shapes that grow most (low rates) and least.
func TestEstimateBoundsDecodeAndResample(t *testing.T) {
	w := &Worker{cfg: Config{Audio: AudioConfig{ChunkParallelism: 8, ChunkSeconds: 30}}}
	for _, c := range []struct{ rate, channels, bits, frames int }{
		{1000, 1, 8, 2_000_000}, {8000, 1, 8, 1_000_000}, {8000, 1, 16, 800_000},
		{44100, 2, 16, 1_000_000}, {48000, 6, 24, 200_000}, {16000, 1, 16, 1_000_000},
	} {
		f := pcmWAV(c.rate, c.channels, c.bits, c.frames)
		info, err := audio.Probe(f[:64], int64(len(f)))
		if err != nil {
			t.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		clip, err := audio.Decode(f)
		if err != nil {
			t.Fatal(err)
		}
		out := audio.Resample(clip.Samples, clip.Rate, modelRate)
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(out)
		allocated := int64(after.TotalAlloc - before.TotalAlloc)
		est := w.estimateMemory(int64(len(f)), info, false)
		if allocated+int64(len(f)) > est {
			t.Errorf("%+v: object %d + allocated %d > estimate %d", c, len(f), allocated, est)
		}
		if est > 3*(allocated+int64(len(f)))+jobOverheadBytes+8*30*modelRate*8 {
			t.Errorf("%+v: estimate %d is far above the %d really used", c, est, allocated+int64(len(f)))
		}
	}
}

// A recording that streams is estimated at its chunks in flight and
// buffers, whatever its length: a 4-hour WAV costs what a 20-minute one
// does.
func TestEstimateOfAStreamDoesNotGrowWithTheRecording(t *testing.T) {
	w := &Worker{cfg: Config{Audio: AudioConfig{ChunkParallelism: 32, ChunkSeconds: 30}}}
	short := w.estimateMemory(50<<20, audio.Info{Format: "wav", Rate: 44100, Channels: 2, Frames: 20 * 60 * 44100}, true)
	long := w.estimateMemory(2540<<20, audio.Info{Format: "wav", Rate: 44100, Channels: 2, Frames: 4 * 3600 * 44100}, true)
	whole := w.estimateMemory(2540<<20, audio.Info{Format: "wav", Rate: 44100, Channels: 2, Frames: 4 * 3600 * 44100}, false)
	if short != long || long > 200<<20 || whole < 10*long {
		t.Errorf("streaming estimates: 20 min %d, 4 h %d (whole: %d)", short, long, whole)
	}
}

// Jobs wait for room in the budget; one that alone exceeds it is refused.
func TestMemoryGate(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newMemoryGate(100, newMetrics(prometheus.NewRegistry()))
		if _, err := g.acquire(t.Context(), 101); ErrorClass(err) != contract.ClassTooLarge {
			t.Fatalf("over budget: %v", err)
		}
		release, err := g.acquire(t.Context(), 60)
		if err != nil {
			t.Fatal(err)
		}
		got := make(chan func(), 1)
		go func() {
			r, err := g.acquire(t.Context(), 60)
			if err != nil {
				t.Error(err)
			}
			got <- r
		}()
		synctest.Wait() // the second acquire is blocked in the gate, or done
		select {
		case <-got:
			t.Fatal("second job admitted while the first holds 60 of 100")
		default:
		}
		release()
		(<-got)()
		ctx, cancel := context.WithCancel(t.Context())
		hold, _ := g.acquire(t.Context(), 100)
		cancel()
		if _, err := g.acquire(ctx, 1); err == nil {
			t.Error("acquire ignored a cancelled context")
		}
		hold()
	})
}

// acquireAsync starts an acquire and returns a channel with its grant.
func acquireAsync(ctx context.Context, g *slotGate, rank, want int) <-chan int {
	ch := make(chan int, 1)
	go func() {
		n, _ := g.acquire(ctx, rank, want)
		ch <- n
	}()
	return ch
}

// waitWaiting waits (under synctest) until every goroutine is blocked, and
// checks that one of them is rank's receiver, waiting in the gate.
func waitWaiting(t *testing.T, g *slotGate, rank int) {
	t.Helper()
	synctest.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.waiting[rank] == 0 {
		t.Fatalf("no receiver of rank %d waiting in the gate", rank)
	}
}

// Strict priority with a guaranteed minimum: a freed slot goes to the
// waiting higher queue, unless the lower one is below its share.
func TestSlotGatePriorityAndMinShare(t *testing.T) {
	synctest.Test(t, testSlotGate)
}

func testSlotGate(t *testing.T) {
	ctx := t.Context()
	g := newSlotGate(4, 2, 1, newMetrics(prometheus.NewRegistry()))
	// Bulk alone takes everything.
	if n, _ := g.acquire(ctx, 1, 10); n != 4 {
		t.Fatalf("bulk got %d of 4 free slots", n)
	}
	live := acquireAsync(ctx, g, 0, 10)
	waitWaiting(t, g, 0)
	bulk := acquireAsync(ctx, g, 1, 10)
	waitWaiting(t, g, 1)
	g.release(1, 1) // a bulk job ends: live is waiting, so live gets it
	if n := <-live; n != 1 {
		t.Fatalf("live got %d", n)
	}
	select {
	case n := <-bulk:
		t.Fatalf("bulk got %d while live waits ahead of it", n)
	default:
	}
	live = acquireAsync(ctx, g, 0, 10)
	waitWaiting(t, g, 0)
	g.release(1, 3) // bulk down to 0 held, below its share of 1: it is owed one
	if n := <-bulk; n != 1 {
		t.Fatalf("bulk got %d, want its guaranteed 1", n)
	}
	if n := <-live; n != 2 {
		t.Fatalf("live got %d, want the other 2", n)
	}
	if g.inUse() != 4 {
		t.Errorf("%d in use", g.inUse())
	}
	// A cancelled acquire takes nothing.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if n, err := g.acquire(cctx, 0, 1); n != 0 || err == nil {
		t.Errorf("cancelled acquire: %d, %v", n, err)
	}
}

// Receivers of two queues waiting on a full gate (a saturated worker with
// a live and a bulk queue, its usual state) sleep until a slot is given
// back: nothing wakes them while nothing changes. They used to wake each
// other forever, burning more than a core. Real time, not synctest: a
// spinning goroutine never lets a synctest bubble's clock move.
func TestSlotGateWaitersSleep(t *testing.T) {
	g := newSlotGate(4, 2, 1, newMetrics(prometheus.NewRegistry()))
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	if n, _ := g.acquire(ctx, 1, 4); n != 4 {
		t.Fatalf("bulk took %d of 4", n)
	}
	live, bulk := acquireAsync(ctx, g, 0, 10), acquireAsync(ctx, g, 1, 10)
	testwait.For(t, "both receivers waiting", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.waiting[0] == 1 && g.waiting[1] == 1
	})
	generation := func() chan struct{} {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.changed
	}
	before := generation()
	time.Sleep(20 * time.Millisecond)
	if generation() != before {
		t.Fatal("the gate signalled while nothing changed: its waiters wake each other")
	}
	g.release(1, 1)
	if n := <-live; n != 1 {
		t.Fatalf("live got %d", n)
	}
	cancel()
	<-bulk
}

// Memory the process holds for good (its shared memory regions) comes off
// the jobs' budget.
func TestMemoryBudgetBesideReserved(t *testing.T) {
	if MemoryLimit() == 0 {
		t.Skip("no memory limit known here")
	}
	whole, reserved := DefaultMemoryBudget(), MemoryLimit()/2
	if got, want := MemoryBudgetBeside(reserved), (MemoryLimit()-reserved)/10*6; got != want || got >= whole {
		t.Errorf("budget beside %d reserved: %d, want %d (below the whole %d)", reserved, got, want, whole)
	}
	if got := MemoryBudgetBeside(2 * MemoryLimit()); got != 0 {
		t.Errorf("budget beside more than the limit: %d, want 0", got)
	}
}
