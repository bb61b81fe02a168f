package worker

import (
	"math/bits"
	"sync"
)

// Buffers for the two large allocations of every job, the recording's
// bytes and its samples, reused across jobs: allocating and clearing
// hundreds of KB per job, and collecting them, was a fifth of the
// worker's CPU time. Buffers are kept by power-of-two capacity.
var (
	bytePools  [40]sync.Pool
	floatPools [40]sync.Pool
)

func sizeClass(n int) int { return bits.Len(uint(max(n, 1) - 1)) }

// getBytes returns a slice of length n, not zeroed.
func getBytes(n int) []byte {
	c := sizeClass(n)
	if p, ok := bytePools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<c)
}

// putBytes returns b for reuse; b must not be used afterwards.
func putBytes(b []byte) {
	if c := cap(b); c > 0 && c == 1<<sizeClass(c) {
		bytePools[sizeClass(c)].Put(&b)
	}
}

// getFloats returns an empty slice with capacity for at least n.
func getFloats(n int) []float32 {
	c := sizeClass(n)
	if p, ok := floatPools[c].Get().(*[]float32); ok {
		return (*p)[:0]
	}
	return make([]float32, 0, 1<<c)
}

// putFloats returns f for reuse; f must not be used afterwards.
func putFloats(f []float32) {
	if c := cap(f); c > 0 && c == 1<<sizeClass(c) {
		floatPools[sizeClass(c)].Put(&f)
	}
}
