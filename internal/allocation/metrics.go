package allocation

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/execplane/execplane/pkg/apierror"
)

// Metrics count admissions refused and allocation writes.
type Metrics struct {
	refusals *prometheus.CounterVec
	writes   *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_quota_refusals_total",
			Help: "Admissions refused by a quota, by scope (client, owner).",
		}, []string{"scope"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_quota_allocation_writes_total",
			Help: "Compare-and-swap writes of quota allocations, by result (ok, conflict, error).",
		}, []string{"result"}),
	}
	for _, s := range []string{"client", "owner"} {
		m.refusals.WithLabelValues(s)
	}
	for _, r := range []string{"ok", "conflict", "error"} {
		m.writes.WithLabelValues(r)
	}
	if reg != nil {
		reg.MustRegister(m.refusals, m.writes)
	}
	return m
}

func (m *Metrics) refused(scope string, err error) {
	if errors.Is(err, apierror.ErrQuotaExceeded) {
		m.refusals.WithLabelValues(scope).Inc()
	}
}

func (m *Metrics) wrote(err error) {
	switch {
	case err == nil:
		m.writes.WithLabelValues("ok").Inc()
	case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
		m.writes.WithLabelValues("conflict").Inc()
	default:
		m.writes.WithLabelValues("error").Inc()
	}
}
