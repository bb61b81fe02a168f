// Package faultproxy is an HTTP proxy in front of the local AWS servers
// that injects S3 and SQS faults (500s, SlowDown, latency, connection
// resets), bucket outages and per-object refusals, and remembers what was
// written through it: the chaos suite's network, the outage benchmark's
// and the worker's outage tests'.
package faultproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleetscribe/fleetscribe/contract"
)

// Fault kinds the proxy injects.
const (
	Fault500        = "http_500"
	Fault503        = "http_503_slowdown"
	FaultLatency    = "latency"
	FaultResetFirst = "reset_before_forwarding"
	FaultResetAfter = "reset_after_forwarding" // the request took effect; its answer is lost
	FaultExhaust    = "designed_503"           // every GET of an input designed to exhaust retries
)

// Proxy sits between the workers and the emulator (S3 and SQS share its
// endpoint). With probability Rate a request meets a fault: an HTTP 500,
// a 503 SlowDown, added latency, or a connection reset before or after
// the request reached the emulator. GETs whose path contains Exhaust
// always get 503. It remembers the content of every transcript written
// through it, to tell a recomputation (same content) from a rewrite with
// other content.
type Proxy struct {
	target  *url.URL
	client  *http.Client
	Rate    float64
	Exhaust string

	on      atomic.Bool
	mu      sync.Mutex
	rng     *rand.Rand
	faults  map[string]int
	outage  map[string]Outage  // by bucket
	refused map[string]Refusal // by bucket/key
	// Transcript key → the content hash of each successful write.
	writes map[string][]string
}

// NewProxy forwards to the emulator at target.
func NewProxy(target string, rate float64, seed uint64) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil {
		return nil, err
	}
	p := &Proxy{
		target: u, Rate: rate, rng: rand.New(rand.NewPCG(seed, 99)),
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: time.Minute},
		faults: map[string]int{}, writes: map[string][]string{}, outage: map[string]Outage{}, refused: map[string]Refusal{},
	}
	p.on.Store(true)
	return p, nil
}

// SetFaults turns fault injection on or off (the designed failures stay).
func (p *Proxy) SetFaults(on bool) { p.on.Store(on) }

// An Outage is how every S3 request for a bucket is answered while it
// lasts: the bucket deleted (404 NoSuchBucket), its policy or key broken
// (403 AccessDenied), or the service failing (503 SlowDown, 500).
type Outage struct {
	Status int
	Code   string
	Hang   bool // no answer at all: the request waits until its client gives up
}

// Outages an operator meets.
var (
	OutageMissing = Outage{http.StatusNotFound, "NoSuchBucket", false}
	OutageDenied  = Outage{http.StatusForbidden, "AccessDenied", false}
	OutageFailing = Outage{http.StatusServiceUnavailable, "SlowDown", false}
	OutageHanging = Outage{Code: "hang", Hang: true}
)

// A Refusal is how S3 answers reads (GET, HEAD) of one object while its
// bucket serves everything else: the object encrypted with a KMS key the
// caller may not use, or owned by another account (403 AccessDenied), or
// archived by a lifecycle rule (403 InvalidObjectState, with its storage
// class and tier as S3 sends them).
type Refusal struct {
	Status       int
	Code         string
	StorageClass string
	AccessTier   string
}

// Refusals an operator meets.
var (
	RefusalAccessDenied = Refusal{Status: http.StatusForbidden, Code: "AccessDenied"}
	RefusalArchived     = Refusal{Status: http.StatusForbidden, Code: "InvalidObjectState", StorageClass: "GLACIER"}
	RefusalDeepArchive  = Refusal{Status: http.StatusForbidden, Code: "InvalidObjectState", StorageClass: "INTELLIGENT_TIERING", AccessTier: "DEEP_ARCHIVE_ACCESS"}
)

// RefuseObject makes reads of bucket/key answer r (zero Refusal: ends it).
func (p *Proxy) RefuseObject(bucket, key string, r Refusal) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r == (Refusal{}) {
		delete(p.refused, bucket+"/"+key)
		return
	}
	p.refused[bucket+"/"+key] = r
}

// refusalOf returns the refusal of the object a path-style S3 read names.
func (p *Proxy) refusalOf(r *http.Request) (Refusal, bool) {
	if r.Header.Get("X-Amz-Target") != "" || r.Method != http.MethodGet && r.Method != http.MethodHead {
		return Refusal{}, false // SQS, or a write (a listing names the bucket, not the key)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ref, ok := p.refused[strings.TrimPrefix(r.URL.Path, "/")]
	if ok {
		p.faults["refusal_"+ref.Code]++
	}
	return ref, ok
}

// SetOutage starts an outage of bucket (zero Outage: ends it).
func (p *Proxy) SetOutage(bucket string, o Outage) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if o == (Outage{}) {
		delete(p.outage, bucket)
		return
	}
	p.outage[bucket] = o
}

// outageOf returns the outage of the bucket a path-style S3 request names.
func (p *Proxy) outageOf(r *http.Request) (Outage, bool) {
	if r.Header.Get("X-Amz-Target") != "" {
		return Outage{}, false // SQS
	}
	bucket, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.outage[bucket]
	if ok {
		p.faults["outage_"+o.Code]++
	}
	return o, ok
}

