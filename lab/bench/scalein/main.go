// Command scalein simulates a fleet's scale-in under four ways of choosing
// which instance goes, on the same arrivals and job lengths, and prints
// what each costs in instance-hours against what the load needed:
//
//	protect     the shipped rule until now: the worker protects its instance
//	            from scale-in while it holds jobs and for 30 s after its last
//	            one; the group may only terminate unprotected instances
//	drain       no protection: the group terminates the instances it picks
//	            (AWS's default policy: here the oldest), and each drains
//	            (stops receiving, finishes what it holds) before it goes
//	least-busy  a custom termination policy (a Lambda) picks the instances
//	            holding the fewest jobs; each drains
//	worker      the workers themselves: when the group has more instances
//	            in service than it wants, those holding the fewest jobs stop
//	            receiving (seen at the next check, every 30 s) and are
//	            terminated once idle
//
// The load: Poisson arrivals at a rate needing -peak instances for the first
// hour, then -low instances for the rest, of recordings whose lengths are
// log-normal (median -median-s, capped at 2 h); a job holds one of its
// instance's slots (-jobs-per-gpu x GPUs, the shipped 16 a GPU) for a fixed
// overhead plus its audio at the instance's measured rate shared evenly
// among its slots. A job goes to a free slot chosen uniformly among the
// instances that receive (the queue hands a message to whichever receiver
// asks), and waits in the queue when none is free. The group wants
// ceil(load / (capacity x target)) instances, lowering it only after the
// load has stayed lower for 15 minutes (target tracking's scale-in), and
// adds instances after a boot.
//
//	go run ./lab/bench/scalein [-gpus 1,8]
//
// The last line is RESULT with each policy's instance-hours over the needed
// ones, per instance size, and the choice: the simplest policy within 1% of
// the cheapest.
package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
)

type config struct {
	gpus          int     // per instance
	jobsPerGPU    int     // slots a GPU
	audioPerGPU   float64 // audio-s/s a GPU serves (the measured mix)
	overhead      float64 // seconds a job takes besides its audio (S3 round trips)
	decodeRate    float64 // audio-s/s a job downloads and decodes at (ffmpeg, resampling)
	median, sigma float64 // recording length, log-normal (s)
	peak, low     int     // instances the load needs: first hour, then
	hours         float64
	target        float64 // fraction of capacity the group scales to
	boot          float64 // seconds from launch to service
	idle          float64 // protect: seconds without a job before unprotecting
	check         float64 // worker: seconds between the workers' checks of the group
	scaleInAfter  float64 // seconds the load must stay lower before desired drops
	seed          uint64
	meanHold      float64 // derived: mean seconds a job holds its slot
}

type instance struct {
	inService   float64
	slots, held int
	lastJob     float64
	draining    bool    // stopped receiving, goes once it holds nothing
	drainFrom   float64 // when it stopped receiving
	gone        bool
}

// drain stops the instance receiving at now.
func (in *instance) drain(now float64) { in.draining, in.drainFrom = true, now }

type policy string

const (
	protect   policy = "protect"
	drain     policy = "drain"
	leastBusy policy = "least-busy"
	workerRun policy = "worker"
)

var policies = []policy{protect, drain, leastBusy, workerRun}

type outcome struct {
	instanceHours, neededHours float64
	endInService               int
	waitP99, waitMean          float64
	maxDrain                   float64
	jobs                       int
}

