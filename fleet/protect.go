package fleet

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/autoscaling"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/rs/zerolog"

	"github.com/fleetscribe/fleetscribe/internal/backoff"
)

// AutoScalingAPI is the one Auto Scaling call the protector makes.
type AutoScalingAPI interface {
	SetInstanceProtection(ctx context.Context, params *autoscaling.SetInstanceProtectionInput, optFns ...func(*autoscaling.Options)) (*autoscaling.SetInstanceProtectionOutput, error)
}

// Protector keeps the instance protected from scale-in while its worker
// holds jobs, as AWS advises for queue workers: a scale-in then picks an
// idle instance, never one in the middle of a 30-minute recording. It
// protects when the first job is taken and unprotects once the worker has
// been idle for Idle, so a steady stream of jobs costs no calls; a failed
// call is tried again with backoff. When Run ends (after the worker has
// drained), the instance is left unprotected.
//
// Protection only steers scale-in. Instance refresh, rebalancing and spot
// reclaim still terminate protected instances; there the drain and the
// termination lifecycle hook decide what finishes.
type Protector struct {
	API        AutoScalingAPI
	Group      string        // Auto Scaling group name
	InstanceID string        // this instance
	InHand     func() int    // jobs the worker holds now
	Idle       time.Duration // unprotect after this long without a job (0: 30 s)
	Poll       time.Duration // how often InHand is read (0: 1 s)
	Retry      time.Duration // first wait after a failed call, doubling (0: 1 s)
	Log        zerolog.Logger
	Now        func() time.Time // nil: time.Now

	protected bool
	calls     *prometheus.CounterVec
	state     prometheus.Gauge
}

// Register adds the protector's metrics to reg.
func (p *Protector) Register(reg prometheus.Registerer) {
	f := promauto.With(reg)
	p.calls = f.NewCounterVec(prometheus.CounterOpts{
		Name: "fleetscribe_scale_in_protection_calls_total",
		Help: "SetInstanceProtection calls, by what they asked (protect, unprotect) and outcome (ok, error).",
	}, []string{"action", "outcome"})
	p.state = f.NewGauge(prometheus.GaugeOpts{
		Name: "fleetscribe_scale_in_protected",
		Help: "1 while this instance is protected from scale-in (it holds jobs), 0 otherwise.",
	})
}

func (p *Protector) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

// Run keeps the protection in step with the worker until ctx is done, then
// unprotects the instance if it is protected.
func (p *Protector) Run(ctx context.Context) error {
	if p.API == nil || p.Group == "" || p.InstanceID == "" || p.InHand == nil {
		return errors.New("scale-in protection needs the Auto Scaling client, group, instance id and job count")
	}
	idle, poll, retry := p.Idle, p.Poll, p.Retry
	if idle <= 0 {
		idle = 30 * time.Second
	}
	if poll <= 0 {
		poll = time.Second
	}
	if retry <= 0 {
		retry = time.Second
	}
	defer func() {
		if p.protected {
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			_ = p.set(fctx, false)
		}
	}()
	lastBusy := p.now()
	failures := 0
	retryAt := time.Time{}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		now := p.now()
		busy := p.InHand() > 0
		if busy {
			lastBusy = now
		}
		want := p.protected
		switch {
		case busy && !p.protected:
			want = true
		case !busy && p.protected && now.Sub(lastBusy) >= idle:
			want = false
		}
		if want != p.protected && !now.Before(retryAt) {
			if err := p.set(ctx, want); err != nil {
				failures++
				retryAt = now.Add(backoff.Delay(retry, time.Minute, failures-1))
			} else {
				failures, retryAt = 0, time.Time{}
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *Protector) set(ctx context.Context, protect bool) error {
	action := map[bool]string{true: "protect", false: "unprotect"}[protect]
	_, err := p.API.SetInstanceProtection(ctx, &autoscaling.SetInstanceProtectionInput{
		AutoScalingGroupName: aws.String(p.Group), InstanceIds: []string{p.InstanceID}, ProtectedFromScaleIn: aws.Bool(protect),
	})
	outcome := "ok"
	if err != nil {
		outcome = "error"
		p.Log.Warn().Err(err).Str("action", action).Msg("scale-in protection call failed; will try again")
	} else {
		p.protected = protect
		p.Log.Info().Str("action", action).Msg("scale-in protection changed")
	}
	if p.calls != nil {
		p.calls.WithLabelValues(action, outcome).Inc()
		p.state.Set(map[bool]float64{true: 1, false: 0}[p.protected])
	}
	return err
}
