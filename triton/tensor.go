package triton

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"unsafe"
)

// Datatypes used by the speech model's tensors (KServe v2 names).
const (
	TypeFP32  = "FP32"
	TypeBool  = "BOOL"
	TypeBytes = "BYTES"
	TypeInt32 = "INT32"
)

// ErrTensor reports a tensor whose raw contents do not match its datatype or shape.
var ErrTensor = errors.New("malformed tensor")

// EncodeFP32 returns samples as little-endian IEEE-754 float32 raw contents.
func EncodeFP32(samples []float32) []byte {
	out := make([]byte, 4*len(samples))
	encodeFP32Into(out, samples)
	return out
}

// nativeLittleEndian: float32 in memory is the KServe wire layout (little
// endian) on this machine, as on x86-64 and arm64.
var nativeLittleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func encodeFP32Into(out []byte, samples []float32) {
	for i, s := range samples {
		binary.LittleEndian.PutUint32(out[4*i:], math.Float32bits(s))
	}
}

// DecodeFP32 parses little-endian float32 raw contents.
func DecodeFP32(raw []byte) ([]float32, error) {
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("%w: FP32 contents of %d bytes is not a multiple of 4", ErrTensor, len(raw))
	}
	out := make([]float32, len(raw)/4)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// EncodeBool returns one byte per element, 1 for true.
func EncodeBool(vals ...bool) []byte {
	out := make([]byte, len(vals))
	for i, v := range vals {
		if v {
			out[i] = 1
		}
	}
	return out
}

// EncodeInt32 returns little-endian int32 raw contents.
func EncodeInt32(vals ...int32) []byte {
	out := make([]byte, 4*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint32(out[4*i:], uint32(v))
	}
	return out
}

// DecodeInt32 parses little-endian int32 raw contents.
func DecodeInt32(raw []byte) ([]int32, error) {
	if len(raw)%4 != 0 {
		return nil, fmt.Errorf("%w: INT32 contents of %d bytes is not a multiple of 4", ErrTensor, len(raw))
	}
	out := make([]int32, len(raw)/4)
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return out, nil
}

// EncodeBytes serialises BYTES elements: each is a 4-byte little-endian
// length followed by that many bytes.
func EncodeBytes(elems ...[]byte) []byte {
	n := 0
	for _, e := range elems {
		n += 4 + len(e)
	}
	out := make([]byte, 0, n)
	for _, e := range elems {
		out = binary.LittleEndian.AppendUint32(out, uint32(len(e)))
		out = append(out, e...)
	}
	return out
}

// DecodeBytes splits BYTES raw contents into its elements. The elements
// alias raw.
func DecodeBytes(raw []byte) ([][]byte, error) {
	var out [][]byte
	for off := 0; off < len(raw); {
		if len(raw)-off < 4 {
			return nil, fmt.Errorf("%w: BYTES element header truncated at offset %d", ErrTensor, off)
		}
		n := int(binary.LittleEndian.Uint32(raw[off:]))
		off += 4
		if n > len(raw)-off {
			return nil, fmt.Errorf("%w: BYTES element of %d bytes overruns contents at offset %d", ErrTensor, n, off)
		}
		out = append(out, raw[off:off+n])
		off += n
	}
	return out, nil
}
