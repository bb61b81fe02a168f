package main

import "testing"

// On a load that drops from 4 instances' worth to 1, protection while
// busy keeps all 4 (no instance idles 30 s) and every draining policy
// ends at the 1 needed; every policy meets the same arrivals.
func TestScaleInPolicies(t *testing.T) {
	c := config{gpus: 1, jobsPerGPU: 16, audioPerGPU: 4300, overhead: 2, decodeRate: 200, median: 240, sigma: 1,
		peak: 4, low: 1, hours: 1.6, target: 0.8, boot: 600, idle: 30, check: 30, scaleInAfter: 900, seed: 3}
	c.meanHold = meanHold(c)
	jobs := -1
	for _, p := range policies {
		o := simulate(c, p)
		want := c.low
		if p == protect {
			want = c.peak
		}
		if o.endInService != want {
			t.Errorf("%s: %d in service at the end, want %d", p, o.endInService, want)
		}
		if p != protect && o.instanceHours >= simulate(c, protect).instanceHours {
			t.Errorf("%s: %.2f instance-hours, not below protection's", p, o.instanceHours)
		}
		if jobs >= 0 && o.jobs != jobs {
			t.Errorf("%s: %d jobs, another policy met %d", p, o.jobs, jobs)
		}
		jobs = o.jobs
	}
}

// The choice is the simplest policy within 1% of the cheapest.
func TestChoose(t *testing.T) {
	for _, c := range []struct {
		ratios map[policy]float64
		want   policy
	}{
		{map[policy]float64{protect: 2.25, drain: 1.163, leastBusy: 1.160, workerRun: 1.161}, drain},
		{map[policy]float64{protect: 2.25, drain: 1.30, leastBusy: 1.10, workerRun: 1.105}, workerRun},
		{map[policy]float64{protect: 1.0, drain: 1.2, leastBusy: 1.2, workerRun: 1.2}, protect},
	} {
		if got := choose(c.ratios); got != c.want {
			t.Errorf("%v: %s, want %s", c.ratios, got, c.want)
		}
	}
}

// The longest drain is the time from an instance's last receipt to its
// end: zero for protection, which ends only instances holding nothing,
// and above zero for the drain, where busy instances finish first.
func TestLongestDrain(t *testing.T) {
	c := config{gpus: 1, jobsPerGPU: 16, audioPerGPU: 4300, overhead: 2, decodeRate: 30, median: 1200, sigma: 1,
		peak: 12, low: 2, hours: 3, target: 0.8, boot: 600, idle: 30, check: 30, scaleInAfter: 900, seed: 1}
	c.meanHold = meanHold(c)
	p := simulate(c, protect)
	if p.endInService == c.peak {
		t.Fatal("protection ended no instance here: the case does not exercise it")
	}
	if p.maxDrain != 0 {
		t.Errorf("protection: longest drain %.0f s, want 0 (it ends idle instances only)", p.maxDrain)
	}
	if d := simulate(c, drain); d.maxDrain <= 0 || d.maxDrain > hold(c, c.audioPerGPU/float64(c.jobsPerGPU), 7200)+1 {
		t.Errorf("drain: longest drain %.0f s, want above 0 and within the longest job", d.maxDrain)
	}
}
