package podexec

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/execplane/execplane/internal/session"
)

// Metrics are the session pool's (docs/sessions.md). Their names keep the gateway's prefix:
// they are the gateway's, counted where the sessions are. Labels come from session.Reason,
// a bounded set.
type Metrics struct {
	opened, requests, avoided prometheus.Counter
	closed                    *prometheus.CounterVec
	perSession                prometheus.Histogram
}

// NewMetrics registers the pool's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		opened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "execplane_gateway_sessions_opened_total", Help: "Helper sessions opened (each one pods/exec upgrade).",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_gateway_sessions_closed_total", Help: "Helper sessions closed, by reason (idle, view, pod, drain, violation, broken, silent, stuck, evicted).",
		}, []string{"reason"}),
		requests: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "execplane_gateway_session_requests_total", Help: "Helper requests answered over sessions.",
		}),
		avoided: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "execplane_gateway_exec_upgrades_avoided_total", Help: "Helper requests served over a session already open: pods/exec upgrades not made.",
		}),
		perSession: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "execplane_gateway_session_requests", Help: "Requests answered per session, observed when it closes.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
	}
	reg.MustRegister(m.opened, m.closed, m.requests, m.avoided, m.perSession)
	return m
}

func (m *Metrics) sessionOpened() {
	if m != nil {
		m.opened.Inc()
	}
}

// sessionRequest counts a request answered on a session; all but a session's first avoided
// an exec upgrade (the first paid for the session's).
func (m *Metrics) sessionRequest(first bool) {
	if m != nil {
		m.requests.Inc()
		if !first {
			m.avoided.Inc()
		}
	}
}

func (m *Metrics) sessionClosed(r session.Reason, served uint64) {
	if m != nil {
		m.closed.WithLabelValues(string(r)).Inc()
		m.perSession.Observe(float64(served))
	}
}
