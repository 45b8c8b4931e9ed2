package chaos_test

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/history"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// The run's knobs, from the environment (make chaos sets them).
const (
	seedEnv     = "EXECPLANE_CHAOS_SEED"     // replays a run: its faults and its clients' choices
	durationEnv = "EXECPLANE_CHAOS_DURATION" // how long the clients and faults run (default 75s)
	opsEnv      = "EXECPLANE_CHAOS_OPS"      // the most operations a run records (default 100000)
	reportEnv   = "EXECPLANE_CHAOS_REPORT"   // a file the report is appended to
)

// staleBound is how long after a claim ended another gateway may still admit it: the
// gateways' view freshness bound, and a second for the watch that carries the change.
const staleBound = viewFreshnessBound + time.Second

// budget is one run's shape.
// shortRun is make test's run: long enough for a round of every fault class (13 classes:
// about 26 s of gaps, 36 s of faults held, the API server's restarts) with room.
const shortRun = 100 * time.Second

type budget struct {
	seed     uint64
	duration time.Duration
	bindings int
	agents   int // per binding
	// deleters is how many bindings of their own end their environments again and again
	// (deleter_test.go), each driven by one client.
	deleters int
	faults   bool
	// maxOps ends the run early once that many operations were recorded.
	maxOps int
	// settle bounds the sweeps' wait for the cluster to converge after the run: two resync
	// periods when 0.
	settle time.Duration
}

func budgetFromEnv(t *testing.T) budget {
	t.Helper()
	b := budget{seed: uint64(time.Now().UnixNano()), duration: shortRun, bindings: 3, agents: 3, deleters: 2, faults: true, maxOps: 100000}
	if v := os.Getenv(opsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			t.Fatalf("%s: %q is not a positive count", opsEnv, v)
		}
		b.maxOps = n
	}
	if v := os.Getenv(seedEnv); v != "" {
		seed, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", seedEnv, err)
		}
		b.seed = seed
	}
	if v := os.Getenv(durationEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("%s: %v", durationEnv, err)
		}
		b.duration = d
	}
	return b
}

// outcome is what a run found.
type outcome struct {
	verdicts   []history.Verdict
	unsettled  []string // what the sweeps still found after two resync periods
	left       []string // processes left on the node
	wrong      []string // answers no model covers that broke a promise
	usage      []string // usage ledgers whose windows do not sum to their totals
	operations int
	written    map[string]int // successful writes by binding
	sched      *scheduler
	report     string
}

// run drives one system, shaped by o, through b and checks it.
func run(t *testing.T, b budget, o options) outcome {
	t.Helper()
	sys := startSystem(t, o)
	w := newWorkload(sys)
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), b.duration)
	defer cancel()
	go bounded(ctx, cancel, w.rec, b.maxOps)
	var agents []*agent
	for i := range b.bindings * b.agents {
		agents = append(agents, w.agent(t, i, b.seed, fmt.Sprintf("chaos-%d", i%b.bindings)))
	}
	adm := w.admin(t, len(agents), b.seed)
	var wg, prepared sync.WaitGroup
	for i := range b.deleters {
		d := w.deleter(t, len(agents)+1+i, b.seed, fmt.Sprintf("chaos-delete-%d", i))
		wg.Go(func() { d.loop(ctx) })
	}
	start := make(chan struct{})
	prepared.Add(len(agents))
	for _, a := range agents {
		wg.Go(func() { a.loop(ctx, &prepared, start) })
	}
	go func() { prepared.Wait(); close(start) }()
	wg.Go(func() {
		adm.loop(ctx, func() map[string]*executionv1.EnvironmentRef {
			return ensured(agents)
		})
	})
	sched := newScheduler(sys, b.seed, faults)
	if b.faults {
		wg.Go(func() { sched.run(ctx, began) })
	}
	wg.Wait()
	elapsed := time.Since(began)

	// After the last fault healed: the system recovers, and the run is checked.
	sys.ready(t, 2*time.Minute)
	return finish(t, b, w, agents, sched, elapsed, "")
}

