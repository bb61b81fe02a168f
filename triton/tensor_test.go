package triton

import (
	"bytes"
	"errors"
	"testing"
)

func TestBytesRoundTrip(t *testing.T) {
	elems := [][]byte{[]byte("hello"), {}, []byte(`{"word":"x"}`)}
	raw := EncodeBytes(elems...)
	if want := 4 + 5 + 4 + 4 + 12; len(raw) != want {
		t.Fatalf("encoded %d bytes, want %d", len(raw), want)
	}
	if raw[0] != 5 || raw[1] != 0 {
		t.Fatalf("length prefix is not little-endian: % x", raw[:4])
	}
	got, err := DecodeBytes(raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !bytes.Equal(got[0], elems[0]) || len(got[1]) != 0 || !bytes.Equal(got[2], elems[2]) {
		t.Fatalf("round trip: %q", got)
	}
}

func TestDecodeBytesMalformed(t *testing.T) {
	for _, raw := range [][]byte{{1, 0}, {9, 0, 0, 0, 'a'}, {0xff, 0xff, 0xff, 0xff}} {
		if _, err := DecodeBytes(raw); !errors.Is(err, ErrTensor) {
			t.Errorf("DecodeBytes(% x) = %v, want ErrTensor", raw, err)
		}
	}
}

func TestFP32RoundTrip(t *testing.T) {
	in := []float32{0, 1, -1, 0.5, 3.25e-5}
	out, err := DecodeFP32(EncodeFP32(in))
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		if in[i] != out[i] {
			t.Fatalf("sample %d: %v != %v", i, in[i], out[i])
		}
	}
	if _, err := DecodeFP32([]byte{1, 2, 3}); !errors.Is(err, ErrTensor) {
		t.Errorf("want ErrTensor for 3 bytes, got %v", err)
	}
}

func FuzzDecodeBytes(f *testing.F) {
	f.Add(EncodeBytes([]byte("a"), []byte("bc")))
	f.Add([]byte{0xff, 0xff, 0xff, 0x7f})
	f.Fuzz(func(t *testing.T, raw []byte) {
		elems, err := DecodeBytes(raw)
		if err != nil {
			return
		}
		if !bytes.Equal(EncodeBytes(elems...), raw) {
			t.Fatalf("re-encoding %d elements does not reproduce the input", len(elems))
		}
	})
}
