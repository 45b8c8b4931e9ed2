package controller

import (
	"net"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execplane/execplane/internal/startup"
)

// ControlPortName is the name of the control API's port on the Service whose endpoint the
// leader publishes (the chart's controller Service): the published endpoint serves that port.
const ControlPortName = "control"

// readiness is what a replica reports on /readyz and in execplane_controller_replica_state.
// A replica is ready when it can serve or take over, so that a rollout (which waits for a new
// Pod to be ready) and a PodDisruptionBudget (which counts ready Pods) see a follower as the
// working spare it is; gateways reach the leader through the endpoint it publishes, not by
// readiness. Every replica needs current security material and an election that reached the
// Lease lately; the leader also needs its caches synced and its endpoint published.
type readiness struct {
	// material reports whether the security material is valid and current.
	material func() bool
	// heardWithin is how recent the last answered Lease request must be
	// (electionHeardWithin).
	heardWithin time.Duration
	// publishes: the leader publishes its endpoint (--leader-service), and is ready only once
	// it is published.
	publishes bool
	// now is the clock (time.Now when nil).
	now func() time.Time

	lastHeard                  atomic.Int64 // Unix nanoseconds of the last answered Lease request
	leading, synced, published atomic.Bool
}

// electionHeardWithin is how long a replica stays ready after the API server last answered a
// Lease request: a follower reads the Lease every retry period, up to (1 + jitter) times it
// apart, and the leader renews it every retry period. One lease duration more than that and
// the replica could not have taken over a Lease that lapsed meanwhile.
func electionHeardWithin(cfg Config) time.Duration {
	return cfg.LeaseDuration + time.Duration((1+leaseJitter)*float64(cfg.RetryPeriod))
}

func (r *readiness) clock() time.Time {
	if r.now != nil {
		return r.now()
	}
	return time.Now()
}

// heard records an answered Lease request (kube.Election.Heard).
func (r *readiness) heard() { r.lastHeard.Store(r.clock().UnixNano()) }

// reason is "" when ready, otherwise why not (a bounded set: the /readyz body).
func (r *readiness) reason() string {
	last := r.lastHeard.Load()
	switch {
	case !r.material():
		return reasonNoMaterial
	case last == 0 || r.clock().Sub(time.Unix(0, last)) > r.heardWithin:
		return reasonNoElection
	case !r.leading.Load():
		return "" // a follower that can take over
	case !r.synced.Load():
		return reasonNotSynced
	case r.publishes && !r.published.Load():
		return reasonNotPublished
	}
	return ""
}

// state is the replica's state: stateLeader, stateStandby or stateNotReady.
func (r *readiness) state() string {
	leading := r.leading.Load()
	switch {
	case r.reason() != "":
		return stateNotReady
	case leading:
		return stateLeader
	}
	return stateStandby
}

// register adds execplane_controller_leader and execplane_controller_replica_state to reg.
func (r *readiness) register(reg prometheus.Registerer) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "execplane_controller_leader",
		Help: "1 while this replica holds the leader Lease.",
	}, func() float64 { return one(r.leading.Load()) }))
	for _, s := range []string{stateLeader, stateStandby, stateNotReady} {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "execplane_controller_replica_state",
			Help:        "1 for this replica's state: ready as the leader, ready as a standby that can take over, or not ready (/readyz says why).",
			ConstLabels: prometheus.Labels{"state": s},
		}, func() float64 { return one(r.state() == s) }))
	}
}

func one(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// listenPort is the port the process's control API listens on: the published endpoint's.
func listenPort(proc *startup.Process) int32 {
	if a, ok := proc.Listener.Addr().(*net.TCPAddr); ok {
		return int32(a.Port)
	}
	return 0 // refused by the publication's validation
}