// finish checks a run whose system is ready again: the agents' pending references are
// published, every history is saved and checked, the sweeps are polled until they hold,
// the system stops and the node is searched for processes left. The report — preface,
// then the run's — is logged and appended to the report file.
func finish(t *testing.T, b budget, w *workload, agents []*agent, sched *scheduler, elapsed time.Duration, preface string) outcome {
	t.Helper()
	sys := w.sys
	commit, stop := context.WithTimeout(t.Context(), 30*time.Second)
	for _, a := range agents {
		for a.env != nil && a.uncommitted && commit.Err() == nil {
			a.commit(commit)
		}
	}
	for _, d := range w.deleters {
		d.settle(commit)
	}
	stop()
	var o outcome
	ops := w.rec.Operations()
	o.operations = len(ops)
	if err := history.Save(ops, filepath.Join(sys.dir, "history.json")); err != nil {
		t.Error(err)
	}
	o.verdicts = history.Check(ops, staleBound, sys.dir)
	deleted := w.deletedRevisions()
	// An Ensure left without an answer when the load ended may have created an environment
	// whose reference is pending: the agent reconciles it from the intents feed, as a platform
	// does, before each sweep (the feed is the leader's cache, polled); only after an Ensure
	// whose outcome is unknown, and never a reference whose commit was answered.
	reconcile := func() {
		for _, a := range agents {
			if a.unknown {
				w.commitIntents(t.Context(), a.api[0], a.binding)
			}
		}
		for _, d := range w.deleters {
			d.reconcile(t.Context())
		}
	}
	if !clustertest.Poll(cmp.Or(b.settle, 2*resyncPeriod), func() bool {
		reconcile()
		o.unsettled = sys.sweep(t.Context(), deleted)
		return len(o.unsettled) == 0
	}) {
		o.unsettled = sys.sweep(t.Context(), deleted)
	}
	o.usage = usageProblems(t, sys)
	sys.halt()
	sys.Stop() // the gateways end their helper sessions: nothing of the executors may remain
	if !clustertest.Poll(10*time.Second, func() bool { o.left = sys.leftProcesses(); return len(o.left) == 0 }) {
		o.left = sys.leftProcesses()
	}
	w.mu.Lock()
	o.wrong = append([]string(nil), w.wrong...)
	stats := maps.Clone(w.stats)
	o.written = maps.Clone(w.written)
	w.mu.Unlock()
	o.sched = sched
	o.report = preface + report(b, elapsed, o, stats, sched, sys)
	t.Log("\n" + o.report)
	if path := os.Getenv(reportEnv); path != "" {
		if f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
			fmt.Fprintf(f, "%s\n%s\n", t.Name(), o.report)
			f.Close()
		}
	}
	return o
}

// fail reports every check of o that did not hold.
func (o outcome) fail(t *testing.T, seed uint64) {
	t.Helper()
	for _, v := range o.verdicts {
		if v.Result != porcupine.Ok {
			t.Errorf("seed %d: the %s history is %s", seed, v.Model, v.Result)
		}
	}
	if len(o.unsettled)+len(o.left)+len(o.wrong)+len(o.usage) > 0 {
		t.Errorf("seed %d: %d unsettled, %d processes left, %d wrong answers, %d wrong usage ledgers: %v", seed, len(o.unsettled), len(o.left), len(o.wrong), len(o.usage), o.usage)
	}
}

// bounded ends a run (cancel) once rec holds maxOps operations.
func bounded(ctx context.Context, cancel context.CancelFunc, rec *history.Recorder, maxOps int) {
	for ctx.Err() == nil {
		if rec.Len() >= maxOps {
			cancel()
			return
		}
		sleep(ctx, 100*time.Millisecond)
	}
}

// ensured is every binding's environment as its agents know it.
func ensured(agents []*agent) map[string]*executionv1.EnvironmentRef {
	refs := map[string]*executionv1.EnvironmentRef{}
	for _, a := range agents {
		if env := a.envRef(); env != nil {
			refs[a.binding] = env
		}
	}
	return refs
}