// simulate runs one policy. Arrivals and lengths come from the seed alone,
// so every policy meets the same load.
func simulate(c config, p policy) outcome {
	// Separate streams: arrivals and their lengths are the same whatever
	// the policy does with them.
	arrivals := rand.New(rand.NewPCG(c.seed, 1))
	lengths := rand.New(rand.NewPCG(c.seed, 3))
	rng := rand.New(rand.NewPCG(c.seed, 4)) // slot choices
	const dt = 1.0
	end := c.hours * 3600
	perJob := c.audioPerGPU / float64(c.jobsPerGPU) // audio-s/s a slot gets
	slots := c.jobsPerGPU * c.gpus
	// The load keeps target of n instances' slots busy: n instances are
	// what it needs.
	rate := func(t float64) float64 { // arrivals a second
		n := c.low
		if t < 3600 {
			n = c.peak
		}
		return c.target * float64(n*slots) / c.meanHold
	}
	needed := func(t float64) int {
		return int(math.Ceil(rate(t) * c.meanHold / (float64(slots) * c.target) * (1 - 1e-9)))
	}
	var fleet []*instance
	for range c.peak {
		fleet = append(fleet, &instance{slots: slots, lastJob: -1e9})
	}
	// Completions by second: the instance each frees a slot of.
	horizon := int(end) + 8000
	done := make([][]int32, horizon)
	type job struct{ arrived, length float64 }
	var queue []job // jobs waiting for a slot
	var waits []float64
	desired, lowerSince := c.peak, -1.0
	lastCheck := 0.0
	var out outcome
	start := func(i int, j job, now float64) {
		in := fleet[i]
		in.held++
		in.lastJob = now
		finish := now + hold(c, perJob, j.length)
		k := int(math.Ceil(finish))
		if k >= horizon {
			k = horizon - 1
		}
		done[k] = append(done[k], int32(i))
		waits = append(waits, now-j.arrived)
		out.jobs++
	}
	receiving := func(now float64) (free []int, total int) {
		for i, in := range fleet {
			if !in.gone && !in.draining && in.inService <= now && in.held < in.slots {
				free = append(free, i)
				total += in.slots - in.held
			}
		}
		return free, total
	}
	place := func(j job, now float64) bool {
		free, total := receiving(now)
		if total == 0 {
			return false
		}
		k := rng.IntN(total)
		for _, i := range free {
			if f := fleet[i].slots - fleet[i].held; k < f {
				start(i, j, now)
				return true
			} else {
				k -= f
			}
		}
		return false
	}
	for t := 0.0; t < end; t += dt {
		for _, i := range done[int(t)] {
			fleet[i].held--
		}
		done[int(t)] = nil
		// Jobs waiting, then this second's arrivals.
		for len(queue) > 0 && place(queue[0], t) {
			queue = queue[1:]
		}
		for n := poisson(arrivals, rate(t)*dt); n > 0; n-- {
			j := job{t, math.Min(7200, c.median*math.Exp(c.sigma*lengths.NormFloat64()))}
			if !place(j, t) {
				queue = append(queue, j)
			}
		}
		// The group: desired follows the load up at once, down after it
		// has stayed lower for scaleInAfter.
		want := max(needed(t), 1)
		switch {
		case want > desired:
			desired, lowerSince = want, -1
		case want < desired && lowerSince < 0:
			lowerSince = t
		case want < desired && t-lowerSince >= c.scaleInAfter:
			desired, lowerSince = want, -1
		case want == desired:
			lowerSince = -1
		}
		var alive []int
		for i, in := range fleet {
			if !in.gone && !in.draining {
				alive = append(alive, i)
			}
		}
		for n := len(alive); n < desired; n++ {
			fleet = append(fleet, &instance{inService: t + c.boot, slots: slots, lastJob: -1e9})
		}
		if excess := len(alive) - desired; excess > 0 {
			scaleIn(c, p, fleet, alive, excess, t, &lastCheck)
		}
		// Draining instances go once they hold nothing.
		for _, in := range fleet {
			if in.draining && !in.gone && in.held == 0 {
				in.gone = true
				out.maxDrain = math.Max(out.maxDrain, t-in.drainFrom)
			}
		}
		for _, in := range fleet {
			if !in.gone {
				out.instanceHours += dt / 3600
			}
		}
		out.neededHours += float64(needed(t)) * dt / 3600
	}
	for _, in := range fleet {
		if !in.gone && !in.draining {
			out.endInService++
		}
	}
	slices.Sort(waits)
	if len(waits) > 0 {
		out.waitP99 = waits[len(waits)*99/100]
		sum := 0.0
		for _, w := range waits {
			sum += w
		}
		out.waitMean = sum / float64(len(waits))
	}
	return out
}

// scaleIn chooses excess of the alive instances to go, as the policy does.
func scaleIn(c config, p policy, fleet []*instance, alive []int, excess int, now float64, lastCheck *float64) {
	switch p {
	case protect:
		// Only unprotected instances: none held and none for idle seconds.
		for _, i := range alive {
			if excess == 0 {
				return
			}
			if in := fleet[i]; in.held == 0 && now-in.lastJob >= c.idle {
				in.drain(now)
				excess--
			}
		}
	case drain:
		for _, i := range alive[:excess] { // the oldest
			fleet[i].drain(now)
		}
	case leastBusy, workerRun:
		if p == workerRun {
			if now-*lastCheck < c.check {
				return
			}
			*lastCheck = now
		}
		sorted := slices.Clone(alive)
		slices.SortStableFunc(sorted, func(a, b int) int { return fleet[a].held - fleet[b].held })
		for _, i := range sorted[:excess] {
			fleet[i].drain(now)
		}
	}
}

// simplest is the policies from the least to the most to build and run:
// the drain alone, the workers' own check, a termination Lambda, and
// protection (which needs no more than the drain but keeps instances).
var simplest = []policy{drain, workerRun, leastBusy, protect}

