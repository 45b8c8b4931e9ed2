package e2b

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/reflect/protoreflect"

	filesystem "github.com/execplane/execplane/proto/envd/filesystem"
	process "github.com/execplane/execplane/proto/envd/process"
)

// metrics are the front end's own: its requests by route and answer, how long they took,
// the sandboxes a replica holds open, the requests refused at a key's bound. Labels come
// from bounded sets only: the mux's patterns and envd's procedures, HTTP status codes.
type metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	refused  prometheus.Counter
}

// procedures are envd's RPCs by path: a route label only ever names one of them.
var procedures = func() map[string]bool {
	out := map[string]bool{}
	for _, fd := range []protoreflect.FileDescriptor{process.File_envd_process_process_proto, filesystem.File_envd_filesystem_filesystem_proto} {
		for i := range fd.Services().Len() {
			svc := fd.Services().Get(i)
			for j := range svc.Methods().Len() {
				out["/"+string(svc.FullName())+"/"+string(svc.Methods().Get(j).Name())] = true
			}
		}
	}
	return out
}()

func newMetrics(reg prometheus.Registerer, open func() int) *metrics {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_e2b_requests_total",
			Help: "Requests to the E2B front end by route (the control API's path pattern or envd's procedure) and HTTP status.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "execplane_e2b_request_duration_seconds",
			Help:    "How long the E2B front end's requests took, by route (streams: their whole life).",
			Buckets: prometheus.ExponentialBuckets(0.005, 2.5, 12),
		}, []string{"route"}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "execplane_e2b_tenant_refusals_total",
			Help: "Requests refused because their API key had --max-tenant-requests in flight on this replica.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.duration, m.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "execplane_e2b_sandboxes_open",
			Help: "Sandboxes this replica holds open (attached, their run joined or about to be).",
		}, func() float64 { return float64(open()) }))
	}
	return m
}

// route is a request's label: the envd procedure it names, or the pattern that served it.
func route(r *http.Request) string {
	if procedures[r.URL.Path] {
		return r.URL.Path
	}
	if r.Pattern != "" {
		return r.Pattern
	}
	return "other"
}

// observe wraps h with the request metrics.
func (m *metrics) observe(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		code := rec.status
		if code == 0 {
			code = http.StatusOK
		}
		rt := route(r)
		m.requests.WithLabelValues(rt, strconv.Itoa(code)).Inc()
		m.duration.WithLabelValues(rt).Observe(time.Since(start).Seconds())
	})
}

// statusRecorder keeps the status written; it flushes and unwraps as the writer it wraps,
// so streams (Connect's) flush as they would.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
