package triton

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"
	"unsafe"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/internal/shm"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// Triton's system shared memory: where the server runs on the client's
// host and shares its /dev/shm (compose runs the worker and every
// partition in the host's IPC namespace), a chunk's samples are written
// once into a shared memory region the server has mapped, and the request
// carries only where they are. The hundreds of KB of a chunk then cross no socket: no
// marshalling copy, no HTTP/2 framing copy, no kernel copy on either
// side. Requests for which no slot is free, and every request while the
// server has not (or no longer) registered the region, go in the request
// as before, so a server on another host or in its own IPC namespace
// still serves; it just costs more.

// Parameter names of Triton's shared memory inputs.
const (
	paramShmRegion = "shared_memory_region"
	paramShmOffset = "shared_memory_offset"
	paramShmSize   = "shared_memory_byte_size"
)

// shmRetry is how long a client waits after a failed registration before
// it tries again; it doubles with each failure in a row, up to shmRetryMax
// (a partition that cannot map the region, such as one in its own IPC
// namespace, is asked a few times an hour, and warned about as often).
const (
	shmRetry    = 30 * time.Second
	shmRetryMax = 16 * time.Minute
)

// sharedMemory is one client's region: slots of one chunk each.
type sharedMemory struct {
	name      string // the region's name in requests (also its key)
	slotBytes int
	m         *shm.Mapping

	mu     sync.Mutex
	free   []int // slot indices; last in, first out, so few slots' pages are touched
	slots  int   // all of them: slots-len(free) are in use
	closed bool

	reg        sync.Mutex  // held while registering
	registered bool        // under mu
	retryAt    time.Time   // under mu: no registration before it
	lastErr    error       // under mu: why the last registration failed
	failures   int         // under mu: registrations failed in a row
	onErr      func(error) // if set, hears each failed registration or unregistration
	swept      bool        // under reg: the server's stale regions were let go
}

// sharedMemoryMinAge spares a region created a moment ago, before its
// creator locked it, from SweepSharedMemory.
const sharedMemoryMinAge = 10 * time.Second

// SweepSharedMemory removes the regions of /dev/shm that workers killed
// before they could remove them left behind (a live worker's region holds
// its lock; see shm.Sweep): where /dev/shm is the host's (compose's
// ipc: host), each held its memory until the host rebooted. A pool that
// uses shared memory sweeps when it starts; each partition then lets go of
// the swept regions it had mapped once the pool's own region is
// registered there. It returns the regions removed.
func SweepSharedMemory() ([]string, error) {
	return shm.Sweep("fleetscribe-", sharedMemoryMinAge)
}

// unregisterStale asks the server to let go of every worker region it
// holds whose object is gone from /dev/shm (swept, or removed by a worker
// that could not unregister it): the server's mapping is all that keeps
// its pages. Regions of live workers, whose objects exist, stay.
func (s *sharedMemory) unregisterStale(ctx context.Context, c *Client) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := c.rpc.SystemSharedMemoryStatus(sctx, &pb.SystemSharedMemoryStatusRequest{})
	if err != nil {
		return
	}
	for name, r := range st.GetRegions() {
		if !strings.HasPrefix(name, "fleetscribe-") || name == s.name {
			continue
		}
		if !shm.Gone(r.GetKey()) {
			continue
		}
		if err := UnregisterSharedMemory(sctx, c.rpc, name); err != nil && s.onErr != nil {
			s.onErr(fmt.Errorf("let go of shared memory region %s, left by a worker that is gone, on %s: %w", name, c.addr, err))
		}
	}
}

// SharedMemoryPrefix begins the name of every shared memory region a
// process pid creates (its object in /dev/shm has the same name): a region
// left by a process that was killed names it.
func SharedMemoryPrefix(pid int) string { return fmt.Sprintf("fleetscribe-%d-", pid) }

// SharedMemoryState says whether a client sends audio through shared
// memory and, when it does not, why.
type SharedMemoryState struct {
	Enabled    bool   // the client has a region
	Registered bool   // the server has mapped it: requests use it
	Region     string // its name
	Err        error  // the last registration's error, if it failed
}

// SharedMemoryBytes is the size of a region of slots slots of maxSamples
// samples each, as UseSharedMemory makes it.
func SharedMemoryBytes(slots, maxSamples int) int64 {
	return int64(slots) * int64(slotSize(maxSamples))
}

