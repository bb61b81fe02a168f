package worker

import "github.com/fleetscribe/fleetscribe/internal/bufpool"

// Buffers for the two large allocations of every job, the recording's
// bytes and its samples, reused across jobs: allocating and clearing
// hundreds of KB per job, and collecting them, was a fifth of the
// worker's CPU time.
var (
	bytePool  bufpool.Pool[byte]
	floatPool bufpool.Pool[float32]
)

// getBytes returns a slice of length n, not zeroed.
func getBytes(n int) []byte { return bytePool.Get(n) }

// putBytes returns b for reuse; b must not be used afterwards.
func putBytes(b []byte) { bytePool.Put(b) }

// getFloats returns an empty slice with capacity for at least n.
func getFloats(n int) []float32 { return floatPool.Get(n)[:0] }

// putFloats returns f for reuse; f must not be used afterwards.
func putFloats(f []float32) { floatPool.Put(f) }
