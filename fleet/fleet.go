// Package fleet watches the signals EC2 gives an instance before it goes
// away, through the instance metadata service (IMDSv2): a spot
// interruption notice (two minutes' warning), a rebalance recommendation
// (elevated risk of one), and the Auto Scaling target lifecycle state
// (Terminated when a scale-in or instance refresh picks this instance).
// cmd/worker turns each into a worker.Interruption.
package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rs/zerolog"
)

// DefaultEndpoint is the instance metadata service.
const DefaultEndpoint = "http://169.254.169.254"

// Notice kinds.
const (
	KindSpot      = "spot_interruption"
	KindRebalance = "rebalance_recommendation"
	KindLifecycle = "autoscaling_termination"
)

// Notice is one signal that the instance is going away.
type Notice struct {
	Kind     string
	Deadline time.Time // when the instance goes (spot); zero when not given
	Detail   string    // the action or state IMDS reported
}

// Watcher polls IMDSv2.
type Watcher struct {
	Endpoint string        // empty: DefaultEndpoint
	Client   *http.Client  // nil: a client with a 2 s timeout
	Interval time.Duration // between polls; 0: 5 s
	TokenTTL time.Duration // 0: 6 h
	Log      zerolog.Logger
	Now      func() time.Time // nil: time.Now

	token   string
	expires time.Time
}

// ErrUnavailable is returned by Probe where there is no IMDS (not on EC2,
// or IMDS disabled for the instance).
var ErrUnavailable = errors.New("instance metadata service unavailable")

func (w *Watcher) now() time.Time {
	if w.Now != nil {
		return w.Now()
	}
	return time.Now()
}

func (w *Watcher) client() *http.Client {
	if w.Client != nil {
		return w.Client
	}
	return &http.Client{Timeout: 2 * time.Second}
}

func (w *Watcher) endpoint() string {
	if w.Endpoint != "" {
		return strings.TrimSuffix(w.Endpoint, "/")
	}
	return DefaultEndpoint
}

// Probe reports whether IMDS answers a token request.
func (w *Watcher) Probe(ctx context.Context) error {
	if err := w.refreshToken(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return nil
}

// refreshToken gets a session token (PUT, with its TTL in a header).
func (w *Watcher) refreshToken(ctx context.Context) error {
	ttl := w.TokenTTL
	if ttl <= 0 {
		ttl = 6 * time.Hour
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, w.endpoint()+"/latest/api/token", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-aws-ec2-metadata-token-ttl-seconds", strconv.Itoa(int(ttl/time.Second)))
	resp, err := w.client().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("token: HTTP %d", resp.StatusCode)
	}
	w.token = strings.TrimSpace(string(b))
	// Renew well before it lapses.
	w.expires = w.now().Add(ttl * 9 / 10)
	return nil
}

// get reads a metadata path: ok false on 404 (the signal is absent).
func (w *Watcher) get(ctx context.Context, path string) (body []byte, ok bool, err error) {
	for try := 0; try < 2; try++ {
		if w.token == "" || !w.now().Before(w.expires) {
			if err := w.refreshToken(ctx); err != nil {
				return nil, false, err
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.endpoint()+path, nil)
		if err != nil {
			return nil, false, err
		}
		req.Header.Set("X-aws-ec2-metadata-token", w.token)
		resp, err := w.client().Do(req)
		if err != nil {
			return nil, false, err
		}
		b, rerr := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		_ = resp.Body.Close()
		switch {
		case rerr != nil:
			return nil, false, rerr
		case resp.StatusCode == http.StatusOK:
			return b, true, nil
		case resp.StatusCode == http.StatusNotFound:
			return nil, false, nil
		case resp.StatusCode == http.StatusUnauthorized:
			w.token = "" // expired or revoked: get a new one and try again
			continue
		default:
			return nil, false, fmt.Errorf("%s: HTTP %d", path, resp.StatusCode)
		}
	}
	return nil, false, fmt.Errorf("%s: token refused", path)
}

// InstanceID reads this instance's id.
func (w *Watcher) InstanceID(ctx context.Context) (string, error) {
	b, ok, err := w.get(ctx, "/latest/meta-data/instance-id")
	switch {
	case err != nil:
		return "", fmt.Errorf("instance id: %w", err)
	case !ok || len(strings.TrimSpace(string(b))) == 0:
		return "", errors.New("instance id: not in instance metadata")
	}
	return strings.TrimSpace(string(b)), nil
}

// Check polls each signal once and returns the notices present now.
func (w *Watcher) Check(ctx context.Context) ([]Notice, error) {
	var out []Notice
	var errs []error
	if b, ok, err := w.get(ctx, "/latest/meta-data/spot/instance-action"); err != nil {
		errs = append(errs, err)
	} else if ok {
		var a struct {
			Action string `json:"action"`
			Time   string `json:"time"`
		}
		if err := json.Unmarshal(b, &a); err != nil {
			errs = append(errs, fmt.Errorf("spot instance-action %q: %w", b, err))
		} else {
			n := Notice{Kind: KindSpot, Detail: a.Action}
			if t, err := time.Parse(time.RFC3339, a.Time); err == nil {
				n.Deadline = t
			} else {
				n.Deadline = w.now().Add(2 * time.Minute) // the documented warning
			}
			out = append(out, n)
		}
	}
	if b, ok, err := w.get(ctx, "/latest/meta-data/events/recommendations/rebalance"); err != nil {
		errs = append(errs, err)
	} else if ok {
		out = append(out, Notice{Kind: KindRebalance, Detail: strings.TrimSpace(string(b))})
	}
	if b, ok, err := w.get(ctx, "/latest/meta-data/autoscaling/target-lifecycle-state"); err != nil {
		errs = append(errs, err)
	} else if ok {
		if state := strings.TrimSpace(string(b)); state == "Terminated" || strings.HasPrefix(state, "Warmed:") {
			out = append(out, Notice{Kind: KindLifecycle, Detail: state})
		}
	}
	return out, errors.Join(errs...)
}

// Run polls until ctx is done and calls notify once for each kind of
// notice when it first appears. Failed polls are logged and retried.
func (w *Watcher) Run(ctx context.Context, notify func(Notice)) error {
	interval := w.Interval
	if interval <= 0 {
		interval = 5 * time.Second
	}
	seen := map[string]bool{}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		notices, err := w.Check(ctx)
		if err != nil && ctx.Err() == nil {
			w.Log.Warn().Err(err).Msg("instance metadata poll failed")
		}
		for _, n := range notices {
			if !seen[n.Kind] {
				seen[n.Kind] = true
				w.Log.Warn().Str("notice", n.Kind).Str("detail", n.Detail).Time("deadline", n.Deadline).Msg("fleet signal")
				notify(n)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
