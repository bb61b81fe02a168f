// Package bufpool keeps large slices for reuse, by power-of-two capacity:
// allocating, clearing and collecting hundreds of KB per job is a
// noticeable share of a worker's CPU time.
package bufpool

import (
	"math/bits"
	"sync"
)

// Pool keeps slices of T by power-of-two capacity. The zero Pool is ready
// to use.
type Pool[T any] struct {
	classes [40]sync.Pool
}

func sizeClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// Get returns a slice of length n and capacity the power of two at or
// above n, holding whatever it held before (not cleared).
func (p *Pool[T]) Get(n int) []T {
	c := sizeClass(n)
	if c >= len(p.classes) {
		return make([]T, n)
	}
	if s, ok := p.classes[c].Get().(*[]T); ok {
		return (*s)[:n]
	}
	return make([]T, n, 1<<c)
}

// Put keeps s for a later Get; s must not be used afterwards. A slice
// whose capacity is not a power of two (not one of the pool's) is dropped.
func (p *Pool[T]) Put(s []T) {
	c := cap(s)
	if c == 0 || c != 1<<sizeClass(c) || sizeClass(c) >= len(p.classes) {
		return
	}
	p.classes[sizeClass(c)].Put(&s)
}
