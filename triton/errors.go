package triton

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors returned by Client and Pool, to be checked with errors.Is.
var (
	// ErrOverloaded means the server could not take the request now (gRPC
	// UNAVAILABLE or RESOURCE_EXHAUSTED: queue full, queue timeout, server
	// restarting). Another partition, or a later try, may succeed.
	ErrOverloaded = errors.New("inference server overloaded or unavailable")
	// ErrRejected means the server refused the request itself (gRPC
	// INVALID_ARGUMENT and kin). Retrying the same input cannot succeed.
	ErrRejected = errors.New("inference request rejected")
	// ErrBadResponse means the server answered with outputs this client
	// cannot read. It is treated as retryable: a partition mid-upgrade can
	// answer oddly once.
	ErrBadResponse = errors.New("malformed inference response")
	// ErrNoPartition means every partition is ejected or the pool is closed.
	ErrNoPartition = errors.New("no healthy inference partition")
)

// classify wraps a gRPC error in the sentinel that says what to do next.
func classify(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w: %w", op, ErrOverloaded, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted, codes.Aborted:
		return fmt.Errorf("%s: %w: %s", op, ErrOverloaded, st.Message())
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.Unimplemented, codes.NotFound:
		return fmt.Errorf("%s: %w (%s): %s", op, ErrRejected, st.Code(), st.Message())
	case codes.Canceled:
		return fmt.Errorf("%s: %w", op, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", op, context.DeadlineExceeded)
	default:
		// INTERNAL, UNKNOWN and the rest: a server-side failure, likely a
		// crashed partition. Worth retrying elsewhere.
		return fmt.Errorf("%s: %w (%s): %s", op, ErrOverloaded, st.Code(), st.Message())
	}
}
