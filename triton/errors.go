package triton

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Errors returned by Client and Pool, to be checked with errors.Is. Each
// says what to do next.
var (
	// ErrOverloaded is backpressure: the server answered that it cannot take
	// the request now (gRPC UNAVAILABLE or RESOURCE_EXHAUSTED on a live
	// connection: "Exceeds maximum queue size", "Request timeout expired").
	// Slow down and try again; it says nothing bad about the partition.
	ErrOverloaded = errors.New("inference server overloaded")
	// ErrUnavailable means the partition could not be reached (connection
	// refused or lost, server going away). It counts toward ejection.
	ErrUnavailable = errors.New("inference server unreachable")
	// ErrServerFault means the server failed the request (INTERNAL,
	// UNKNOWN, ...). It may be the partition (a crashed model) or the input
	// (a poison chunk); the pool ejects only after failures on several
	// different inputs.
	ErrServerFault = errors.New("inference server fault")
	// ErrModelNotFound means the partition does not have the model loaded
	// (NOT_FOUND): a fact about the partition, not the input. Another
	// partition may serve it.
	ErrModelNotFound = errors.New("model not loaded on this partition")
	// ErrPoisonInput means the model failed this input with the same error
	// on two partitions, at least one of which then served another input:
	// the input is at fault, not the partitions, and retrying it cannot
	// help. A permanent, per-input error.
	ErrPoisonInput = errors.New("the model fails this input")
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
// p is the call's peer (grpc.Peer): gRPC records it once the call has a
// live transport, so an UNAVAILABLE with a peer is the server's answer
// (backpressure) and one without is the transport's (an unreachable
// partition).
func classify(op string, err error, p *peer.Peer) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%s: %w", op, err)
	}
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%s: %w: %w", op, ErrUnavailable, err)
	}
	switch st.Code() {
	case codes.Unavailable, codes.ResourceExhausted:
		if p.Addr != nil {
			return fmt.Errorf("%s: %w (%s): %s", op, ErrOverloaded, st.Code(), st.Message())
		}
		return fmt.Errorf("%s: %w (%s): %s", op, ErrUnavailable, st.Code(), st.Message())
	case codes.NotFound:
		return fmt.Errorf("%s: %w: %s", op, ErrModelNotFound, st.Message())
	case codes.InvalidArgument, codes.OutOfRange, codes.FailedPrecondition, codes.Unimplemented:
		return fmt.Errorf("%s: %w (%s): %s", op, ErrRejected, st.Code(), st.Message())
	case codes.Canceled:
		return fmt.Errorf("%s: %w", op, context.Canceled)
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", op, context.DeadlineExceeded)
	default:
		// INTERNAL, UNKNOWN, ABORTED and the rest: the server failed.
		return fmt.Errorf("%s: %w", op, &faultError{code: st.Code(), msg: st.Message()})
	}
}

// faultError is a server fault (ErrServerFault) with the server's code and
// message, by which the pool tells one input failing the same way
// everywhere from a partition failing.
type faultError struct {
	code codes.Code
	msg  string
}

func (e *faultError) Error() string {
	return fmt.Sprintf("%v (%s): %s", ErrServerFault, e.code, e.msg)
}

func (e *faultError) Unwrap() error { return ErrServerFault }

// same reports whether two faults are the same model error.
func (e *faultError) same(o *faultError) bool { return e.code == o.code && e.msg == o.msg }
