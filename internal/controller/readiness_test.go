package controller

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A replica is ready when it can serve or take over: a follower with current material that
// reached the Lease lately is ready (standby); the leader is ready once its caches are synced
// and its endpoint is published. Every other case says why not.
func TestReadinessIsServeOrTakeOver(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	cfg := DefaultConfig()
	within := electionHeardWithin(cfg)
	cases := []struct {
		name                                  string
		material                              bool
		heardAgo                              time.Duration // < 0: never
		leading, synced, publishes, published bool
		wantReason, wantState                 string
	}{
		{name: "standby", material: true, heardAgo: time.Second, wantState: stateStandby},
		{name: "standby, Lease read just within the bound", material: true, heardAgo: within, wantState: stateStandby},
		{name: "standby cut off from the Lease", material: true, heardAgo: within + time.Millisecond, wantReason: reasonNoElection, wantState: stateNotReady},
		{name: "election not started", material: true, heardAgo: -1, wantReason: reasonNoElection, wantState: stateNotReady},
		{name: "no security material", heardAgo: time.Second, wantReason: reasonNoMaterial, wantState: stateNotReady},
		{name: "leader syncing", material: true, heardAgo: time.Second, leading: true, publishes: true, published: true, wantReason: reasonNotSynced, wantState: stateNotReady},
		{name: "leader endpoint not published", material: true, heardAgo: time.Second, leading: true, synced: true, publishes: true, wantReason: reasonNotPublished, wantState: stateNotReady},
		{name: "leader", material: true, heardAgo: time.Second, leading: true, synced: true, publishes: true, published: true, wantState: stateLeader},
		{name: "leader that publishes nothing (no --leader-service)", material: true, heardAgo: time.Second, leading: true, synced: true, wantState: stateLeader},
		{name: "leader without material", heardAgo: time.Second, leading: true, synced: true, wantReason: reasonNoMaterial, wantState: stateNotReady},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clock := now
			r := &readiness{material: func() bool { return tc.material }, heardWithin: within, publishes: tc.publishes, now: func() time.Time { return clock }}
			if tc.heardAgo >= 0 {
				clock = now.Add(-tc.heardAgo)
				r.heard()
				clock = now
			}
			r.leading.Store(tc.leading)
			r.synced.Store(tc.synced)
			r.published.Store(tc.published)
			if got := r.reason(); got != tc.wantReason {
				t.Errorf("reason %q, want %q", got, tc.wantReason)
			}
			if got := r.state(); got != tc.wantState {
				t.Errorf("state %q, want %q", got, tc.wantState)
			}
		})
	}
}

// The bound outlasts a follower's slowest jittered retry with the chart's timings.
func TestElectionHeardWithinOutlastsAJitteredRetry(t *testing.T) {
	cfg := DefaultConfig()
	if got, slowest := electionHeardWithin(cfg), time.Duration((1+leaseJitter)*float64(cfg.RetryPeriod)); got <= slowest {
		t.Fatalf("%s does not outlast a jittered retry of %s", got, slowest)
	}
}

// The state is a metric with one series per state, exactly one of them 1.
func TestReplicaStateMetric(t *testing.T) {
	r := &readiness{material: func() bool { return true }, heardWithin: time.Minute}
	r.heard()
	reg := prometheus.NewRegistry()
	r.register(reg)
	want := `
# HELP execplane_controller_replica_state 1 for this replica's state: ready as the leader, ready as a standby that can take over, or not ready (/readyz says why).
# TYPE execplane_controller_replica_state gauge
execplane_controller_replica_state{state="leader"} 0
execplane_controller_replica_state{state="not_ready"} 0
execplane_controller_replica_state{state="standby"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "execplane_controller_replica_state"); err != nil {
		t.Error(err)
	}
	r.leading.Store(true)
	r.synced.Store(true)
	want = `
# HELP execplane_controller_leader 1 while this replica holds the leader Lease.
# TYPE execplane_controller_leader gauge
execplane_controller_leader 1
# HELP execplane_controller_replica_state 1 for this replica's state: ready as the leader, ready as a standby that can take over, or not ready (/readyz says why).
# TYPE execplane_controller_replica_state gauge
execplane_controller_replica_state{state="leader"} 1
execplane_controller_replica_state{state="not_ready"} 0
execplane_controller_replica_state{state="standby"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "execplane_controller_leader", "execplane_controller_replica_state"); err != nil {
		t.Error(err)
	}
}
