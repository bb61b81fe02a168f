package triton_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fleetscribe/fleetscribe/internal/shm"
	"github.com/fleetscribe/fleetscribe/lab/kit/shmtest"
	"github.com/fleetscribe/fleetscribe/lab/kit/testwait"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritontest/kserve"
	"github.com/fleetscribe/fleetscribe/triton"
	pb "github.com/fleetscribe/fleetscribe/triton/inference"
)

// sizes records the size of each ModelInfer request as sent.
type sizes struct {
	mu sync.Mutex
	n  []int
}

func (s *sizes) interceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/ModelInfer") {
		s.mu.Lock()
		s.n = append(s.n, proto.Size(req.(proto.Message)))
		s.mu.Unlock()
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

func (s *sizes) last() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[len(s.n)-1]
}

func shmServer(t *testing.T, addr string) *tritontest.Server {
	t.Helper()
	srv, err := tritontest.Listen(addr, triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	srv.SetRecognizer(kserve.RecognizerFunc(func(_ context.Context, s []float32, _ bool) (triton.Result, error) {
		return triton.Result{Text: tritontest.Fingerprint(s)}, nil
	}))
	return srv
}

func shmClient(t *testing.T, addr string, io triton.ModelIO, slots int, opts ...grpc.DialOption) (*triton.Client, *sizes) {
	t.Helper()
	var sz sizes
	c, err := triton.Dial(addr, io, append([]grpc.DialOption{grpc.WithUnaryInterceptor(sz.interceptor)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := c.UseSharedMemory(slots, 30*16000); err != nil {
		t.Fatal(err)
	}
	return c, &sz
}

func tone(n int, seed float64) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = float32(0.5 * math.Sin(seed*float64(i)))
	}
	return s
}

// inferAs sends samples and checks the answer is their fingerprint.
func inferAs(t *testing.T, c *triton.Client, samples []float32) {
	t.Helper()
	res, err := c.Infer(context.Background(), triton.Request{Samples: samples})
	if err != nil {
		t.Fatal(err)
	}
	if want := tritontest.Fingerprint(samples); res.Text != want {
		t.Fatalf("server heard %q, want %q", res.Text, want)
	}
}

// Audio goes through the region, not the request: the server hears the
// exact samples (padding to a bucket included, with the true length),
// while each request is a few hundred bytes, and the server lists the
// region.
func TestSharedMemoryCarriesTheAudio(t *testing.T) {
	srv := shmServer(t, "127.0.0.1:0")
	for _, buckets := range [][]int{nil, {16000, 5 * 16000}} {
		io := triton.DefaultModelIO()
		io.Buckets = buckets
		c, sz := shmClient(t, srv.Addr, io, 4)
		for _, n := range []int{1, 7, 16000, 3*16000 + 5, 5 * 16000} {
			inferAs(t, c, tone(n, 0.01*float64(n%97+1)))
			if s := sz.last(); s > 1024 {
				t.Errorf("buckets %v, %d samples: request of %d bytes, want the audio in shared memory", buckets, n, s)
			}
		}
		st := c.SharedMemory()
		if !st.Enabled || !st.Registered || st.Err != nil {
			t.Fatalf("state %+v", st)
		}
		regions, err := pbClient(t, srv.Addr).SystemSharedMemoryStatus(context.Background(), &pb.SystemSharedMemoryStatusRequest{Name: st.Region})
		if err != nil || len(regions.GetRegions()) != 1 {
			t.Fatalf("server's regions %v, %v", regions, err)
		}
	}
	// A chunk longer than a slot goes in the request.
	c, sz := shmClient(t, srv.Addr, triton.DefaultModelIO(), 1)
	long := tone(30*16000+1, 0.02)
	inferAs(t, c, long)
	if s := sz.last(); s < 4*len(long) {
		t.Errorf("chunk longer than a slot: request of %d bytes", s)
	}
}

func pbClient(t *testing.T, addr string) pb.GRPCInferenceServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewGRPCInferenceServiceClient(conn)
}

// A partition restarted (an MPS fault) has lost the region: the request
// that finds out goes again in the request, and the next registers the
// region again.
func TestSharedMemoryAfterServerRestart(t *testing.T) {
	a := shmServer(t, "127.0.0.1:0")
	addr := a.Addr
	c, sz := shmClient(t, addr, triton.DefaultModelIO(), 4)
	inferAs(t, c, tone(16000, 0.1))
	a.Close()
	shmServer(t, addr)
	samples := tone(2*16000, 0.2)
	// The first requests may find the connection still down.
	var res triton.Result
	var err error
	testwait.For(t, "a request served after the restart", func() bool {
		res, err = c.Infer(t.Context(), triton.Request{Samples: samples})
		return err == nil
	})
	if res.Text != tritontest.Fingerprint(samples) {
		t.Fatalf("after the restart the server heard %q", res.Text)
	}
	if s := sz.last(); s < 4*len(samples) {
		t.Errorf("request that found the region gone: %d bytes, want it sent again with the audio", s)
	}
	inferAs(t, c, samples)
	if s := sz.last(); s > 1024 {
		t.Errorf("request after the restart: %d bytes, want the region registered again", s)
	}
}

// A server that cannot map the region (another host, another IPC
// namespace: here, the object removed before the first request) gets the
// audio in the request, and the client says why.
func TestSharedMemoryUnmappableFallsBack(t *testing.T) {
	srv := shmServer(t, "127.0.0.1:0")
	c, sz := shmClient(t, srv.Addr, triton.DefaultModelIO(), 4)
	if err := os.Remove(shm.Dir + "/" + c.SharedMemory().Region); err != nil {
		t.Fatal(err)
	}
	samples := tone(16000, 0.3)
	inferAs(t, c, samples)
	if s := sz.last(); s < 4*len(samples) {
		t.Errorf("request of %d bytes, want the audio in it", s)
	}
	st := c.SharedMemory()
	if st.Registered || st.Err == nil || !strings.Contains(st.Err.Error(), "Unable to open shared memory region") {
		t.Fatalf("state %+v, want the registration's error", st)
	}
}

// With every slot in use, a request goes with its audio rather than wait.
func TestSharedMemorySlotsInUseFallBack(t *testing.T) {
	srv := shmServer(t, "127.0.0.1:0")
	c, sz := shmClient(t, srv.Addr, triton.DefaultModelIO(), 1)
	inferAs(t, c, tone(100, 0.4)) // registers
	srv.Hold()
	first := tone(16000, 0.5)
	done := make(chan error, 1)
	go func() {
		res, err := c.Infer(context.Background(), triton.Request{Samples: first})
		if err == nil && res.Text != tritontest.Fingerprint(first) {
			err = fmt.Errorf("held request: server heard %q", res.Text)
		}
		done <- err
	}()
	<-srv.Started() // the registering request
	<-srv.Started() // the held one, in the only slot
	second := tone(16000, 0.6)
	go func() {
		<-srv.Started()
		srv.Release()
	}()
	inferAs(t, c, second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	sz.mu.Lock()
	defer sz.mu.Unlock()
	if len(sz.n) != 3 || sz.n[1] > 1024 || sz.n[2] < 4*len(second) {
		t.Fatalf("request sizes %v: want the held one in shared memory, the other with its audio", sz.n)
	}
}

// Close unregisters the region and removes its object; the region's name
// says which process made it.
func TestSharedMemoryClose(t *testing.T) {
	srv := shmServer(t, "127.0.0.1:0")
	c, _ := shmClient(t, srv.Addr, triton.DefaultModelIO(), 2)
	inferAs(t, c, tone(1000, 0.7))
	region := c.SharedMemory().Region
	if !strings.HasPrefix(region, triton.SharedMemoryPrefix(os.Getpid())) {
		t.Errorf("region %q does not name this process (%d): a killed worker's would not be found", region, os.Getpid())
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(shm.Dir + "/" + region); !os.IsNotExist(err) {
		t.Errorf("object after Close: %v", err)
	}
	regions, err := pbClient(t, srv.Addr).SystemSharedMemoryStatus(context.Background(), &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(regions.GetRegions()) != 0 {
		t.Errorf("server's regions after Close: %v, %v", regions, err)
	}
}

// Closed while the server holds a request that reads the region, the
// client asks again until the server lets go of it (as Triton refuses to
// unregister a region in use; here the server lets go once Close has been
// refused), so the server forgets the region; the object goes once that
// request has ended, not before and not never.
func TestSharedMemoryCloseWhileInUse(t *testing.T) {
	srv := shmServer(t, "127.0.0.1:0")
	var refused sync.Once
	releaseWhenRefused := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		err := invoker(ctx, method, req, reply, cc, opts...)
		if strings.HasSuffix(method, "/SystemSharedMemoryUnregister") && status.Code(err) == codes.Internal {
			refused.Do(srv.Release)
		}
		return err
	}
	c, _ := shmClient(t, srv.Addr, triton.DefaultModelIO(), 1, grpc.WithChainUnaryInterceptor(releaseWhenRefused))
	inferAs(t, c, tone(100, 0.4)) // registers
	region := c.SharedMemory().Region
	srv.Hold()
	t.Cleanup(srv.Release)
	done := make(chan error, 1)
	go func() {
		_, err := c.Infer(context.Background(), triton.Request{Samples: tone(16000, 0.5)})
		done <- err
	}()
	<-srv.Started() // the registering request
	<-srv.Started() // the held one, in the only slot
	rpc := pbClient(t, srv.Addr)
	_, err := rpc.SystemSharedMemoryUnregister(context.Background(), &pb.SystemSharedMemoryUnregisterRequest{Name: region})
	if st, _ := status.FromError(err); st.Code() != codes.Internal || !strings.Contains(st.Message(), "currently in use") {
		t.Fatalf("unregister while a request reads the region: %v, want INTERNAL, currently in use", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	regions, err := rpc.SystemSharedMemoryStatus(context.Background(), &pb.SystemSharedMemoryStatusRequest{})
	if err != nil || len(regions.GetRegions()) != 0 {
		t.Errorf("server's regions after Close: %v, %v (it would keep the region mapped)", regions, err)
	}
	<-done // served or cut off by Close: either way it has ended
	if _, err := os.Stat(shm.Dir + "/" + region); !os.IsNotExist(err) {
		t.Errorf("object after the last request ended: %v", err)
	}
}

// shmPool is a pool over n fake servers, each holding every request until
// all want have arrived, with the audio through shared memory and the
// pool's complaints about it collected.
func shmPool(t *testing.T, n, want int, budget int64) (*triton.Pool, func() []string) {
	t.Helper()
	arrived := make(chan struct{}, want)
	all := make(chan struct{})
	var once sync.Once
	var addrs []string
	for range n {
		srv := shmServer(t, "127.0.0.1:0")
		srv.SetRecognizer(kserve.RecognizerFunc(func(ctx context.Context, s []float32, _ bool) (triton.Result, error) {
			arrived <- struct{}{}
			if len(arrived) == want {
				once.Do(func() { close(all) })
			}
			select { // every slot in use at once, written in full
			case <-all:
			case <-time.After(10 * time.Second):
			}
			return triton.Result{Text: tritontest.Fingerprint(s)}, nil
		}))
		addrs = append(addrs, srv.Addr)
	}
	cfg := poolConfig(addrs...)
	cfg.SharedMemory, cfg.ChunkSamples, cfg.SharedMemoryBudget = true, 30*16000, budget
	var mu sync.Mutex
	var complaints []string
	cfg.OnSharedMemoryError = func(partition string, err error) {
		mu.Lock()
		defer mu.Unlock()
		complaints = append(complaints, err.Error())
	}
	p := newPool(t, cfg, prometheus.NewRegistry())
	return p, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(complaints)
	}
}

// transcribeAll sends n full 30-s chunks at once and checks each answer.
func transcribeAll(t *testing.T, p *triton.Pool, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := tone(30*16000, 0.001*float64(i+1))
			res, err := p.Transcribe(context.Background(), triton.Request{Samples: s})
			if err != nil {
				t.Error(err)
			} else if res.Text != tritontest.Fingerprint(s) {
				t.Errorf("chunk %d: heard %q, want %q", i, res.Text, tritontest.Fingerprint(s))
			}
		}()
	}
	wg.Wait()
}

// Three partitions of two 30-s slots want 11 MiB of a /dev/shm of 8: two
// regions are reserved, the third partition gets its audio in the request,
// and every slot written at once in full crashes nothing (where regions
// were sparse, the writes past 8 MiB were a SIGBUS that killed the worker).
func TestPoolOnASmallDevShm(t *testing.T) {
	if !shmtest.Small(t, 8) {
		return
	}
	p, complaints := shmPool(t, 3, 6, 0)
	region := triton.SharedMemoryBytes(2, 30*16000)
	if got := p.SharedMemoryBytes(); got != 2*region {
		t.Errorf("reserved %d bytes, want two regions of %d", got, region)
	}
	transcribeAll(t, p, 6)
	if c := complaints(); len(c) != 1 || !strings.Contains(c[0], "no space left") || !strings.Contains(c[0], "MiB free") {
		t.Errorf("complaints %q, want one: no space for the third region, with what is free", c)
	}
}

// The regions together stay within -triton-shared-memory-budget: past it,
// partitions get the audio in the request.
func TestPoolSharedMemoryBudget(t *testing.T) {
	region := triton.SharedMemoryBytes(2, 30*16000)
	p, complaints := shmPool(t, 3, 6, region+region/2)
	if got := p.SharedMemoryBytes(); got != region {
		t.Errorf("reserved %d bytes, want one region of %d", got, region)
	}
	transcribeAll(t, p, 6)
	if c := complaints(); len(c) != 2 || !strings.Contains(c[0], "over its budget") {
		t.Errorf("complaints %q, want two over the budget", c)
	}
}

// A worker killed with regions registered (SIGKILL, an OOM kill, a crash)
// leaves each one's object in /dev/shm and mapped by its partition: with
// compose's ipc: host, host memory held until reboot, 234 MiB per crash
// at one GPU. The next worker's pool removes the object when it starts
// and, once its own region is registered there, has the partition let go
// of the killed worker's; a live worker's region stays.
func TestPoolSweepsWhatAKilledWorkerLeft(t *testing.T) {
	if addr := os.Getenv("SHM_KILLED_WORKER"); addr != "" {
		c, err := triton.Dial(addr, triton.DefaultModelIO())
		if err == nil {
			err = c.UseSharedMemory(2, 30*16000)
		}
		if err == nil {
			_, err = c.Infer(context.Background(), triton.Request{Samples: tone(16000, 0.3)})
		}
		if err != nil || !c.SharedMemory().Registered {
			fmt.Println("not registered:", err)
			os.Exit(1)
		}
		fmt.Println("registered")
		select {} // until killed
	}
	srv := shmServer(t, "127.0.0.1:0")
	rpc := pbClient(t, srv.Addr)
	// A live worker's region, registered: it stays.
	live, _ := shmClient(t, srv.Addr, triton.DefaultModelIO(), 2)
	inferAs(t, live, tone(16000, 0.5))
	// A worker that is killed.
	pid := shmtest.Killed(t, "SHM_KILLED_WORKER="+srv.Addr, "registered")
	left, _ := filepath.Glob(filepath.Join(shm.Dir, triton.SharedMemoryPrefix(pid)+"*"))
	if len(left) != 1 {
		t.Fatalf("the killed worker left %v in %s, want its one region", left, shm.Dir)
	}
	t.Cleanup(func() { _ = os.Remove(left[0]) })
	old := time.Now().Add(-time.Hour) // created well before the restart
	if err := os.Chtimes(left[0], old, old); err != nil {
		t.Fatal(err)
	}
	killed := filepath.Base(left[0])

	cfg := poolConfig(srv.Addr)
	cfg.SharedMemory, cfg.ChunkSamples = true, 30*16000
	reg := prometheus.NewRegistry()
	p := newPool(t, cfg, reg)
	if _, err := os.Stat(left[0]); !os.IsNotExist(err) {
		t.Errorf("the killed worker's object is still in %s after a pool started (%v)", shm.Dir, err)
	}
	if _, err := p.Transcribe(context.Background(), triton.Request{Samples: tone(16000, 0.7)}); err != nil {
		t.Fatal(err)
	}
	st, err := rpc.SystemSharedMemoryStatus(context.Background(), &pb.SystemSharedMemoryStatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name := range st.GetRegions() {
		names = append(names, name)
	}
	if slices.Contains(names, killed) || !slices.Contains(names, live.SharedMemory().Region) || len(names) != 2 {
		t.Errorf("the partition holds %v: want the live worker's %s and the pool's, not the killed worker's %s", names, live.SharedMemory().Region, killed)
	}
	if v := counter(t, reg, "fleetscribe_triton_shared_memory_swept_total"); v != 1 {
		t.Errorf("fleetscribe_triton_shared_memory_swept_total %g, want 1", v)
	}
}

// counter reads a counter without labels from reg.
func counter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
