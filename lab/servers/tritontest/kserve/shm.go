package kserve

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fleetscribe/fleetscribe/internal/shm"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// Triton's system shared memory extension: a client on this host registers
// a POSIX shared memory object, and inputs then name a region, an offset
// and a size in it instead of carrying their bytes. Error texts and codes
// are Triton's (a region that cannot be opened also says why).

type shmRegion struct {
	key            string
	offset, length uint64
	m              *shm.Mapping
	users          atomic.Int32 // requests that read it and have not ended
}

// SystemSharedMemoryRegister implements GRPCInferenceService: it maps the
// client's object.
func (s *Server) SystemSharedMemoryRegister(_ context.Context, r *pb.SystemSharedMemoryRegisterRequest) (*pb.SystemSharedMemoryRegisterResponse, error) {
	if r.GetName() == "" || r.GetByteSize() == 0 {
		return nil, status.Errorf(codes.InvalidArgument, "failed to register shared memory region '%s': invalid args", r.GetName())
	}
	s.shmMu.Lock()
	defer s.shmMu.Unlock()
	if _, ok := s.regions[r.GetName()]; ok {
		return nil, status.Errorf(codes.AlreadyExists, "shared memory region '%s' already in manager", r.GetName())
	}
	m, err := shm.Open(r.GetKey(), int64(r.GetOffset()), int64(r.GetByteSize()))
	if err != nil {
		return nil, status.Errorf(codes.Internal, "Unable to open shared memory region: '%s': %v", r.GetKey(), err)
	}
	if s.regions == nil {
		s.regions = map[string]*shmRegion{}
	}
	s.regions[r.GetName()] = &shmRegion{key: r.GetKey(), offset: r.GetOffset(), length: r.GetByteSize(), m: m}
	return &pb.SystemSharedMemoryRegisterResponse{}, nil
}

// SystemSharedMemoryUnregister implements GRPCInferenceService: it unmaps
// the named region, or every region for an empty name. An unknown name is
// not an error; a region that a request still reads is refused, as Triton
// refuses it until it releases the request.
func (s *Server) SystemSharedMemoryUnregister(_ context.Context, r *pb.SystemSharedMemoryUnregisterRequest) (*pb.SystemSharedMemoryUnregisterResponse, error) {
	if err := s.unregister(r.GetName(), false); err != nil {
		return nil, err
	}
	return &pb.SystemSharedMemoryUnregisterResponse{}, nil
}

// unregister unmaps the named region, or every region for an empty name;
// force unmaps those in use too.
func (s *Server) unregister(name string, force bool) error {
	s.shmMu.Lock()
	defer s.shmMu.Unlock()
	var errs []error
	for n, reg := range s.regions {
		if name != "" && name != n {
			continue
		}
		if reg.users.Load() > 0 && !force {
			errs = append(errs, status.Errorf(codes.Internal, "Cannot unregister shared memory region '%s', it is currently in use.", n))
			continue
		}
		if err := reg.m.Close(); err != nil {
			errs = append(errs, status.Errorf(codes.Internal, "failed to unregister shared memory region '%s': %v", n, err))
		}
		delete(s.regions, n)
	}
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// SystemSharedMemoryStatus implements GRPCInferenceService.
func (s *Server) SystemSharedMemoryStatus(_ context.Context, r *pb.SystemSharedMemoryStatusRequest) (*pb.SystemSharedMemoryStatusResponse, error) {
	s.shmMu.RLock()
	defer s.shmMu.RUnlock()
	out := &pb.SystemSharedMemoryStatusResponse{Regions: map[string]*pb.SystemSharedMemoryStatusResponse_RegionStatus{}}
	for name, reg := range s.regions {
		if r.GetName() == "" || r.GetName() == name {
			out.Regions[name] = &pb.SystemSharedMemoryStatusResponse_RegionStatus{Name: name, Key: reg.key, Offset: reg.offset, ByteSize: reg.length}
		}
	}
	if r.GetName() != "" && len(out.Regions) == 0 {
		return nil, status.Errorf(codes.NotFound, "Unable to find system shared memory region: '%s'", r.GetName())
	}
	return out, nil
}

// closeRegions unmaps every region (the server is stopping).
func (s *Server) closeRegions() { _ = s.unregister("", true) }

// shmParams reads an input's shared memory parameters, as Triton does:
// a region name, a byte size with it, and an optional offset.
func shmParams(in *pb.ModelInferRequest_InferInputTensor) (region string, offset, size int64, ok bool, err error) {
	p := in.GetParameters()
	rp, ok := p["shared_memory_region"]
	op, hasOffset := p["shared_memory_offset"]
	sp, hasSize := p["shared_memory_byte_size"]
	switch {
	case !ok && hasOffset:
		return "", 0, 0, false, fmt.Errorf("'shared_memory_offset' can not be specified without 'shared_memory_region' parameter for tensor '%s'", in.GetName())
	case !ok && hasSize:
		return "", 0, 0, false, fmt.Errorf("'shared_memory_byte_size' can not be specified without 'shared_memory_region' parameter for tensor '%s'", in.GetName())
	case !ok:
		return "", 0, 0, false, nil
	}
	if _, isString := rp.GetParameterChoice().(*pb.InferParameter_StringParam); !isString {
		return "", 0, 0, false, fmt.Errorf("invalid value type for 'shared_memory_region' parameter for tensor '%s', expected string_param.", in.GetName())
	}
	if hasOffset {
		if _, isInt := op.GetParameterChoice().(*pb.InferParameter_Int64Param); !isInt {
			return "", 0, 0, false, fmt.Errorf("invalid value type for 'shared_memory_offset' parameter for tensor '%s', expected int64_param.", in.GetName())
		}
	}
	if !hasSize {
		return "", 0, 0, false, fmt.Errorf("'shared_memory_byte_size' must be specified along with 'shared_memory_region' parameter for tensor '%s'", in.GetName())
	}
	if _, isInt := sp.GetParameterChoice().(*pb.InferParameter_Int64Param); !isInt {
		return "", 0, 0, false, fmt.Errorf("invalid value type for 'shared_memory_byte_size' parameter for tensor '%s', expected int64_param.", in.GetName())
	}
	return rp.GetStringParam(), op.GetInt64Param(), sp.GetInt64Param(), true, nil
}

// readShm copies size bytes from offset of a registered region and adds
// the region to held: it stays in use until the request ends (release).
// The bytes are a copy all the same, so that a forced unmap (the server
// stopping) cannot pull them from under a request.
func (s *Server) readShm(region string, offset, size int64, held *[]*shmRegion) ([]byte, error) {
	s.shmMu.RLock()
	defer s.shmMu.RUnlock()
	reg, ok := s.regions[region]
	switch {
	case !ok:
		return nil, status.Errorf(codes.NotFound, "Unable to find shared memory region: '%s'", region)
	case offset < 0 || offset > int64(len(reg.m.Data)):
		return nil, status.Errorf(codes.InvalidArgument, "Invalid offset for shared memory region: '%s'", region)
	case size < 0 || size > int64(len(reg.m.Data))-offset:
		return nil, status.Errorf(codes.InvalidArgument, "Invalid offset + byte size for shared memory region: '%s'", region)
	}
	reg.users.Add(1)
	*held = append(*held, reg)
	return append([]byte(nil), reg.m.Data[offset:offset+size]...), nil
}

// release lets go of the regions a request read.
func release(held []*shmRegion) {
	for _, reg := range held {
		reg.users.Add(-1)
	}
}