// Faults returns how many faults of each kind were injected.
func (p *Proxy) Faults() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]int{}
	for k, v := range p.faults {
		out[k] = v
	}
	return out
}

// Writes returns, per transcript key, the content hash of each write.
func (p *Proxy) Writes() map[string][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string][]string{}
	for k, v := range p.writes {
		out[k] = append([]string(nil), v...)
	}
	return out
}

func (p *Proxy) pick() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on.Load() || p.rng.Float64() >= p.Rate {
		return ""
	}
	kinds := []string{Fault500, Fault503, FaultLatency, FaultResetFirst, FaultResetAfter}
	k := kinds[p.rng.IntN(len(kinds))]
	p.faults[k]++
	return k
}

func (p *Proxy) count(kind string) {
	p.mu.Lock()
	p.faults[kind]++
	p.mu.Unlock()
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sqs := r.Header.Get("X-Amz-Target") != ""
	if o, ok := p.outageOf(r); ok {
		_, _ = io.Copy(io.Discard, r.Body)
		if o.Hang {
			<-r.Context().Done()
			return
		}
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(o.Status)
		if r.Method != http.MethodHead {
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>outage injected by the chaos proxy</Message></Error>`, o.Code)
		}
		return
	}
	if ref, ok := p.refusalOf(r); ok {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(ref.Status)
		if r.Method != http.MethodHead {
			extra := ""
			if ref.StorageClass != "" {
				extra += "<StorageClass>" + ref.StorageClass + "</StorageClass>"
			}
			if ref.AccessTier != "" {
				extra += "<AccessTier>" + ref.AccessTier + "</AccessTier>"
			}
			fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>refused by the chaos proxy</Message>%s</Error>`, ref.Code, extra)
		}
		return
	}
	if !sqs && r.Method == http.MethodGet && p.Exhaust != "" && strings.Contains(r.URL.Path, p.Exhaust) {
		p.count(FaultExhaust)
		writeError(w, sqs, http.StatusServiceUnavailable)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	switch p.pick() {
	case Fault500:
		writeError(w, sqs, http.StatusInternalServerError)
		return
	case Fault503:
		writeError(w, sqs, http.StatusServiceUnavailable)
		return
	case FaultResetFirst:
		reset(w)
		return
	case FaultResetAfter:
		if resp, err := p.forward(r, body); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			p.recordWrite(r, resp.StatusCode)
		}
		reset(w)
		return
	case FaultLatency:
		time.Sleep(time.Duration(100+rand.IntN(700)) * time.Millisecond)
	}
	resp, err := p.forward(r, body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
	p.recordWrite(r, resp.StatusCode)
}

func (p *Proxy) forward(r *http.Request, body []byte) (*http.Response, error) {
	u := *p.target
	u.Path, u.RawPath, u.RawQuery = r.URL.Path, r.URL.RawPath, r.URL.RawQuery
	req, err := http.NewRequestWithContext(context.WithoutCancel(r.Context()), r.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = r.Header.Clone()
	req.Host = p.target.Host
	req.ContentLength = int64(len(body))
	return p.client.Do(req)
}

// recordWrite reads back a transcript the emulator just stored and keeps
// a hash of its content (text and words: not the time it was written).
func (p *Proxy) recordWrite(r *http.Request, status int) {
	if r.Method != http.MethodPut || status != http.StatusOK {
		return
	}
	path := r.URL.Path
	if !strings.HasSuffix(path, ".json") || strings.HasSuffix(path, ".error.json") {
		return
	}
	u := *p.target
	u.Path, u.RawPath = r.URL.Path, r.URL.RawPath
	resp, err := p.client.Get(u.String()) //nolint:noctx // bounded by the client timeout
	if err != nil {
		return
	}
	defer resp.Body.Close()
	var t contract.Transcript
	if json.NewDecoder(resp.Body).Decode(&t) != nil {
		return
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00", t.Text)
	for _, wd := range t.Words {
		fmt.Fprintf(h, "%s %.3f %.3f\x00", wd.Word, wd.Start, wd.End)
	}
	key := strings.TrimPrefix(path, "/")
	p.mu.Lock()
	p.writes[key] = append(p.writes[key], hex.EncodeToString(h.Sum(nil)))
	p.mu.Unlock()
}

func writeError(w http.ResponseWriter, sqs bool, status int) {
	if sqs {
		code := "InternalError"
		if status == http.StatusServiceUnavailable {
			code = "ServiceUnavailable"
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amzn-Query-Error", code+";Receiver")
		w.WriteHeader(status)
		fmt.Fprintf(w, `{"__type":"com.amazonaws.sqs#%s","message":"injected by the chaos proxy"}`, code)
		return
	}
	code := "InternalError"
	if status == http.StatusServiceUnavailable {
		code = "SlowDown"
	}
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected by the chaos proxy</Message></Error>`, code)
}

// reset closes the client's connection without an answer.
func reset(w http.ResponseWriter) {
	hj, ok := w.(http.Hijacker)
	if !ok {
		panic(http.ErrAbortHandler)
	}
	conn, _, err := hj.Hijack()
	if err != nil {
		return
	}
	_ = conn.Close()
}