// slotSize is a slot's size for maxSamples samples: slots start on cache
// lines.
func slotSize(maxSamples int) int { return (4*maxSamples + 63) &^ 63 }

// UseSharedMemory gives the client a shared memory region of slots slots
// of maxSamples samples each (a chunk of the longest length it sends),
// registered with the server on the first request. It fails where the
// system has no POSIX shared memory; the client then sends audio in the
// request.
func (c *Client) UseSharedMemory(slots, maxSamples int) error {
	if slots < 1 || maxSamples < 1 {
		return fmt.Errorf("shared memory: %d slots of %d samples", slots, maxSamples)
	}
	if c.shm != nil {
		return fmt.Errorf("shared memory: %s already has region %s", c.addr, c.shm.name)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	name := SharedMemoryPrefix(os.Getpid()) + hex.EncodeToString(id[:])
	slotBytes := slotSize(maxSamples)
	m, err := shm.Create("/"+name, slots*slotBytes)
	if err != nil {
		return err
	}
	s := &sharedMemory{name: name, slotBytes: slotBytes, m: m, free: make([]int, slots), slots: slots}
	for i := range s.free {
		s.free[i] = slots - 1 - i
	}
	c.shm = s
	return nil
}

// SharedMemory reports the client's shared memory state.
func (c *Client) SharedMemory() SharedMemoryState {
	s := c.shm
	if s == nil {
		return SharedMemoryState{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return SharedMemoryState{Enabled: true, Registered: s.registered, Region: s.name, Err: s.lastErr}
}

// acquire returns a free slot for n samples, registering the region with
// the server first if it is not. ok is false when the request must go
// without shared memory: no region, none registered, no slot free, or
// n too large.
func (s *sharedMemory) acquire(ctx context.Context, c *Client, n int) (slot int, ok bool) {
	if s == nil || 4*n > s.slotBytes {
		return 0, false
	}
	s.mu.Lock()
	if !s.registered {
		due := !time.Now().Before(s.retryAt)
		s.mu.Unlock()
		if !due || !s.register(ctx, c) {
			return 0, false
		}
		s.mu.Lock()
	}
	defer s.mu.Unlock()
	if s.closed || len(s.free) == 0 {
		return 0, false
	}
	slot = s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	return slot, true
}

// release gives a slot back, once the server has answered the request
// that used it (or the request has been given up: the server may still
// read the slot then, but its answer goes nowhere).
func (s *sharedMemory) release(slot int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = append(s.free, slot)
	if s.closed && len(s.free) == s.slots {
		_ = s.m.Close()
	}
}

// samples is the slot's memory as float32 (the mapping is page aligned,
// and slots start on 64-byte boundaries).
func (s *sharedMemory) samples(slot, n int) []float32 {
	b := s.m.Data[slot*s.slotBytes : slot*s.slotBytes+4*n]
	return unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
}

// register asks the server to map the region. Only one caller registers
// at a time; the others send without shared memory meanwhile.
func (s *sharedMemory) register(ctx context.Context, c *Client) bool {
	if !s.reg.TryLock() {
		return false
	}
	defer s.reg.Unlock()
	s.mu.Lock()
	if s.registered || s.closed {
		defer s.mu.Unlock()
		return s.registered
	}
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err := c.rpc.SystemSharedMemoryRegister(rctx, &pb.SystemSharedMemoryRegisterRequest{
		Name: s.name, Key: s.m.Key, ByteSize: uint64(len(s.m.Data)),
	})
	if status.Code(err) == codes.AlreadyExists {
		err = nil // a registration of ours whose answer was lost
	}
	if err != nil && ctx.Err() != nil {
		return false // the request was given up, not the server's doing
	}
	s.mu.Lock()
	if err == nil {
		s.registered, s.lastErr, s.failures = true, nil, 0
		s.mu.Unlock()
		if !s.swept {
			// The server maps this host's /dev/shm (it mapped ours): the
			// regions a killed worker left registered there are its
			// pages, held until the server lets go of them.
			s.swept = true
			s.unregisterStale(ctx, c)
		}
		return true
	}
	s.lastErr = fmt.Errorf("register shared memory region %s with %s: %w", s.name, c.addr, err)
	s.retryAt = time.Now().Add(min(shmRetry<<min(s.failures, 10), shmRetryMax))
	s.failures++
	err = s.lastErr
	s.mu.Unlock()
	if s.onErr != nil {
		s.onErr(err)
	}
	return false
}

// viaSharedMemory sends a request with samples in a free slot of the
// client's region: build makes the request with the audio as its first
// input, without contents (inShm places it), and call sends it, returning
// the server's refusal of an unknown region as it is. sent is false where
// the caller must send the audio in the request: no region, none
// registered, no slot free, or the server had lost the region (it
// restarted), which is then registered again for the next request.
func viaSharedMemory[T any](ctx context.Context, c *Client, samples []float32, build func() *pb.ModelInferRequest,
	call func(*pb.ModelInferRequest) (T, error)) (res T, sent bool, err error) {
	slot, ok := c.shm.acquire(ctx, c, len(samples))
	if !ok {
		return res, false, nil
	}
	req := build()
	c.shm.inShm(req, slot, samples)
	res, err = call(req)
	c.shm.release(slot)
	if !unknownRegion(err) {
		return res, true, err
	}
	c.shm.forget()
	var zero T
	return zero, false, nil
}

// forget marks the region unregistered after the server said it does not
// know it (it restarted): the next request registers it again.
func (s *sharedMemory) forget() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registered = false
	s.retryAt = time.Time{}
}

// unknownRegion reports a server's answer that it has no such region:
// Triton's "Unable to find shared memory region" (NOT_FOUND), as after a
// restart.
func unknownRegion(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.NotFound && strings.Contains(st.Message(), "shared memory region")
}

// shmUnregisterWait bounds how long Close waits for a partition to let go
// of the region; shmUnregisterRetry is the first pause between asks (it
// doubles, up to shmUnregisterRetryMax).
const (
	shmUnregisterWait     = 2 * time.Second
	shmUnregisterRetry    = 10 * time.Millisecond
	shmUnregisterRetryMax = 200 * time.Millisecond
)

// regionInUse reports Triton's refusal to unregister a region that a
// request still holds (INTERNAL, "it is currently in use"): the server lets
// go of the region when it releases the request, which may be a moment
// after the client has its response.
func regionInUse(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.Internal && strings.Contains(st.Message(), "currently in use")
}

// UnregisterSharedMemory asks a server to forget the named system shared
// memory region, and asks again while a request still holds it, until ctx
// ends. The error is the last answer's.
func UnregisterSharedMemory(ctx context.Context, rpc pb.GRPCInferenceServiceClient, name string) error {
	pause := shmUnregisterRetry
	for {
		_, err := rpc.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{Name: name})
		if !regionInUse(err) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, shmUnregisterRetryMax)
	}
}

