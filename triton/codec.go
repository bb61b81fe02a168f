package triton

import (
	"fmt"
	"math/bits"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// codec is gRPC's protobuf codec with one difference: a large message
// (a chunk of audio is hundreds of KB) is marshalled into a buffer from a
// pool that is not cleared first. gRPC's default pool clears every buffer
// it hands out, a write of the whole message that the marshalling
// overwrites at once. gRPC returns the buffer to the pool once the message
// is written. Unmarshalling is the default codec's.
type codec struct{}

var protoCodec = encoding.GetCodecV2("proto")

func (codec) Name() string { return "proto" }

func (codec) Unmarshal(data mem.BufferSlice, v any) error { return protoCodec.Unmarshal(data, v) }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("proto: cannot marshal %T, not a proto.Message", v)
	}
	size := proto.Size(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return protoCodec.Marshal(v)
	}
	buf := unclearedPool.Get(size)
	// UseCachedSize: Size has just been computed, and the message is not
	// changed meanwhile.
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend((*buf)[:0], m)
	if err != nil {
		unclearedPool.Put(buf)
		return nil, err
	}
	*buf = out
	return mem.BufferSlice{mem.NewBuffer(buf, unclearedPool)}, nil
}

// unclearedPool hands out byte slices of at least the size asked for,
// from pools by power of two, with whatever they held before.
var unclearedPool = &sizedPools{}

type sizedPools struct {
	pools [40]sync.Pool
}

func (p *sizedPools) Get(size int) *[]byte {
	class := bits.Len(uint(size - 1)) // the smallest power of two >= size
	if class >= len(p.pools) {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.pools[class].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<class)
	return &b
}

func (p *sizedPools) Put(b *[]byte) {
	c := cap(*b)
	if c == 0 || c&(c-1) != 0 { // not one of ours (a power of two)
		return
	}
	if class := bits.Len(uint(c - 1)); class < len(p.pools) {
		p.pools[class].Put(b)
	}
}