// choose is the simplest policy whose instance-hours are within 1% of the
// cheapest one's.
func choose(ratios map[policy]float64) policy {
	low := math.Inf(1)
	for _, r := range ratios {
		low = math.Min(low, r)
	}
	for _, p := range simplest {
		if r, ok := ratios[p]; ok && r <= low*1.01 {
			return p
		}
	}
	return ""
}

// poisson draws from Poisson(mean): Knuth's method for small means, a
// rounded normal for large ones.
func poisson(rng *rand.Rand, mean float64) int {
	if mean <= 0 {
		return 0
	}
	if mean > 50 {
		return max(0, int(math.Round(mean+math.Sqrt(mean)*rng.NormFloat64())))
	}
	l, k, prod := math.Exp(-mean), 0, rng.Float64()
	for prod > l {
		k++
		prod *= rng.Float64()
	}
	return k
}

func main() {
	var c config
	gpuList := flag.String("gpus", "1,8", "GPUs per instance, one run each (g6e.xlarge: 1, g6e.48xlarge: 8)")
	flag.IntVar(&c.jobsPerGPU, "jobs-per-gpu", 16, "slots a GPU (the fleet module's jobs_per_gpu)")
	flag.Float64Var(&c.audioPerGPU, "audio-per-gpu", 4300, "audio-s/s a GPU serves (the length mix, docs/benchmarks.md)")
	flag.Float64Var(&c.overhead, "overhead-s", 2, "seconds a job takes besides its audio (S3 round trips, the transcript's upload)")
	flag.Float64Var(&c.decodeRate, "decode-rate", 200, "audio-s/s a job downloads and decodes at")
	flag.Float64Var(&c.median, "median-s", 240, "median recording length, seconds")
	flag.Float64Var(&c.sigma, "sigma", 1.0, "log-normal spread of recording lengths")
	flag.IntVar(&c.peak, "peak", 12, "instances the first hour's load needs")
	flag.IntVar(&c.low, "low", 2, "instances the rest needs")
	flag.Float64Var(&c.hours, "hours", 3, "simulated hours")
	flag.Float64Var(&c.target, "target", 0.8, "fraction of capacity the group scales to")
	flag.Float64Var(&c.boot, "boot-s", 600, "seconds from launch to service")
	flag.Float64Var(&c.idle, "idle-s", 30, "protect: seconds without a job before the worker unprotects")
	flag.Float64Var(&c.check, "check-s", 30, "worker: seconds between the workers' checks of the group")
	flag.Float64Var(&c.scaleInAfter, "scale-in-after-s", 900, "seconds the load must stay lower before desired capacity drops")
	flag.Uint64Var(&c.seed, "seed", 1, "random seed (every policy meets the same arrivals)")
	flag.Parse()
	c.meanHold = meanHold(c)
	fmt.Println("| GPUs an instance | policy | instance-hours | needed | over needed | in service at the end (needed) | longest drain s | job wait mean / p99 s |")
	fmt.Println("|---:|---|---:|---:|---:|---:|---:|---:|")
	var result []string
	for _, g := range strings.Split(*gpuList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(g))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "scalein: -gpus %q: want positive counts\n", *gpuList)
			os.Exit(2)
		}
		c.gpus = n
		ratios := map[policy]float64{}
		for _, p := range policies {
			o := simulate(c, p)
			ratio := o.instanceHours / o.neededHours
			fmt.Printf("| %d | %s | %.1f | %.1f | %.2f | %d (%d) | %.0f | %.2f / %.2f |\n", n, p, o.instanceHours, o.neededHours, ratio,
				o.endInService, c.low, o.maxDrain, o.waitMean, o.waitP99)
			result = append(result, fmt.Sprintf("gpus%d_%s=%.3f", n, strings.ReplaceAll(string(p), "-", "_"), ratio))
			ratios[p] = ratio
		}
		result = append(result, fmt.Sprintf("gpus%d_choice=%s", n, choose(ratios)))
	}
	fmt.Println("RESULT " + strings.Join(result, " "))
}

// hold is how long a job of length seconds of audio holds its slot: the
// overhead, its download and decode, and its inference at perJob audio-s/s.
func hold(c config, perJob, length float64) float64 {
	return c.overhead + length/c.decodeRate + length/perJob
}

// meanHold is the mean time a job holds its slot, by sampling the capped
// length distribution.
func meanHold(c config) float64 {
	rng := rand.New(rand.NewPCG(c.seed, 2))
	perJob := c.audioPerGPU / float64(c.jobsPerGPU)
	sum := 0.0
	const n = 200000
	for range n {
		sum += hold(c, perJob, math.Min(7200, c.median*math.Exp(c.sigma*rng.NormFloat64())))
	}
	return sum / n
}
