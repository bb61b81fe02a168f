package tritonproc_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/fleetscribe/fleetscribe/audio"
	"github.com/fleetscribe/fleetscribe/lab/kit/conversation"
	"github.com/fleetscribe/fleetscribe/lab/kit/diarscore"
	"github.com/fleetscribe/fleetscribe/lab/servers/tritonproc"
	"github.com/fleetscribe/fleetscribe/modelspec"
	"github.com/fleetscribe/fleetscribe/triton"
)

// diarizeAll sends a recording's chunks in order, the state of each
// response with the next request, each to the pool's next partition in
// turn, then the finish (or, with place lastChunk, the last chunk
// finishing), and returns its turns with their final labels.
func diarizeAll(t *testing.T, pools []*triton.Pool, samples []float32, maxSpeakers int, place ...bool) []diarscore.Turn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var state []byte
	type raw struct {
		t   triton.DiarizeTurn
		off float64
	}
	var turns []raw
	chunks := audio.Split(samples, audio.SplitConfig{Max: 30 * 16000, Frame: 480})
	fold := len(place) > 0 && place[0] == lastChunk
	var r triton.DiarizeResult
	for i, c := range chunks {
		req := triton.DiarizeRequest{Samples: c.Samples, State: state}
		if fold && i == len(chunks)-1 {
			req.Finish, req.MaxSpeakers = true, maxSpeakers
		}
		var err error
		if r, err = pools[i%len(pools)].Diarize(ctx, req); err != nil {
			t.Fatalf("chunk %d: %v", i, err)
		}
		for _, x := range r.Turns {
			turns = append(turns, raw{x, float64(c.Offset) / 16000})
		}
		state = r.State
	}
	if !fold {
		var err error
		if r, err = pools[len(chunks)%len(pools)].Diarize(ctx, triton.DiarizeRequest{State: state, Finish: true, MaxSpeakers: maxSpeakers}); err != nil {
			t.Fatalf("finish: %v", err)
		}
	}
	var out []diarscore.Turn
	for _, x := range turns {
		if x.t.Speaker >= len(r.Labels) {
			t.Fatalf("a turn of provisional speaker %d, final labels %v", x.t.Speaker, r.Labels)
		}
		out = append(out, diarscore.Turn{Speaker: string(rune('A' + r.Labels[x.t.Speaker])), Start: x.t.Start + x.off, End: x.t.End + x.off})
	}
	return out
}

// lastChunk asks diarizeAll to send the last chunk finishing.
const lastChunk = true

