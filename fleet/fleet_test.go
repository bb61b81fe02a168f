package fleet

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleetscribe/fleetscribe/lab/kit/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

// FakeIMDS is a local stand-in for IMDSv2: a token from PUT with a TTL
// header, 401 for a missing or expired token, 404 for absent signals.
type fakeIMDS struct {
	mu        sync.Mutex
	tokens    map[string]time.Time
	n         int
	spot      string // body of spot/instance-action; "" is 404
	rebalance string
	lifecycle string
	puts      int
	unauth    int
	polled    chan struct{} // one per spot poll, if set
}

func (f *fakeIMDS) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.URL.Path == "/latest/api/token" {
		if r.Method != http.MethodPut {
			http.Error(w, "", http.StatusMethodNotAllowed)
			return
		}
		ttl, err := strconv.Atoi(r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds"))
		if err != nil || ttl < 1 || ttl > 21600 {
			http.Error(w, "", http.StatusBadRequest)
			return
		}
		f.n++
		f.puts++
		tok := "tok-" + strconv.Itoa(f.n)
		f.tokens[tok] = time.Now().Add(time.Duration(ttl) * time.Second)
		_, _ = w.Write([]byte(tok))
		return
	}
	if exp, ok := f.tokens[r.Header.Get("X-aws-ec2-metadata-token")]; !ok || time.Now().After(exp) {
		f.unauth++
		http.Error(w, "", http.StatusUnauthorized)
		return
	}
	if r.URL.Path == "/latest/meta-data/spot/instance-action" && f.polled != nil {
		select {
		case f.polled <- struct{}{}:
		default:
		}
	}
	body := map[string]string{
		"/latest/meta-data/spot/instance-action":               f.spot,
		"/latest/meta-data/events/recommendations/rebalance":   f.rebalance,
		"/latest/meta-data/autoscaling/target-lifecycle-state": f.lifecycle,
	}[r.URL.Path]
	if body == "" {
		http.NotFound(w, r)
		return
	}
	_, _ = w.Write([]byte(body))
}

func newFake(t *testing.T) (*fakeIMDS, *httptest.Server) {
	f := &fakeIMDS{tokens: map[string]time.Time{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func TestNoSignalsNoNotices(t *testing.T) {
	f, srv := newFake(t)
	f.lifecycle = "InService"
	w := &Watcher{Endpoint: srv.URL}
	if err := w.Probe(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, err := w.Check(context.Background())
	if err != nil || len(n) != 0 {
		t.Fatalf("notices %v, err %v", n, err)
	}
	if f.puts != 1 {
		t.Errorf("%d token requests; one token serves every call", f.puts)
	}
}

func TestSpotRebalanceAndLifecycleNotices(t *testing.T) {
	f, srv := newFake(t)
	f.spot = `{"action": "terminate", "time": "2026-11-30T08:22:00Z"}`
	f.rebalance = `{"noticeTime": "2026-11-30T08:17:00Z"}`
	f.lifecycle = "Terminated"
	w := &Watcher{Endpoint: srv.URL}
	n, err := w.Check(context.Background())
	if err != nil || len(n) != 3 {
		t.Fatalf("notices %+v, err %v", n, err)
	}
	if n[0].Kind != KindSpot || n[0].Detail != "terminate" || !n[0].Deadline.Equal(time.Date(2026, 11, 30, 8, 22, 0, 0, time.UTC)) {
		t.Errorf("spot notice %+v", n[0])
	}
	if n[1].Kind != KindRebalance || n[2].Kind != KindLifecycle || n[2].Detail != "Terminated" {
		t.Errorf("notices %+v", n)
	}
}

// An expired token (TTL passed, or the service restarted) is replaced.
func TestExpiredTokenIsRenewed(t *testing.T) {
	f, srv := newFake(t)
	f.spot = `{"action": "stop", "time": "2026-11-30T08:22:00Z"}`
	now := time.Now()
	w := &Watcher{Endpoint: srv.URL, TokenTTL: time.Hour, Now: func() time.Time { return now }}
	if _, err := w.Check(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The service forgets the token (as after a TTL lapse on its side).
	f.mu.Lock()
	f.tokens = map[string]time.Time{}
	f.mu.Unlock()
	n, err := w.Check(context.Background())
	if err != nil || len(n) != 1 || f.puts != 2 || f.unauth != 1 {
		t.Fatalf("notices %v err %v puts %d unauthorized %d", n, err, f.puts, f.unauth)
	}
	// Our own clock past 90% of the TTL renews before asking.
	now = now.Add(55 * time.Minute)
	if _, err := w.Check(context.Background()); err != nil || f.puts != 3 || f.unauth != 1 {
		t.Fatalf("err %v puts %d unauthorized %d", err, f.puts, f.unauth)
	}
}

func TestProbeWithoutIMDS(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens there
	w := &Watcher{Endpoint: srv.URL}
	if err := w.Probe(context.Background()); err == nil {
		t.Fatal("probe of a closed port succeeded")
	}
}

// Run reports each kind once, when it first appears.
func TestRunNotifiesOnce(t *testing.T) {
	f, srv := newFake(t)
	f.polled = make(chan struct{})
	w := &Watcher{Endpoint: srv.URL, Interval: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	got := make(chan Notice, 10)
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, func(n Notice) { got <- n }) }()
	polls := func(n int) {
		for range n {
			<-f.polled
		}
	}
	polls(3) // nothing to report yet
	f.mu.Lock()
	f.spot = `{"action": "terminate", "time": "2026-11-30T08:22:00Z"}`
	f.mu.Unlock()
	n := <-got
	if n.Kind != KindSpot {
		t.Fatalf("notice %+v", n)
	}
	polls(3) // the notice is still there
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("notified again: %+v", <-got)
	}
}
