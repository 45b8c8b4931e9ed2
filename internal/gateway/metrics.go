package gateway

import (
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execplane/execplane/internal/backlog"
	"github.com/execplane/execplane/internal/security"
)

// Metrics are the gateway's Prometheus metrics. Every label comes from a bounded set: the
// service's method names (anything else is "unknown"), gRPC codes, ErrorInfo reasons and the
// security package's handshake reasons.
type Metrics struct {
	rpcs          *prometheus.CounterVec
	duration      *prometheus.HistogramVec
	refusals      *prometheus.CounterVec
	handshakes    *prometheus.CounterVec
	observation   prometheus.Histogram
	executorCalls *prometheus.CounterVec
	revocations   *prometheus.CounterVec
	revoked       prometheus.Counter
}

// methods are the RPC names used as labels; anything else is "unknown".
var methods = map[string]bool{}

func init() {
	for _, m := range []string{"ValidateProfile", "EnsureEnvironment", "AttachEnvironment", "ReleaseReference", "Files", "StartCommand",
		"CommandStatus", "CancelCommand", "AcquireRun", "RenewRun", "ReleaseRun", "ReserveSuccessor", "CommitReference", "AbortReference",
		"PrepareReferenceDelete", "ConfirmReferenceDelete", "CancelReferenceDelete", "ListReferenceIntents", "RetireEnvironment",
		"ReplaceExecutor", "RevokeEnvironment", "RecoverEnvironment", "MigrateEnvironment", "DeleteRetiredEnvironment",
		"WriteFileStream", "ReadFileStream", "RunCommand", "WatchCommand", "ListCommands", "Terminal", "SuspendEnvironment", "ResumeEnvironment", "DeleteEnvironment", "SetEnvironmentRetention", "SetEnvironmentDeadline", "ListEnvironments",
		"GetUsage", "ListUsage", "CreateSnapshot", "GetSnapshot", "ListSnapshots", "DeleteSnapshot",
		"Check", "Watch", "List", "ServerReflectionInfo"} {
		methods[m] = true
	}
}

// methodLabel is the bounded label of a full gRPC method name.
func methodLabel(full string) string {
	m := full[strings.LastIndexByte(full, '/')+1:]
	if methods[m] {
		return m
	}
	return "unknown"
}

// NewMetrics registers the gateway's metrics with reg, plus gauges over the limiter.
func NewMetrics(reg prometheus.Registerer, limiter func() security.LimiterStats) *Metrics {
	m := &Metrics{
		rpcs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_gateway_rpcs_total", Help: "RPCs answered, by method and gRPC code.",
		}, []string{"method", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "execplane_gateway_rpc_duration_seconds", Help: "RPC latency, by method.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}, []string{"method"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_gateway_refusals_total", Help: "RPCs refused, by method and ErrorInfo reason (security refusals included).",
		}, []string{"method", "reason"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_gateway_handshake_rejections_total", Help: "TLS handshakes rejected, by reason.",
		}, []string{"reason"}),
		observation: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "execplane_gateway_authority_observation_seconds",
			Help: "Delay between an environment's epoch or grant generation being raised (revocation, new run claim, " +
				"replacement) and this gateway observing it; from then on it refuses the older grants.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, .75, 1, 2.5, 5, 10},
		}),
		executorCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_gateway_executor_calls_total", Help: "Helper invocations through pods/exec, by outcome.",
		}, []string{"outcome"}),
	}
	m.revocations = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "execplane_gateway_command_revocations_total",
		Help: "Revocations of an environment's durable commands this replica asked its executor for, by outcome (ok, failed, skipped: no executor or profile).",
	}, []string{"outcome"})
	m.revoked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "execplane_gateway_commands_revoked_total",
		Help: "Durable commands a revocation this replica asked for ended (signalled, and recorded ended or killed after their grace).",
	})
	reg.MustRegister(m.rpcs, m.duration, m.refusals, m.handshakes, m.observation, m.executorCalls, m.revocations, m.revoked)
	if limiter != nil {
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "execplane_gateway_inflight_rpcs", Help: "RPCs admitted and still running.",
		}, func() float64 { return float64(limiter().InFlight) }))
	}
	return m
}

