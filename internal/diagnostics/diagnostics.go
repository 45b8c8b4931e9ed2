// Package diagnostics serves a binary's health and metrics endpoints: /livez, /readyz and
// /metrics on a plain-HTTP, cluster-internal port, and Go's runtime profiles under
// /debug/pprof/ when the operator turns them on.
//
// Invariants:
//   - /readyz answers 200 "ok" or 503 with a reason from a bounded set chosen by the caller
//     (never free-form error text, which could carry details that do not belong in a probe).
//   - Nothing here touches security material, grants or file contents. Profiles are off by
//     default: a profile names code and sizes, never values, but a CPU or trace profile
//     costs the process while it runs, and the port has no authentication.
package diagnostics

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server timeouts: probes and scrapes are small; a slow client must not hold a connection.
const (
	readHeaderTimeout = 5 * time.Second
	writeTimeout      = 30 * time.Second
	shutdownTimeout   = 5 * time.Second
)

// Checks are the probes. Ready returns "" when ready, or a short reason from a fixed set.
type Checks struct {
	Ready func() (reason string)
	// Profiling serves net/http/pprof's handlers under /debug/pprof/.
	Profiling bool
}

// Server is the diagnostics HTTP server.
type Server struct {
	srv *http.Server
}

// New builds a server on addr exposing the checks and registry's metrics.
func New(addr string, checks Checks, registry *prometheus.Registry) *Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if reason := checks.Ready(); reason != "" {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(reason))
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry}))
	if checks.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return &Server{srv: &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: readHeaderTimeout, WriteTimeout: writeTimeout}}
}

// Serve listens and serves until ctx ends, then shuts down gracefully.
func (s *Server) Serve(ctx context.Context) error {
	l, err := net.Listen("tcp", s.srv.Addr)
	if err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
		defer cancel()
		_ = s.srv.Shutdown(sctx)
	}()
	if err := s.srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
