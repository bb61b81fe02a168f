package faultproxy

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/fleetscribe/fleetscribe/contract"
)

// store is a tiny object store: PUT keeps the body, GET returns it.
type store struct {
	mu   sync.Mutex
	objs map[string][]byte
	gets int
}

func (s *store) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch r.Method {
	case http.MethodPut:
		b, _ := io.ReadAll(r.Body)
		s.objs[r.URL.Path] = b
	case http.MethodGet:
		s.gets++
		b, ok := s.objs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	}
}

func put(t *testing.T, url, key string, v any) int {
	t.Helper()
	b, _ := json.Marshal(v)
	req, _ := http.NewRequest(http.MethodPut, url+"/"+key, strings.NewReader(string(b)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// The proxy remembers each transcript's content: a second write of the
// same text and words is a recomputation, one with other words a
// duplicate outcome; error records and the time a transcript was made do
// not count. Designed failures answer every GET under their prefix 503.
func TestProxyTellsRecomputationFromRewrite(t *testing.T) {
	st := &store{objs: map[string][]byte{}}
	backend := httptest.NewServer(st)
	defer backend.Close()
	p, err := NewProxy(backend.URL, 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	p.Exhaust = "/in/exhaust/"
	front := httptest.NewServer(p)
	defer front.Close()
	a := contract.Transcript{Text: "the patient reports pain", Attempt: 1}
	b := a
	b.Attempt = 2 // written again later: same content
	c := contract.Transcript{Text: "the patient reports rain"}
	put(t, front.URL, "out/k1/asr/e-1.json", a)
	put(t, front.URL, "out/k1/asr/e-1.json", b)
	put(t, front.URL, "out/k2/asr/e-2.json", a)
	put(t, front.URL, "out/k2/asr/e-2.json", c)
	put(t, front.URL, "out/k3/asr/e-3.error.json", map[string]string{"error_class": "corrupt_audio"})
	w := p.Writes()
	if h := w["out/k1/asr/e-1.json"]; len(h) != 2 || h[0] != h[1] {
		t.Errorf("recomputation: %v", h)
	}
	if h := w["out/k2/asr/e-2.json"]; len(h) != 2 || h[0] == h[1] {
		t.Errorf("rewrite with other words: %v", h)
	}
	if _, ok := w["out/k3/asr/e-3.error.json"]; ok || len(w) != 2 {
		t.Errorf("writes %v", w)
	}
	resp, err := http.Get(front.URL + "/in/exhaust/0001.wav")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || p.Faults()[FaultExhaust] != 1 {
		t.Errorf("designed failure: %d, faults %v", resp.StatusCode, p.Faults())
	}
}