// registerBacklogMetrics registers the clients' backlog figures (internal/backlog): what
// unread answers hold, per replica and for the heaviest client, read once per scrape.
func registerBacklogMetrics(reg prometheus.Registerer, stats func() backlog.Stats) {
	reg.MustRegister(backlogCollector{stats})
}

var (
	backlogBytes = prometheus.NewDesc("execplane_gateway_backlog_bytes",
		"Answer bytes held for clients: reserved for answers being fetched plus answers not yet written to their connections.", nil, nil)
	backlogMaxClient = prometheus.NewDesc("execplane_gateway_backlog_max_client_bytes",
		"The backlog of the client holding most (bounded by --max-client-backlog-bytes, plus answers counted as they arrive).", nil, nil)
	backlogConns = prometheus.NewDesc("execplane_gateway_client_connections", "Authenticated client connections open.", nil, nil)
	backlogWaits = prometheus.NewDesc("execplane_gateway_backlog_waits_total",
		"Calls that waited because their client's backlog was full (it is slow to read its answers).", nil, nil)
	backlogRefusals = prometheus.NewDesc("execplane_gateway_backlog_refusals_total",
		"Calls refused (RESOURCE_EXHAUSTED, retryable) because their client's backlog stayed full, or too many of its calls waited.", nil, nil)
	backlogConnRefusals = prometheus.NewDesc("execplane_gateway_connection_refusals_total",
		"Connections refused at the handshake because their client had --max-client-connections open.", nil, nil)
	backlogInconsistencies = prometheus.NewDesc("execplane_gateway_backlog_inconsistencies_total",
		"Releases of more backlog than was held: a bug of the accounting (clamped); report it.", nil, nil)
)

// backlogCollector reports one snapshot of the ledger per scrape.
type backlogCollector struct{ stats func() backlog.Stats }

func (backlogCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{backlogBytes, backlogMaxClient, backlogConns, backlogWaits, backlogRefusals, backlogConnRefusals, backlogInconsistencies} {
		ch <- d
	}
}

func (c backlogCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(backlogBytes, prometheus.GaugeValue, float64(s.Bytes))
	ch <- prometheus.MustNewConstMetric(backlogMaxClient, prometheus.GaugeValue, float64(s.MaxClientBytes))
	ch <- prometheus.MustNewConstMetric(backlogConns, prometheus.GaugeValue, float64(s.Conns))
	ch <- prometheus.MustNewConstMetric(backlogWaits, prometheus.CounterValue, float64(s.Waits))
	ch <- prometheus.MustNewConstMetric(backlogRefusals, prometheus.CounterValue, float64(s.RefusedWaits))
	ch <- prometheus.MustNewConstMetric(backlogConnRefusals, prometheus.CounterValue, float64(s.RefusedConns))
	ch <- prometheus.MustNewConstMetric(backlogInconsistencies, prometheus.CounterValue, float64(s.Inconsistencies))
}

// ObserveAuthority records one authority-change observation delay.
func (m *Metrics) ObserveAuthority(d time.Duration) {
	if m != nil {
		m.observation.Observe(d.Seconds())
	}
}

// HandshakeRejected counts a rejected TLS handshake.
func (m *Metrics) HandshakeRejected(r security.Reason) {
	if m != nil {
		m.handshakes.WithLabelValues(string(r)).Inc()
	}
}

func (m *Metrics) rpc(method, code, reason string, d time.Duration) {
	if m == nil {
		return
	}
	m.rpcs.WithLabelValues(method, code).Inc()
	m.duration.WithLabelValues(method).Observe(d.Seconds())
	if reason != "" {
		m.refusals.WithLabelValues(method, reason).Inc()
	}
}

// Executor outcomes (label values).
const (
	outcomeOK       = "ok"
	outcomeRefused  = "refused"
	outcomeProtocol = "protocol_violation"
	outcomeUnknown  = "outcome_unknown"
	outcomeError    = "error"
)

// revocation counts one revocation of an environment's commands and what it ended.
func (m *Metrics) revocation(outcome string, ended int) {
	if m != nil {
		m.revocations.WithLabelValues(outcome).Inc()
		m.revoked.Add(float64(ended))
	}
}

func (m *Metrics) executor(outcome string) {
	if m != nil {
		m.executorCalls.WithLabelValues(outcome).Inc()
	}
}
