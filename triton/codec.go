package triton

import (
	"fmt"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/fleetscribe/fleetscribe/internal/bufpool"
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

// unclearedPool is a bufpool (slices by power-of-two capacity, not
// cleared) as gRPC's BufferPool.
var unclearedPool = &grpcPool{}

type grpcPool struct{ p bufpool.Pool[byte] }

func (g *grpcPool) Get(size int) *[]byte {
	b := g.p.Get(size)
	return &b
}

func (g *grpcPool) Put(b *[]byte) { g.p.Put(*b) }
