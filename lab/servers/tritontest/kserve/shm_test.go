package kserve_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/internal/shm"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

func param[T int64 | string](v T) *pb.InferParameter {
	switch v := any(v).(type) {
	case string:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_StringParam{StringParam: v}}
	case int64:
		return &pb.InferParameter{ParameterChoice: &pb.InferParameter_Int64Param{Int64Param: v}}
	}
	return nil
}

// Shared memory inputs are read as Triton reads them, and refused with
// Triton's codes and texts: unknown region NOT_FOUND (which tells a client
// to register again), a size past the region or a malformed parameter
// INVALID_ARGUMENT.
func TestSharedMemoryInputs(t *testing.T) {
	key := fmt.Sprintf("/kserve-test-%d", os.Getpid())
	m, err := shm.Create(key, 4096)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	copy(m.Data[64:], triton.EncodeFP32([]float32{0.25, -0.5, 1}))
	s := echo()
	ctx := context.Background()
	if _, err := s.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: key, ByteSize: 4096}); err != nil {
		t.Fatal(err)
	}
	defer s.SystemSharedMemoryUnregister(ctx, &pb.SystemSharedMemoryUnregisterRequest{})
	if _, err := s.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "r", Key: key, ByteSize: 4096}); status.Code(err) != codes.AlreadyExists {
		t.Errorf("second registration: %v, want AlreadyExists", err)
	}
	if _, err := s.SystemSharedMemoryRegister(ctx, &pb.SystemSharedMemoryRegisterRequest{Name: "big", Key: key, ByteSize: 8192}); err == nil {
		t.Error("registration past the object's end succeeded")
	}
	io := triton.DefaultModelIO()
	good := func() *pb.ModelInferRequest {
		r := io.NewRequest(triton.Request{Samples: make([]float32, 3)})
		r.Inputs[0].Parameters = map[string]*pb.InferParameter{
			"shared_memory_region": param("r"), "shared_memory_offset": param[int64](64), "shared_memory_byte_size": param[int64](12),
		}
		r.RawInputContents = r.RawInputContents[1:]
		return r
	}
	if _, err := s.ModelInfer(ctx, good()); err != nil {
		t.Fatalf("request reading shared memory: %v", err)
	}
	cases := map[string]struct {
		mutate func(r *pb.ModelInferRequest)
		code   codes.Code
		text   string
	}{
		"unknown region":   {func(r *pb.ModelInferRequest) { r.Inputs[0].Parameters["shared_memory_region"] = param("gone") }, codes.NotFound, "Unable to find shared memory region: 'gone'"},
		"past the end":     {func(r *pb.ModelInferRequest) { r.Inputs[0].Parameters["shared_memory_offset"] = param[int64](4090) }, codes.InvalidArgument, "Invalid offset + byte size"},
		"offset too far":   {func(r *pb.ModelInferRequest) { r.Inputs[0].Parameters["shared_memory_offset"] = param[int64](5000) }, codes.InvalidArgument, "Invalid offset"},
		"no byte size":     {func(r *pb.ModelInferRequest) { delete(r.Inputs[0].Parameters, "shared_memory_byte_size") }, codes.InvalidArgument, "must be specified along with"},
		"region not named": {func(r *pb.ModelInferRequest) { delete(r.Inputs[0].Parameters, "shared_memory_region") }, codes.InvalidArgument, "can not be specified without"},
		"size not int64":   {func(r *pb.ModelInferRequest) { r.Inputs[0].Parameters["shared_memory_byte_size"] = param("12") }, codes.InvalidArgument, "expected int64_param"},
		"size disagrees":   {func(r *pb.ModelInferRequest) { r.Inputs[0].Parameters["shared_memory_byte_size"] = param[int64](16) }, codes.InvalidArgument, "shape"},
		"raw contents too": {func(r *pb.ModelInferRequest) {
			r.RawInputContents = append([][]byte{make([]byte, 12)}, r.RawInputContents...)
		}, codes.InvalidArgument, "raw input contents"},
	}
	for name, c := range cases {
		r := good()
		c.mutate(r)
		_, err := s.ModelInfer(ctx, r)
		if status.Code(err) != c.code || !strings.Contains(err.Error(), c.text) {
			t.Errorf("%s: %v, want %v with %q", name, err, c.code, c.text)
		}
	}
}
