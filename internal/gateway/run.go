package gateway

import (
	"context"
	"io"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/execplane/execplane/internal/backlog"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/session"
	"github.com/execplane/execplane/internal/startup"
	"github.com/execplane/execplane/internal/usage"
)

// Readiness reasons: a bounded set, safe for probes.
const (
	reasonNoMaterial = "security material not ready"
	reasonNotSynced  = "environment cache not synced"
	reasonStale      = "environment view not proven current"
)

// healthPeriod is how often the gRPC health status follows readiness.
const healthPeriod = 250 * time.Millisecond

// Run is the gateway's entry point: it serves the public API until ctx ends, then drains.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	proc, err := startup.Begin(&cfg, args, stdout, stderr)
	if proc == nil {
		return err
	}
	defer proc.Close()
	control, closeControl, err := DialControl(cfg.ControllerAddress, ControlFiles{
		CertFile: cfg.ControllerCert, KeyFile: cfg.ControllerKey, CAFile: cfg.ControllerCA, ServerName: cfg.ControllerServerName,
	})
	if err != nil {
		return err
	}
	defer closeControl() //nolint:errcheck // closing on exit
	podExec, err := podexec.NewExec(podexec.ExecConfig{HelperPath: cfg.HelperPath}, proc.Clients.REST, cfg.Executors())
	if err != nil {
		return err
	}

	registry := proc.Registry
	var server *Server
	metrics := NewMetrics(registry, func() security.LimiterStats { return server.Limiter.Stats() })
	envs, err := NewEnvironments(proc.Clients.Execution, cfg.Executors(), cfg.FreshnessBound, metrics.ObserveAuthority)
	if err != nil {
		return err
	}
	registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "execplane_gateway_view_fresh",
			Help: "1 while the environment view is proven current within the freshness bound (grants are honoured), else 0.",
		}, func() float64 {
			if envs.Fresh() == nil {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "execplane_gateway_view_relists_total",
			Help: "Rebuilds of the environment view from a fresh list after it could not be proven current.",
		}, func() float64 { return float64(envs.Relists()) }))
	executor := podexec.NewPool(podexec.PoolConfig{
		Disabled: !cfg.Sessions, Idle: cfg.SessionIdle, Max: cfg.MaxSessions,
		Session: session.Config{MaxInFlight: cfg.SessionMaxInFlight}, Logger: proc.Logger, Metrics: podexec.NewMetrics(registry),
	}, podExec, envs.Get)
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "execplane_gateway_sessions_open", Help: "Helper sessions open on this replica.",
	}, func() float64 { return float64(executor.Open()) }))
	handler, err := NewHandler(HandlerConfig{MaxEnvironmentCalls: cfg.MaxEnvironmentCalls, Logger: proc.Logger, Metrics: metrics}, Backend{
		Control: control, Environments: envs, Executor: executor, Profiles: proc.Profiles, Material: proc.Security.Current,
	})
	if err != nil {
		return err
	}
	revocations := newRevoker(handler, executor.ExecuteOnce)
	envs.OnGrantsRevoked(revocations.Observe)
	counter := newUsageCounter(control, proc.Logger)
	server, err = NewServer(ServerConfig{
		Usage: counter, Current: proc.Security.Current, MaxConcurrentRPCs: cfg.MaxConcurrentRPCs, MaxClientRPCs: cfg.MaxClientRPCs,
		MaxMessageBytes: cfg.MaxMessageBytes, MaxRPCDeadline: cfg.MaxRPCDeadline, Logger: proc.Logger, Metrics: metrics,
		Backlog: backlog.Config{ClientBytes: int64(cfg.MaxClientBacklogBytes), ClientConns: cfg.MaxClientConnections},
	}, handler)
	if err != nil {
		return err
	}
	registerBacklogMetrics(registry, server.Backlog.Stats)

	ready := func() string {
		switch {
		case !proc.Security.Ready():
			return reasonNoMaterial
		case !envs.Synced():
			return reasonNotSynced
		case envs.Fresh() != nil:
			return reasonStale
		}
		return ""
	}
	return proc.Serve(ctx, startup.Serving{
		GRPC: server.GRPC, Ready: ready, Grace: cfg.ShutdownGrace,
		Work: func(ctx context.Context) error {
			envs.Start(ctx)
			var upkeep sync.WaitGroup
			upkeep.Go(func() { executor.Run(ctx, envs.Changes) })
			upkeep.Go(func() { revocations.Run(ctx) })
			upkeep.Go(func() { counter.Run(ctx, usage.ReportInterval) })
			followReadiness(ctx, server, ready)
			upkeep.Wait()
			return nil
		},
		// NOT_SERVING is the last word before the drain: balancers stop sending new calls,
		// then in-flight ones get the grace; their sessions close after them.
		Stopping: func() { server.SetServing(false) },
		Stopped: func() {
			executor.Drain()
			// The calls are over: their counts go to the leader before the process does.
			final, cancel := context.WithTimeout(context.Background(), usageReportTimeout)
			defer cancel()
			counter.Report(final)
		},
	})
}

// followReadiness keeps the gRPC health status equal to readiness.
func followReadiness(ctx context.Context, s *Server, ready func() string) {
	t := time.NewTicker(healthPeriod)
	defer t.Stop()
	for {
		s.SetServing(ready() == "")
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
