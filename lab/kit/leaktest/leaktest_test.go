package leaktest

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/goleak"
)

// A listener left accepting and a reader left reading are leaks, though
// both are parked in a network poll; an HTTP client's idle keep-alive
// connection is not.
func TestNetworkPollsAreNotIgnored(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	srv.Close() // the client's idle connection goroutines may linger: not a leak
	if err := goleak.Find(append(Ignore(), goleak.IgnoreCurrent())...); err != nil {
		t.Fatalf("keep-alive connection reported: %v", err)
	}

	before := goleak.IgnoreCurrent()
	lis, err := (&net.ListenConfig{}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan struct{})
	go func() {
		_, _ = lis.Accept() // leaked: nobody closes the listener until the end
		close(accepted)
	}()
	if err := goleak.Find(append(Ignore(), before)...); err == nil {
		t.Error("a goroutine blocked in Accept was not reported")
	}
	_ = lis.Close()
	<-accepted
}