func diarizePool(t *testing.T, addr string) *triton.Pool {
	t.Helper()
	p, err := triton.NewPool(triton.PoolConfig{Addrs: []string{addr}, MaxInflight: 2, RequestTimeout: time.Minute, Attempts: 2,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond, EjectAfter: 3, HealthInterval: 10 * time.Second, PoisonWait: time.Second,
		MetricsAddrs: []string{"off"}}, triton.DefaultModelIO(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// The shipped diarization model on real Triton: a conversation of three
// flite voices is diarized chunk by chunk into three speakers with a low
// error; the partitions keep nothing, so the same chunks sent to two
// servers in turn give the same answer as one server; the job's max is
// honoured; bad state and hints are refused as the input's fault.
func TestDiarizeRepositoryOnRealTriton(t *testing.T) {
	root := requireSpeech(t)
	repo := filepath.Join(root, "deploy", "triton", "cpu")
	var servers []*tritonproc.Server
	for range 2 {
		s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo, Models: []string{modelspec.Name, modelspec.DiarizeName}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Kill()
		servers = append(servers, s)
	}
	a, b := diarizePool(t, servers[0].Addr), diarizePool(t, servers[1].Addr)
	conv, err := conversation.Make(context.Background(), conversation.Spec{Seed: 3, Speakers: 3, Seconds: 70, Overlap: 0.15}, conversation.Flite(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	ref, _ := diarscore.Reference(conv)
	one := diarizeAll(t, []*triton.Pool{a}, conv.Samples, 0)
	score := diarscore.DER(ref, one, 0.25)
	labels := map[string]bool{}
	for _, x := range one {
		labels[x.Speaker] = true
	}
	if score.DER > 0.10 || len(labels) != 3 {
		t.Errorf("DER %.3f with %d speakers for 3 voices (missed %.1f s, false alarm %.1f s, confusion %.1f s of %.1f s)", score.DER, len(labels), score.Missed, score.FalseAlarm, score.Conf, score.Total)
	}
	if two := diarizeAll(t, []*triton.Pool{a, b}, conv.Samples, 0); !slices.Equal(one, two) {
		t.Errorf("chunks sent to two partitions in turn diarized differently:\n%v\n%v", one, two)
	}
	capped := diarizeAll(t, []*triton.Pool{b}, conv.Samples, 2)
	labels = map[string]bool{}
	for _, x := range capped {
		labels[x.Speaker] = true
	}
	if len(labels) != 2 {
		t.Errorf("max_speakers 2: %d speakers", len(labels))
	}
	ctx := context.Background()
	for name, req := range map[string]triton.DiarizeRequest{
		"a state not the model's": {Samples: conv.Samples[:16000], State: []byte(`{"v": 9}`)},
		"max above the model's":   {State: nil, Finish: true, MaxSpeakers: modelspec.DiarizeMaxSpeakers + 1},
		"max below min":           {Finish: true, MinSpeakers: 3, MaxSpeakers: 2},
	} {
		if _, err := a.Diarize(ctx, req); !errors.Is(err, triton.ErrRejected) {
			t.Errorf("%s: %v, want ErrRejected", name, err)
		}
	}
}

// A recording's last chunk sent finishing is one request, not two, and
// gives what the chunk and then a finish give: on the shipped model, which
// lists the input last, and on one of an earlier release, which does not
// (its configuration without last): there the client sends the chunk and
// then the finish, as before, since such a model would not hear a last
// chunk's audio.
func TestDiarizeLastChunkOnRealTriton(t *testing.T) {
	root := requireSpeech(t)
	shipped := filepath.Join(root, "deploy", "triton", "cpu")
	older := t.TempDir()
	cfg := modelspec.Diarize(false)
	cfg.InputTensors = slices.DeleteFunc(slices.Clone(cfg.InputTensors), func(x modelspec.Tensor) bool { return x.Name == modelspec.LastInput })
	text := cfg.Render()
	if err := os.MkdirAll(filepath.Join(older, modelspec.DiarizeName), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(older, modelspec.DiarizeName, "config.pbtxt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(shipped, modelspec.DiarizeName, "1"), filepath.Join(older, modelspec.DiarizeName, "1")); err != nil {
		t.Fatal(err)
	}
	conv, err := conversation.Make(context.Background(), conversation.Spec{Seed: 5, Speakers: 2, Seconds: 50}, conversation.Flite(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	var want []diarscore.Turn
	for _, repo := range []string{shipped, older} {
		s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: repo, Models: []string{modelspec.DiarizeName}})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Kill()
		p := diarizePool(t, s.Addr)
		io := triton.DefaultModelIO()
		io.Model = modelspec.DiarizeName
		stats, err := triton.Dial(s.Addr, io)
		if err != nil {
			t.Fatal(err)
		}
		defer stats.Close()
		requests := func() uint64 {
			st, err := stats.Statistics(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			return st.Requests
		}
		// Triton counts a request once its response has gone, which may be
		// after the client has it: wait for the count to reach what is
		// wanted, then a little more for any request beyond it.
		counted := func(from, want uint64) uint64 {
			n := requests() - from
			for deadline := time.Now().Add(5 * time.Second); n < want && time.Now().Before(deadline); n = requests() - from {
				time.Sleep(50 * time.Millisecond)
			}
			time.Sleep(200 * time.Millisecond)
			return requests() - from
		}
		chunks := uint64(len(audio.Split(conv.Samples, audio.SplitConfig{Max: 30 * 16000, Frame: 480})))
		if want == nil {
			// The chunks, then a finish request: all counted before the
			// next walk's count begins (its finish once counted in it).
			from := requests()
			want = diarizeAll(t, []*triton.Pool{p}, conv.Samples, 2)
			counted(from, chunks+1)
		}
		before := requests()
		got := diarizeAll(t, []*triton.Pool{p}, conv.Samples, 2, lastChunk)
		wantSent := map[string]uint64{shipped: chunks, older: chunks + 1}[repo]
		if sent := counted(before, wantSent); sent != wantSent {
			t.Errorf("%s: %d requests for %d chunks, want %d", filepath.Base(repo), sent, chunks, wantSent)
		}
		if len(got) == 0 || !slices.Equal(got, want) {
			t.Errorf("%s: the last chunk finishing diarized differently:\n%v\n%v", filepath.Base(repo), got, want)
		}
	}
}

// A chunk's audio goes to the diarize model through the client's shared
// memory region, as a transcription's does (one region a partition: both
// models are served by the same Triton process): each request is a small
// fraction of its chunk's samples, and the turns, state and labels are
// those of the same chunks sent in the request, the last one finishing.
func TestDiarizeThroughSharedMemoryOnRealTriton(t *testing.T) {
	root := requireSpeech(t)
	s, err := tritonproc.Start(context.Background(), tritonproc.Options{Repo: filepath.Join(root, "deploy", "triton", "cpu"),
		Models: []string{modelspec.Name, modelspec.DiarizeName}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Kill()
	conv, err := conversation.Make(context.Background(), conversation.Spec{Seed: 7, Speakers: 2, Seconds: 45}, conversation.Flite(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var sizes []int
	measure := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoke grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if strings.HasSuffix(method, "/ModelInfer") {
			mu.Lock()
			sizes = append(sizes, proto.Size(req.(proto.Message)))
			mu.Unlock()
		}
		return invoke(ctx, method, req, reply, cc, opts...)
	}
	inline, err := triton.Dial(s.Addr, triton.DefaultModelIO())
	if err != nil {
		t.Fatal(err)
	}
	defer inline.Close()
	viaShm, err := triton.Dial(s.Addr, triton.DefaultModelIO(), grpc.WithUnaryInterceptor(measure))
	if err != nil {
		t.Fatal(err)
	}
	defer viaShm.Close()
	if err := viaShm.UseSharedMemory(2, 30*16000); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	chunks := audio.Split(conv.Samples, audio.SplitConfig{Max: 30 * 16000, Frame: 480})
	if len(chunks) < 2 {
		t.Fatalf("%d chunks: the test wants a state carried between two", len(chunks))
	}
	var stateA, stateB []byte
	for i, c := range chunks {
		req := triton.DiarizeRequest{Samples: c.Samples, State: stateA}
		if i == len(chunks)-1 {
			req.Finish, req.MaxSpeakers = true, 2
		}
		a, err := inline.Diarize(ctx, req)
		if err != nil {
			t.Fatalf("chunk %d in the request: %v", i, err)
		}
		req.State = stateB
		b, err := viaShm.Diarize(ctx, req)
		if err != nil {
			t.Fatalf("chunk %d through shared memory: %v", i, err)
		}
		mu.Lock()
		sent := sizes[len(sizes)-1]
		mu.Unlock()
		if sent > len(c.Samples) { // a quarter of the samples' 4 bytes each
			t.Errorf("chunk %d of %d samples: a request of %d bytes, want the audio in shared memory", i, len(c.Samples), sent)
		}
		if !slices.Equal(a.Turns, b.Turns) || !slices.Equal(a.Labels, b.Labels) || !bytes.Equal(a.State, b.State) {
			t.Errorf("chunk %d: through shared memory %v %v, in the request %v %v (states equal: %v)", i, b.Turns, b.Labels, a.Turns, a.Labels, bytes.Equal(a.State, b.State))
		}
		if i == len(chunks)-1 && len(b.Labels) == 0 {
			t.Errorf("the last chunk, finishing, brought no labels")
		}
		stateA, stateB = a.State, b.State
	}
	if st := viaShm.SharedMemory(); !st.Registered || st.Err != nil {
		t.Errorf("shared memory %+v", st)
	}
}
