package chaos_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/execplane/execplane/internal/dev/history"
	"github.com/execplane/execplane/internal/failpoint"
)

// The negative controls: the workload against builds that break a guarantee (failpoint
// builds asked to through EXECPLANE_BREAK), which the checks must catch — each check's proof
// that it can fail, with the seed to replay (docs/chaos.md, "The checks can fail").

// Shape of a control's run.
const (
	// controlLoad is a control's load, without faults: long enough for claims to change
	// hands, grants of ended claims to be tried, deletes to complete and sessions to end.
	controlLoad = 20 * time.Second
	// lostUpdateLoad is the lost-update control's: a compare-and-swap (or a create-only
	// write) that expects what another agent has since replaced comes only after a claim
	// changed hands — 3 to 24 times in 20 s in the runs seen.
	lostUpdateLoad = 30 * time.Second
	// controlSettle bounds a control's sweeps: without faults the cluster converges within
	// seconds of the load's end (a delete completed, a Pod started), and what a broken build
	// leaves stays however long the sweeps wait.
	controlSettle = 10 * time.Second
)

// broken names the guarantee each kind of process breaks ("" none): the names are the
// constants beside the call sites of failpoint.Breaks.
type broken struct{ controller, gateway, helper string }

// options starts the controllers and gateways asked to break theirs, and has the gateways
// run the helper stand-in that breaks the helper's.
func (b broken) options(t *testing.T) options {
	t.Helper()
	var o options
	if b.controller != "" {
		o.controllerEnv = []string{failpoint.BreakEnv + "=" + b.controller}
	}
	if b.gateway != "" {
		o.gatewayEnv = []string{failpoint.BreakEnv + "=" + b.gateway}
	}
	if b.helper != "" {
		if !slices.Contains(helperBreaks, b.helper) {
			t.Fatalf("no helper stand-in breaks %q (helperBreaks)", b.helper)
		}
		o.helperPath = brokenHelperDir + b.helper
	}
	return o
}

// controlBudget is a control's budget: d of load, no faults, controlSettle for the sweeps.
func controlBudget(t *testing.T, d time.Duration) budget {
	b := budgetFromEnv(t)
	b.duration, b.faults, b.settle = d, false, controlSettle
	return b
}

// verdict is the check named model of o.
func verdict(t *testing.T, o outcome, model string) history.Verdict {
	t.Helper()
	for _, v := range o.verdicts {
		if v.Model == model {
			return v
		}
	}
	t.Fatalf("no %s check in the outcome", model)
	return history.Verdict{}
}

// The checker can fail: controllers whose store clock runs 100 times fast (EXECPLANE_BREAK,
// a failpoint build) let a run take a claim whose holder was told it lasts 30 s more; the
// two holders are caught, with the seed to replay.
func TestChaosCatchesTwoHolders(t *testing.T) {
	b := budgetFromEnv(t)
	b.duration, b.faults = 30*time.Second, false
	o := run(t, b, broken{controller: "store-clock-runs-fast"}.options(t))
	env := o.verdicts[0]
	if env.Model != "environment" || env.Result != porcupine.Illegal {
		t.Fatalf("seed %d: two holders of one claim went unnoticed: %s %s", b.seed, env.Model, env.Result)
	}
	if !strings.Contains(env.Violation, "acquire") {
		t.Errorf("the violation does not name the acquire that broke it:\n%s", env.Violation)
	}
	t.Logf("caught, seed %d:\n%s", b.seed, env.Violation)
}

// The checks can fail, three in one run: gateways that admit the grant of an ended claim as
// the binding's current claim, controllers that complete a Delete without deleting its
// workspace claim, and helpers that leave a process behind at each session's end. Each
// break is another process's and only one check judges what it does — the Grants check
// the data calls, the sweeps the cluster's objects, the node check the executors'
// processes — so each subtest fails without its own break. (A stale grant may fail the
// environment history too: a release with one ends the current claim.)
func TestChaosCatchesBrokenBuilds(t *testing.T) {
	b := controlBudget(t, controlLoad)
	o := run(t, b, broken{
		gateway:    "gateway-admits-stale-grants",
		controller: "controller-skips-workspace-delete",
		helper:     "helper-leaks-process",
	}.options(t))
	t.Run("grant use", func(t *testing.T) {
		v := verdict(t, o, "grants")
		if v.Result != porcupine.Illegal {
			t.Fatalf("seed %d: data calls admitted with the grants of ended claims went unnoticed: grants %s (%d data calls)", b.seed, v.Result, v.Operations)
		}
		t.Logf("caught, seed %d:\n%s", b.seed, v.Violation)
	})
	t.Run("sweeps", func(t *testing.T) {
		left := slices.DeleteFunc(slices.Clone(o.unsettled), func(l string) bool { return !leftClaim(l) })
		if len(left) == 0 {
			t.Fatalf("seed %d: the workspace claims of completed deletes went unnoticed; the sweeps found %d: %q", b.seed, len(o.unsettled), o.unsettled)
		}
		t.Logf("caught, seed %d:\n  %s", b.seed, strings.Join(left, "\n  "))
	})
	t.Run("node processes", func(t *testing.T) {
		if len(o.left) == 0 {
			t.Fatalf("seed %d: the processes the helpers left went unnoticed", b.seed)
		}
		t.Logf("caught, seed %d:\n  %s", b.seed, strings.Join(o.left, "\n  "))
	})
}

// leftClaim reports a sweep's finding of a workspace claim that a delete left: a
// tombstone's, or one of a revision whose delete was answered.
func leftClaim(finding string) bool {
	return strings.Contains(finding, "claim") && (strings.Contains(finding, "resurrected") || strings.Contains(finding, "(deleted: true)"))
}

// The checks can fail: helpers that write every compare-and-swap (on a version, or
// create-only) as an overwrite let an agent replace a write it never saw (it expected an
// earlier one, or none); the file's history, which no order explains, is caught. A run of
// its own: the helper takes one break, and the node check's is the helper's too.
func TestChaosCatchesLostUpdates(t *testing.T) {
	b := controlBudget(t, lostUpdateLoad)
	o := run(t, b, broken{helper: "helper-ignores-cas"}.options(t))
	v := verdict(t, o, "environment")
	if v.Result != porcupine.Illegal || !strings.Contains(v.Violation, "'s file") {
		t.Fatalf("seed %d: compare-and-swaps that replaced what their writers did not expect went unnoticed: environment %s\n%s", b.seed, v.Result, v.Violation)
	}
	t.Logf("caught, seed %d:\n%s", b.seed, v.Violation)
}