func report(b budget, elapsed time.Duration, o outcome, stats map[string]int, sched *scheduler, sys *system) string {
	var r strings.Builder
	fmt.Fprintf(&r, "chaos: seed %d (replay: %s=%d), %s of %d agents on %d bindings, %d deleters and an administrator\n",
		b.seed, seedEnv, b.seed, elapsed.Round(time.Second), b.bindings*b.agents, b.bindings, b.deleters)
	fmt.Fprintf(&r, "operations: %d —", o.operations)
	for _, k := range slices.Sorted(maps.Keys(stats)) {
		fmt.Fprintf(&r, " %s %d;", k, stats[k])
	}
	sched.mu.Lock()
	total := 0
	for _, n := range sched.injected {
		total += n
	}
	fmt.Fprintf(&r, "\nwrites by binding:")
	for _, k := range slices.Sorted(maps.Keys(o.written)) {
		fmt.Fprintf(&r, " %s %d;", k, o.written[k])
	}
	fmt.Fprintf(&r, "\nfaults injected: %d in %d rounds —", total, sched.rounds)
	for _, k := range slices.Sorted(maps.Keys(sched.injected)) {
		fmt.Fprintf(&r, " %s %d;", k, sched.injected[k])
	}
	if len(sched.errs) > 0 {
		fmt.Fprintf(&r, " (%d could not be injected: %s)", len(sched.errs), strings.Join(sched.errs, "; "))
	}
	sched.mu.Unlock()
	if tl := sched.timeline(); tl != "" {
		fmt.Fprintf(&r, "\nfault timeline: %s", tl)
	}
	sys.mu.Lock()
	fmt.Fprintf(&r, "\nrestarts: %v\n", sys.restarts)
	for _, e := range sys.exits {
		fmt.Fprintf(&r, "  %s\n", e)
	}
	sys.mu.Unlock()
	violations := 0
	for _, v := range o.verdicts {
		fmt.Fprintf(&r, "check %s: %d operations, %s\n", v.Model, v.Operations, v.Result)
		if v.Result != porcupine.Ok {
			violations++
			fmt.Fprintf(&r, "%s(visualization: %s)\n", v.Violation, v.Visualization)
		}
	}
	fmt.Fprintf(&r, "check sweeps (objects, references, readiness): %d unsettled\n", len(o.unsettled))
	fmt.Fprintf(&r, "check node processes: %d left\n", len(o.left))
	fmt.Fprintf(&r, "check answers (commands, reads, deletes): %d wrong\n", len(o.wrong))
	fmt.Fprintf(&r, "check usage ledgers (windows sum to totals): %d wrong\n", len(o.usage))
	violations += len(o.unsettled) + len(o.left) + len(o.wrong)
	for _, l := range slices.Concat(o.unsettled, o.left, o.wrong) {
		fmt.Fprintf(&r, "  %s\n", l)
	}
	fmt.Fprintf(&r, "violations: %d\n", violations)
	return r.String()
}

// The system under faults: every history checks, every sweep settles, nothing is left.
func TestChaos(t *testing.T) {
	b := budgetFromEnv(t)
	o := run(t, b, options{})
	o.fail(t, b.seed)
	// The run must have exercised what it checks: operations, files written on every
	// binding, and every class of fault injected.
	if o.operations < 100*b.bindings {
		t.Errorf("seed %d: only %d operations", b.seed, o.operations)
	}
	for i := range b.bindings {
		if binding := fmt.Sprintf("chaos-%d", i); o.written[binding] == 0 {
			t.Errorf("seed %d: binding %s wrote no file: its histories check nothing of the data path", b.seed, binding)
		}
	}
	if missing := o.sched.missing(); len(missing) > 0 {
		t.Errorf("seed %d: %d fault classes never injected in %s (%d rounds): %s", b.seed, len(missing), b.duration, o.sched.completed(), strings.Join(missing, "; "))
	}
}
