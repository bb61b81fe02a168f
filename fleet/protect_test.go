package fleet

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"
)

// fakeAutoScaling records SetInstanceProtection calls; the first fail
// calls fail.
type fakeAutoScaling struct {
	mu    sync.Mutex
	calls []string
	fail  int
	seen  chan struct{}
}

func (f *fakeAutoScaling) SetInstanceProtection(_ context.Context, in *autoscaling.SetInstanceProtectionInput, _ ...func(*autoscaling.Options)) (*autoscaling.SetInstanceProtectionOutput, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	defer func() { f.seen <- struct{}{} }()
	if aws.ToString(in.AutoScalingGroupName) != "fleet" || !slices.Equal(in.InstanceIds, []string{"i-0abc"}) {
		return nil, errors.New("wrong group or instance")
	}
	if f.fail > 0 {
		f.fail--
		f.calls = append(f.calls, "failed")
		return nil, errors.New("throttled")
	}
	f.calls = append(f.calls, map[bool]string{true: "protect", false: "unprotect"}[aws.ToBool(in.ProtectedFromScaleIn)])
	return &autoscaling.SetInstanceProtectionOutput{}, nil
}

func (f *fakeAutoScaling) got() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// Protected on the first job, not called again while jobs come and go
// within the idle time, unprotected once idle, and unprotected at the end
// when stopped while protected; a failed call is tried again.
func TestProtectorFollowsJobsInHand(t *testing.T) {
	api := &fakeAutoScaling{fail: 1, seen: make(chan struct{}, 100)}
	var inHand atomic.Int64
	reg := prometheus.NewRegistry()
	p := &Protector{API: api, Group: "fleet", InstanceID: "i-0abc", InHand: func() int { return int(inHand.Load()) },
		Idle: 100 * time.Millisecond, Poll: 2 * time.Millisecond, Retry: 5 * time.Millisecond, Log: zerolog.Nop()}
	p.Register(reg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	await := func(n int) {
		t.Helper()
		for len(api.got()) < n {
			select {
			case <-api.seen:
			case <-time.After(10 * time.Second):
				t.Fatalf("calls %v, want %d", api.got(), n)
			}
		}
	}

	inHand.Store(1) // the first job: protect (fails once, then succeeds)
	await(2)
	for _, n := range []int64{3, 1, 0, 2, 0, 1} { // jobs come and go faster than the idle time
		inHand.Store(n)
		time.Sleep(5 * time.Millisecond)
	}
	if got := api.got(); !slices.Equal(got, []string{"failed", "protect"}) {
		t.Fatalf("calls %v while jobs come and go", got)
	}
	if v := testutil.ToFloat64(p.state); v != 1 {
		t.Errorf("fleetscribe_scale_in_protected = %v", v)
	}
	inHand.Store(0) // idle: unprotect after the idle time
	await(3)
	inHand.Store(1) // busy again
	await(4)
	cancel() // the worker drained while protected: unprotected at the end
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := api.got(); !slices.Equal(got, []string{"failed", "protect", "unprotect", "protect", "unprotect"}) {
		t.Errorf("calls %v", got)
	}
	if v := testutil.ToFloat64(p.state); v != 0 {
		t.Errorf("fleetscribe_scale_in_protected = %v at the end", v)
	}
	if v := testutil.ToFloat64(p.calls.WithLabelValues("protect", "error")); v != 1 {
		t.Errorf("failed protect calls %v", v)
	}
}

// An idle worker never calls Auto Scaling, and a stopped idle one does not
// either.
func TestProtectorIdleCallsNothing(t *testing.T) {
	api := &fakeAutoScaling{seen: make(chan struct{}, 10)}
	p := &Protector{API: api, Group: "fleet", InstanceID: "i-0abc", InHand: func() int { return 0 }, Poll: time.Millisecond, Log: zerolog.Nop()}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := p.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if got := api.got(); len(got) != 0 {
		t.Errorf("calls %v", got)
	}
	if err := (&Protector{}).Run(ctx); err == nil {
		t.Error("a protector without its group and instance ran")
	}
}
