package usage

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Metrics are the recorder's own: how its sampling and its writes go. Usage by client is
// exported apart (ClientMetrics), with bounded labels.
type Metrics struct {
	scrapes    *prometheus.CounterVec
	scrapeTime prometheus.Histogram
	writes     *prometheus.CounterVec
	rounds     prometheus.Counter
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
		rounds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "execplane_usage_checkpoints_total",
			Help: "Checkpoints the leader's usage recorder ran (each writes only the ledgers that changed; a failed listing retries at the next).",
		}),
	}
	for _, r := range []string{"ok", "error"} {
		m.scrapes.WithLabelValues(r)
		m.writes.WithLabelValues("create", r)
		m.writes.WithLabelValues("update", r)
	}
	if reg != nil {
		reg.MustRegister(m.scrapes, m.scrapeTime, m.writes, m.rounds)
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

// checkpointed counts a checkpoint run.
func (m *Metrics) checkpointed() { m.rounds.Inc() }

// wrote counts a write; a skipped one (nothing changed) is not called.
func (m *Metrics) wrote(created bool, err error) {
	kind := "update"
	if created {
		kind = "create"
	}
	m.writes.WithLabelValues(kind, result(err)).Inc()
}

// ClientMetrics exports the ledgers' totals by client: the leader's written ledgers, summed
// per client on each scrape (a follower exports none). The label is the client's identity
// from the security policy — a bounded set the operator configures — or "other" for a
// client no longer in it; nothing per environment, binding or owner. A ledger removed after
// the retention lowers a sum, which rate() reads as a counter reset.
type ClientMetrics struct {
	// Recorder returns the leader's recorder, nil on a follower.
	Recorder func() *Recorder
	// Client names a client hash ("" when unknown: "other").
	Client func(hash string) string
	descs  map[string]*prometheus.Desc
}

// clientSeries are ClientMetrics' families: name, help, the counters' value in its unit.
var clientSeries = []struct {
	name, help string
	value      func(c *executionv1alpha1.UsageCounters) float64
}{
	{"execplane_usage_cpu_seconds_total", "CPU time of the client's executor containers.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.CPUNanoseconds) / 1e9 }},
	{"execplane_usage_memory_gib_seconds_total", "Working set of the client's executor containers integrated over time.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.MemoryKiBSeconds) / (1 << 20) }},
	{"execplane_usage_storage_gib_seconds_total", "Requested workspace storage of the client's environments integrated over time.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.StorageKiBSeconds) / (1 << 20) }},
	{"execplane_usage_ready_seconds_total", "Time the client's environments were ready.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.ReadyMilliseconds) / 1e3 }},
	{"execplane_usage_commands_total", "Commands the client's environments started through the API.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.Commands) }},
	{"execplane_usage_bytes_in_total", "Bytes into the client's environments through the API.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.BytesIn) }},
	{"execplane_usage_bytes_out_total", "Bytes out of the client's environments through the API.", func(c *executionv1alpha1.UsageCounters) float64 { return float64(c.BytesOut) }},
}

// NewClientMetrics registers them with reg.
func NewClientMetrics(reg prometheus.Registerer, recorder func() *Recorder, client func(hash string) string) *ClientMetrics {
	m := &ClientMetrics{Recorder: recorder, Client: client, descs: map[string]*prometheus.Desc{}}
	for _, s := range clientSeries {
		m.descs[s.name] = prometheus.NewDesc(s.name, s.help+" From the usage ledgers (docs/usage.md).", []string{"client"}, nil)
	}
	if reg != nil {
		reg.MustRegister(m)
	}
	return m
}

// Describe implements prometheus.Collector.
func (m *ClientMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range m.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *ClientMetrics) Collect(ch chan<- prometheus.Metric) {
	r := m.Recorder()
	if r == nil {
		return
	}
	ledgers, err := r.Ledgers()
	if err != nil {
		return
	}
	sums := map[string]*executionv1alpha1.UsageCounters{}
	for _, u := range ledgers {
		name := m.Client(u.Spec.ClientHash)
		if name == "" {
			name = "other"
		}
		c := sums[name]
		if c == nil {
			c = &executionv1alpha1.UsageCounters{}
			sums[name] = c
		}
		AddCounters(c, u.Status.Totals)
	}
	for name, c := range sums {
		for _, s := range clientSeries {
			ch <- prometheus.MustNewConstMetric(m.descs[s.name], prometheus.CounterValue, s.value(c), name)
		}
	}
}
