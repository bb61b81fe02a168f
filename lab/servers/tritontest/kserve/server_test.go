package kserve_test

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

func echo() *kserve.Server {
	return kserve.New(triton.DefaultModelIO(), kserve.RecognizerFunc(func(_ context.Context, s []float32, ts bool) (triton.Result, error) {
		r := triton.Result{Text: "one two three"}
		if ts {
			r.Words = []triton.Word{{Word: "one", Start: 0, End: 0.1}}
		}
		return r, nil
	}), "test")
}

func TestInvalidRequestsAreInvalidArgument(t *testing.T) {
	io := triton.DefaultModelIO()
	good := func() *pb.ModelInferRequest {
		return io.NewRequest(triton.Request{Samples: make([]float32, 4), Timestamps: true})
	}
	cases := map[string]func(r *pb.ModelInferRequest){
		"shape disagrees with contents": func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{1, 5} },
		"batch of two":                  func(r *pb.ModelInferRequest) { r.Inputs[0].Shape = []int64{2, 2} },
		"wrong datatype":                func(r *pb.ModelInferRequest) { r.Inputs[0].Datatype = "INT16" },
		"ragged raw contents":           func(r *pb.ModelInferRequest) { r.RawInputContents[0] = r.RawInputContents[0][:7] },
		"missing audio":                 func(r *pb.ModelInferRequest) { r.Inputs, r.RawInputContents = r.Inputs[1:], r.RawInputContents[1:] },
		"unknown input":                 func(r *pb.ModelInferRequest) { r.Inputs[1].Name = "speed" },
		"unknown output":                func(r *pb.ModelInferRequest) { r.Outputs[0].Name = "logits" },
		"raw count mismatch":            func(r *pb.ModelInferRequest) { r.RawInputContents = r.RawInputContents[:1] },
	}
	for name, mutate := range cases {
		r := good()
		mutate(r)
		_, err := echo().ModelInfer(context.Background(), r)
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("%s: got %v, want InvalidArgument", name, err)
		}
	}
	r := good()
	r.ModelName = "other"
	if _, err := echo().ModelInfer(context.Background(), r); status.Code(err) != codes.NotFound {
		t.Errorf("unknown model: %v", err)
	}
	resp, err := echo().ModelInfer(context.Background(), good())
	if err != nil {
		t.Fatal(err)
	}
	res, err := io.ParseResponse(resp)
	if err != nil || res.Text != "one two three" || len(res.Words) != 1 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestNumWordsWithoutTimestamps(t *testing.T) {
	io := triton.DefaultModelIO()
	resp, err := echo().ModelInfer(context.Background(), io.NewRequest(triton.Request{Samples: make([]float32, 4)}))
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range resp.GetOutputs() {
		if o.GetName() == io.NumWordsOutput {
			n, err := triton.DecodeInt32(resp.GetRawOutputContents()[i])
			if err != nil || len(n) != 1 || n[0] != 3 {
				t.Fatalf("num_words = %v, %v; want 3", n, err)
			}
			return
		}
	}
	t.Fatal("num_words output missing")
}
