package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devsystem"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// The soak's shape.
const (
	soakEnv = "EXECPLANE_SOAK_DURATION" // how long the paced load runs (default 60s; make soak: 30m)
	// soakAgents per binding: enough to keep the system busy when they run unpaced.
	soakAgents = 4
	// warmUp opens everything a steady load holds (environments, helper sessions,
	// connections) before the baseline; capacityWindow measures the unpaced rate.
	warmUp         = 10 * time.Second
	capacityWindow = 20 * time.Second
	// loadShare of the measured capacity is the soak's rate.
	loadShare = 0.8
	// sessionIdle is the gateways' --session-idle: short, so that every helper session
	// (13 goroutines each) has closed when the figures are read, before and after.
	sessionIdle = 5 * time.Second
	// settle is the quiet before each measurement: the load's calls and streams end and
	// the idle sessions close (a claim left held costs a process nothing).
	settle = 3*sessionIdle + 5*time.Second
)

// resource is one figure of a process that must come back after the load.
type resource struct {
	name   string
	metric string
	// slack is the least absolute difference allowed, for small figures (10 % of 20
	// descriptors is two).
	slack float64
}

var resources = []resource{
	{"goroutines", "go_goroutines", 5},
	{"open fds", "process_open_fds", 3},
	{"heap MiB", "go_memstats_heap_alloc_bytes", 2 << 20},
}

// tolerance is how far a figure may end from its baseline.
const tolerance = 0.10

// usage is a process's figures at one time, each the least of three readings after a
// garbage collection (a reading taken while a stray timer fires is not the steady state).
type usage map[string]float64

func measure(ctx context.Context, p *devsystem.Process) (usage, error) {
	u := usage{}
	for range 3 {
		if err := p.CollectGarbage(ctx); err != nil {
			return nil, err
		}
		for _, r := range resources {
			v, err := p.Metric(ctx, r.metric+" ")
			if err != nil {
				return nil, err
			}
			if old, ok := u[r.name]; !ok || v < old {
				u[r.name] = v
			}
		}
		sleep(ctx, time.Second)
	}
	return u, nil
}

// grownStacks names, when a process holds more goroutines after the load than before
// (within the bound or not: a fixed cost is worth knowing by name), the stacks that grew,
// most first, each by its innermost frame that is not the runtime's and its outermost
// frames (what started the goroutine). With the total unchanged nothing is named: a stack
// that grew then replaced one that shrank (a watch re-established by another path).
func grownStacks(proc string, before, after map[string]int) []string {
	const shown, outer = 8, 3
	total := func(m map[string]int) (n int) {
		for _, c := range m {
			n += c
		}
		return n
	}
	if total(after) <= total(before) {
		return nil
	}
	type growth struct {
		stack string
		n     int
	}
	var g []growth
	for stack, n := range after {
		if d := n - before[stack]; d > 0 {
			g = append(g, growth{stack, d})
		}
	}
	slices.SortFunc(g, func(a, b growth) int { return cmp.Or(b.n-a.n, strings.Compare(a.stack, b.stack)) })
	var out []string
	for _, x := range g[:min(len(g), shown)] {
		fs := slices.DeleteFunc(strings.Split(x.stack, " < "), func(f string) bool { return strings.HasPrefix(f, "runtime.") })
		if len(fs) > outer+1 {
			fs = append([]string{fs[0], "…"}, fs[len(fs)-outer:]...)
		}
		out = append(out, fmt.Sprintf("%s +%d %s", proc, x.n, strings.Join(fs, " < ")))
	}
	return out
}

// measured are the processes the soak compares: both gateways and the leading controller.
func measured(s *system) []*devsystem.Process {
	lead, _ := leading(s)
	_, gateways := s.Processes()
	return append(gateways, lead)
}

