package triton

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// The codec writes exactly what proto.Marshal writes, large messages
// included, into buffers that go back to its pool and come out again
// holding old bytes: a smaller message in a reused buffer is still exact.
func TestCodecMarshalsExactlyIntoReusedBuffers(t *testing.T) {
	req := func(n int, fill byte) *pb.ModelInferRequest {
		return &pb.ModelInferRequest{ModelName: "asr", Id: "x", RawInputContents: [][]byte{bytes.Repeat([]byte{fill}, n)}}
	}
	for _, m := range []*pb.ModelInferRequest{req(10, 1), req(300_000, 2), req(270_000, 3), req(300_000, 4)} {
		data, err := codec{}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := proto.Marshal(m)
		if got := data.Materialize(); !bytes.Equal(got, want) {
			t.Fatalf("%d raw bytes: marshalled %d bytes unlike proto.Marshal's %d", len(m.RawInputContents[0]), len(got), len(want))
		}
		var back pb.ModelInferRequest
		if err := (codec{}).Unmarshal(data, &back); err != nil || !proto.Equal(&back, m) {
			t.Fatalf("round trip: %v", err)
		}
		data.Free() // back to the pool, as gRPC does once it is written
	}
	if _, err := (codec{}).Marshal("not a message"); err == nil {
		t.Error("marshalled a string")
	}
}
