package bufpool

import "testing"

// Get gives the length asked for at a power-of-two capacity; Put keeps
// only slices of such capacities.
func TestGetAndPut(t *testing.T) {
	var p Pool[float32]
	for _, n := range []int{0, 1, 7, 8, 9, 1000, 1 << 20, 1<<20 + 1} {
		s := p.Get(n)
		if len(s) != n || cap(s) < n || cap(s)&(cap(s)-1) != 0 {
			t.Fatalf("Get(%d): len %d cap %d", n, len(s), cap(s))
		}
		p.Put(s)
	}
	p.Put(make([]float32, 10, 12)) // dropped: not a power of two
	for range 100 {                // (sync.Pool may drop what it was given)
		if s := p.Get(10); cap(s) != 16 {
			t.Fatalf("Get(10) after Put of capacity 12: capacity %d, want 16", cap(s))
		}
	}
}