// The soak: a paced load at 80 % of the measured capacity with network faults (none that
// kills or pauses a controller or gateway) for EXECPLANE_SOAK_DURATION; then each gateway's
// and the leading controller's goroutines, open descriptors and live heap are back within
// 10 % of where they stood before the load, and the run is checked as a chaos run is (every
// history, every sweep, no process left on the node).
func TestSoak(t *testing.T) {
	b := budgetFromEnv(t)
	b.duration, b.agents = time.Minute, soakAgents
	b.deleters = 0 // the fault suite's: each incarnation's Pod and claim would move the figures compared
	if v := os.Getenv(soakEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", soakEnv, err)
		}
		b.duration = d
	}
	sys := startSystem(t, options{gatewayArgs: []string{"--session-idle", sessionIdle.String()}})
	w := newWorkload(sys)
	w.eager = true
	var agents []*agent
	for i := range b.bindings * b.agents {
		agents = append(agents, w.agent(t, i, b.seed, fmt.Sprintf("soak-%d", i%b.bindings)))
	}
	adm := w.admin(t, len(agents), b.seed)
	began := time.Now()

	// Warm up and measure the capacity: the agents unpaced.
	var prepared sync.WaitGroup
	prepared.Add(len(agents))
	start := make(chan struct{})
	go func() { prepared.Wait(); close(start) }()
	load, stopLoad := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(func() { a.loop(load, &prepared, start) })
	}
	select {
	case <-start:
	case <-time.After(2 * time.Minute):
		t.Fatal("the agents never got their environments")
	}
	sleep(t.Context(), warmUp)
	before := len(w.rec.Operations())
	sleep(t.Context(), capacityWindow)
	capacity := float64(len(w.rec.Operations())-before) / capacityWindow.Seconds()
	stopLoad()
	wg.Wait()

	// The baseline, once the warm-up's calls have ended.
	sleep(t.Context(), settle)
	procs := measured(sys)
	if procs[len(procs)-1] == nil {
		t.Fatal("no leading controller to measure")
	}
	baseline := map[*devsystem.Process]usage{}
	stacks := map[*devsystem.Process]map[string]int{}
	for _, p := range procs {
		u, err := measure(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		baseline[p] = u
		if stacks[p], err = p.Goroutines(t.Context()); err != nil {
			t.Fatal(err)
		}
	}

	// The paced load with faults.
	rate := loadShare * capacity
	tokens := make(chan struct{})
	pacer, stopPacer := context.WithCancel(t.Context())
	go func() {
		tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
		defer tick.Stop()
		for {
			select {
			case <-pacer.Done():
				return
			case <-tick.C:
				select {
				case tokens <- struct{}{}:
				default: // the agents are behind: the rate is a ceiling, not a debt
				}
			}
		}
	}()
	w.pace = func(ctx context.Context) {
		select {
		case <-ctx.Done():
		case <-tokens:
		}
	}
	loadStart, soakOps := time.Now(), len(w.rec.Operations())
	load, stopLoad = context.WithTimeout(t.Context(), b.duration)
	defer stopLoad()
	go bounded(load, stopLoad, w.rec, soakOps+b.maxOps)
	immediate := make(chan struct{})
	close(immediate)
	var noPrep sync.WaitGroup
	noPrep.Add(len(agents))
	for _, a := range agents {
		wg.Go(func() { a.loop(load, &noPrep, immediate) })
	}
	wg.Go(func() {
		adm.loop(load, func() map[string]*executionv1.EnvironmentRef { return ensured(agents) })
	})
	sched := newScheduler(sys, b.seed, soakFaults)
	wg.Go(func() { sched.run(load, began) })
	wg.Wait()
	stopPacer()
	achieved := float64(len(w.rec.Operations())-soakOps) / time.Since(loadStart).Seconds()

	// After: the same processes, once the load's calls have ended.
	sys.ready(t, 2*time.Minute)
	sleep(t.Context(), settle)
	var table strings.Builder
	var drift, grown []string
	fmt.Fprintf(&table, "%-12s %-12s %10s %10s\n", "process", "figure", "before", "after")
	for _, p := range procs {
		if p.Exited() != nil {
			drift = append(drift, fmt.Sprintf("%s ended during the soak: nothing to compare", p.Name))
			continue
		}
		after, err := measure(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range resources {
			b, a := baseline[p][r.name], after[r.name]
			scale := 1.0
			if strings.HasSuffix(r.name, "MiB") {
				scale = 1 << 20
			}
			fmt.Fprintf(&table, "%-12s %-12s %10.1f %10.1f\n", p.Name, r.name, b/scale, a/scale)
			// Growth is drift; less after than before is a collection or a connection
			// closed, never a leak (CI on 561ca9e: a controller's heap 7.0 → 5.0 MiB).
			if diff := a - b; diff > max(tolerance*b, r.slack) {
				drift = append(drift, fmt.Sprintf("%s %s: %.1f before, %.1f after", p.Name, r.name, b/scale, a/scale))
			}
		}
		now, err := p.Goroutines(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		grown = append(grown, grownStacks(p.Name, stacks[p], now)...)
	}

	// The capacity again, now that the figures are taken: the machine's other work (make
	// test runs its tiers side by side on two cores) may take a share of it for a while, and
	// a pace set before is judged against what the machine gives after too.
	w.pace = nil
	capacityAfter := unpaced(t.Context(), w, agents)
	judged := min(rate, loadShare*capacityAfter)

	// The histories, the sweeps and the node, as after any chaos run.
	preface := fmt.Sprintf("soak: capacity %.1f ops/s (%d agents unpaced for %s; %.1f after the load), paced at %.0f %% = %.1f ops/s, achieved %.1f ops/s for %s\n%s",
		capacity, len(agents), capacityWindow, capacityAfter, loadShare*100, rate, achieved, b.duration, table.String())
	for _, d := range drift {
		preface += "  resource drift: " + d + "\n"
	}
	for _, g := range grown {
		preface += "  goroutines grown: " + g + "\n"
	}
	finish(t, b, w, agents, sched, time.Since(began), preface).fail(t, b.seed)
	if len(drift) > 0 {
		t.Errorf("seed %d: resources did not come back: %s", b.seed, strings.Join(drift, "; "))
	}
	// The faults cost the load about 40 % of its pace (the soaks of record held 0.57 to 0.62
	// of it for 30 min, docs/benchmarks.md "Soak"; a minute holds 0.5 to 0.6): a third is a
	// load still, and a stall or a broken pacer falls far below.
	if achieved < judged/3 {
		t.Errorf("the soak held %.1f ops/s, under a third of its rate %.1f (%.0f %% of the capacity after the load: %.1f)",
			achieved, rate, loadShare*100, loadShare*capacityAfter)
	}
}

// unpaced runs the agents, which hold their environments, without a pace for
// capacityWindow and returns the operations per second they made.
func unpaced(ctx context.Context, w *workload, agents []*agent) float64 {
	load, stop := context.WithCancel(ctx)
	var wg, prepared sync.WaitGroup
	prepared.Add(len(agents))
	start := make(chan struct{})
	close(start)
	before := len(w.rec.Operations())
	for _, a := range agents {
		wg.Go(func() { a.loop(load, &prepared, start) })
	}
	sleep(ctx, capacityWindow)
	ops := len(w.rec.Operations()) - before
	stop()
	wg.Wait()
	return float64(ops) / capacityWindow.Seconds()
}
