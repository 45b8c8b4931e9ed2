package usage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the recorder's own: how its sampling and its writes go. Usage by client is
// exported apart (ClientMetrics), with bounded labels.
type Metrics struct {
	scrapes    *prometheus.CounterVec
	scrapeTime prometheus.Histogram
	writes     *prometheus.CounterVec
}

// NewMetrics registers the metrics with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		scrapes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_usage_kubelet_scrapes_total",
			Help: "Reads of kubelets' /metrics/resource by the leader's usage recorder, by result (ok, error).",
		}, []string{"result"}),
		scrapeTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "execplane_usage_kubelet_scrape_seconds",
			Help:    "Time to read one kubelet's /metrics/resource.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 12),
		}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_usage_ledger_writes_total",
			Help: "API writes of usage ledgers, by kind (create, update) and result (ok, error).",
		}, []string{"kind", "result"}),
	}
	for _, r := range []string{"ok", "error"} {
		m.scrapes.WithLabelValues(r)
		m.writes.WithLabelValues("create", r)
		m.writes.WithLabelValues("update", r)
	}
	if reg != nil {
		reg.MustRegister(m.scrapes, m.scrapeTime, m.writes)
	}
	return m
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func (m *Metrics) scraped(err error, d time.Duration) {
	m.scrapes.WithLabelValues(result(err)).Inc()
	m.scrapeTime.Observe(d.Seconds())
}

// wrote counts a write; a skipped one (nothing changed) is not called.
func (m *Metrics) wrote(created bool, err error) {
	kind := "update"
	if created {
		kind = "create"
	}
	m.writes.WithLabelValues(kind, result(err)).Inc()
}
