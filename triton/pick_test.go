package triton

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// pick spreads requests to the least loaded partition, and with a pack
// fills a partition that already holds diarization requests before it
// starts another's; never past a partition's limit or the pack, never to
// an ejected one, and a retry goes elsewhere as any request's does.
func TestPickPacksDiarizationRequests(t *testing.T) {
	type part struct {
		inflight, diarizing int
		ejected             bool
	}
	cases := []struct {
		name    string
		parts   []part
		tried   []int
		pack    int
		want    int // index; -1: none has room
		untried bool
	}{
		{name: "spread: the least loaded", parts: []part{{inflight: 6, diarizing: 3}, {inflight: 2}}, want: 1},
		{name: "packed: the partition already diarizing", parts: []part{{inflight: 6, diarizing: 3}, {inflight: 2}}, pack: 8, want: 0},
		{name: "packed: the fullest of those diarizing", parts: []part{{inflight: 4, diarizing: 2}, {inflight: 9, diarizing: 5}, {inflight: 1}}, pack: 8, want: 1},
		{name: "packed: a tie to the less loaded", parts: []part{{inflight: 9, diarizing: 5}, {inflight: 7, diarizing: 5}}, pack: 8, want: 1},
		{name: "packed: one at the pack starts another", parts: []part{{inflight: 9, diarizing: 8}, {inflight: 3}, {inflight: 2}}, pack: 8, want: 2},
		{name: "packed: none diarizing yet, the least loaded", parts: []part{{inflight: 3}, {inflight: 2}}, pack: 8, want: 1},
		{name: "packed: not past the partition's limit", parts: []part{{inflight: 16, diarizing: 3}, {inflight: 2}}, pack: 8, want: 1},
		{name: "packed: not to an ejected partition", parts: []part{{inflight: 6, diarizing: 3, ejected: true}, {inflight: 2}}, pack: 8, want: 1},
		{name: "a retry: an untried partition", parts: []part{{inflight: 6, diarizing: 3}, {inflight: 9}}, tried: []int{0}, untried: true, want: 1},
		{name: "every partition full", parts: []part{{inflight: 16, diarizing: 1}, {inflight: 16}}, pack: 8, want: -1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var parts []*partition
			for _, p := range c.parts {
				parts = append(parts, &partition{inflight: p.inflight, diarizing: p.diarizing, ejected: p.ejected, limit: 16})
			}
			tried := map[*partition]bool{}
			for _, i := range c.tried {
				tried[parts[i]] = true
			}
			got := pick(parts, tried, c.untried, c.pack)
			want := (*partition)(nil)
			if c.want >= 0 {
				want = parts[c.want]
			}
			if got != want {
				t.Errorf("picked %v, want partition %d", got, c.want)
			}
		})
	}
}

// Through the pool: requests held in flight one after another, a speech
// request first, then diarization requests. Spread, each goes to the less
// loaded partition; packed (3), the diarization requests fill the
// partition that has some until it holds 3, and the next opens the other.
// Every count is back to zero once they end.
func TestPoolPacksDiarizationRequests(t *testing.T) {
	for _, c := range []struct {
		pack int
		want []int // the partition of each request, in order
	}{
		{pack: 0, want: []int{0, 1, 0, 1, 0}},
		{pack: 3, want: []int{0, 1, 1, 1, 0}},
	} {
		p, err := NewPool(PoolConfig{Addrs: []string{"127.0.0.1:1", "127.0.0.1:2"}, MaxInflight: 8, RequestTimeout: time.Minute, Attempts: 1,
			HealthInterval: time.Second, EjectAfter: 1, MetricsAddrs: []string{"off"}, DiarizePack: c.pack}, DefaultModelIO(), prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		index := map[*Client]int{p.parts[0].client: 0, p.parts[1].client: 1}
		release := make(chan struct{})
		var wg sync.WaitGroup
		var got []int
		for i := range c.want {
			model := p.parts[0].client.io.DiarizeModel
			if i == 0 {
				model = "" // the speech model
			}
			at := make(chan int)
			wg.Go(func() {
				err := p.call(context.Background(), Request{Model: model}, false, func(_ context.Context, cl *Client) error {
					at <- index[cl]
					<-release
					return nil
				})
				if err != nil {
					t.Error(err)
				}
			})
			got = append(got, <-at) // held: the next request is acquired beside it
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("pack %d: partitions %v, want %v", c.pack, got, c.want)
		}
		close(release)
		wg.Wait()
		for i, part := range p.parts {
			if part.inflight != 0 || part.diarizing != 0 {
				t.Errorf("pack %d: partition %d holds %d requests, %d diarizing, after all ended", c.pack, i, part.inflight, part.diarizing)
			}
		}
		_ = p.Close()
	}
}