// close unregisters the region (best effort) and unmaps and removes it
// once no request uses it.
func (s *sharedMemory) close(c *Client) {
	s.mu.Lock()
	registered := s.registered
	s.closed, s.registered = true, false
	idle := len(s.free) == s.slots
	s.mu.Unlock()
	if registered {
		ctx, cancel := context.WithTimeout(context.Background(), shmUnregisterWait)
		err := UnregisterSharedMemory(ctx, c.rpc, s.name)
		cancel()
		if err != nil && s.onErr != nil {
			s.onErr(fmt.Errorf("unregister shared memory region %s with %s (the partition keeps it mapped until it restarts): %w", s.name, c.addr, err))
		}
	}
	if idle {
		_ = s.m.Close()
	}
}

// inShm puts the request's audio (its first input, built without raw
// contents) in slot: the samples and the bucket's zero padding are
// written there, and the input says where they are.
func (s *sharedMemory) inShm(req *pb.ModelInferRequest, slot int, samples []float32) {
	in := req.Inputs[0]
	padded := int(in.Shape[len(in.Shape)-1])
	dst := s.samples(slot, padded)
	clear(dst[copy(dst, samples):])
	in.Parameters = map[string]*pb.InferParameter{
		paramShmRegion: {ParameterChoice: &pb.InferParameter_StringParam{StringParam: s.name}},
		paramShmOffset: {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(slot * s.slotBytes)}},
		paramShmSize:   {ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: int64(4 * padded)}},
	}
}
