package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/diagnostics"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/session"
	"github.com/execplane/execplane/internal/version"
	"github.com/execplane/execplane/pkg/profile"
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
	if done, err := cli.Load("gateway", &cfg, args, stdout, stderr); done {
		return err
	}
	cfg.Log.Name = "gateway"
	cfg.Log.Output = stderr
	logger, err := logging.New(cfg.Log)
	if err != nil {
		return err
	}
	logging.RouteKlog(logger)
	requests := kube.RequestsCounter("execplane_gateway")
	clients, err := kube.NewClients(kube.ClientOptions{
		Kubeconfig: cfg.Kubeconfig, UserAgent: "execplane-gateway/" + version.Get().Version,
		QPS: float32(cfg.KubeQPS), Burst: cfg.KubeBurst, Requests: requests,
	})
	if err != nil {
		return err
	}
	restCfg, client, execClient := clients.REST, clients.Kube, clients.Execution
	profiles, err := profile.LoadProfiles(cfg.ProfilesFile)
	if err != nil {
		return err
	}
	manager, err := security.NewManager(security.ManagerConfig{
		ManifestPath: cfg.SecurityManifest, Namespace: cfg.Namespace, HighWaterConfigMap: cfg.HighWaterConfigMap,
		Kube: client, Logger: logger, // a reader of the mark: only the controller raises it
	})
	if err != nil {
		return err
	}
	control, closeControl, err := DialControl(cfg.ControllerAddress, ControlFiles{
		CertFile: cfg.ControllerCert, KeyFile: cfg.ControllerKey, CAFile: cfg.ControllerCA, ServerName: cfg.ControllerServerName,
	})
	if err != nil {
		return err
	}
	defer closeControl() //nolint:errcheck // closing on exit
	podExec, err := NewPodExecutor(PodExecutorConfig{HelperPath: cfg.HelperPath}, restCfg, cfg.Executors())
	if err != nil {
		return err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), requests)
	var server *Server
	metrics := NewMetrics(registry, func() security.LimiterStats { return server.Limiter.Stats() })
	envs, err := NewEnvironments(execClient, cfg.Executors(), cfg.FreshnessBound, metrics.ObserveAuthority)
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
	executor := NewSessions(SessionsConfig{
		Disabled: !cfg.Sessions, Idle: cfg.SessionIdle, Max: cfg.MaxSessions,
		Session: session.Config{MaxInFlight: cfg.SessionMaxInFlight}, Logger: logger, Metrics: metrics,
	}, podExec, envs.Get)
	registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "execplane_gateway_sessions_open", Help: "Helper sessions open on this replica.",
	}, func() float64 { return float64(executor.Open()) }))
	handler, err := NewHandler(HandlerConfig{MaxEnvironmentCalls: cfg.MaxEnvironmentCalls, Logger: logger, Metrics: metrics}, Backend{
		Control: control, Environments: envs, Executor: executor, Profiles: profiles, Material: manager.Current,
	})
	if err != nil {
		return err
	}
	server, err = NewServer(ServerConfig{
		Current: manager.Current, MaxConcurrentRPCs: cfg.MaxConcurrentRPCs, MaxClientRPCs: cfg.MaxClientRPCs,
		MaxMessageBytes: cfg.MaxMessageBytes, MaxRPCDeadline: cfg.MaxRPCDeadline, Logger: logger, Metrics: metrics,
	}, handler)
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", cfg.ListenAddress)
	if err != nil {
		return err
	}
	if listener, err = security.HandshakeDeadlineListener(listener, security.HandshakeTimeout); err != nil {
		return err
	}

	ready := func() string {
		switch {
		case !manager.Ready():
			return reasonNoMaterial
		case !envs.Synced():
			return reasonNotSynced
		case envs.Fresh() != nil:
			return reasonStale
		}
		return ""
	}
	diag := diagnostics.New(cfg.DiagnosticsAddress, diagnostics.Checks{Ready: ready, Profiling: cfg.Profiling}, registry)
	// The first server to fail ends the others; ctx ending ends them all, gracefully.
	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return diag.Serve(ctx) })
	g.Go(func() error { manager.Run(ctx); return nil })
	envs.Start(ctx)
	g.Go(func() error { executor.Run(ctx, envs.Changes); return nil })
	g.Go(func() error {
		followReadiness(ctx, server, ready)
		// Drain only once the follower has stopped, so that NOT_SERVING is the last word:
		// balancers stop sending new calls, then in-flight ones get the grace; their
		// sessions close after them.
		server.SetServing(false)
		stop(server.GRPC, cfg.ShutdownGrace)
		executor.Drain()
		return nil
	})
	g.Go(func() error {
		// ErrServerStopped: the drain ran before Serve began, so nothing failed.
		if err := server.GRPC.Serve(listener); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	logger.Info("serving", logging.KeyVersion, version.Get().Version, logging.KeyNamespace, cfg.Namespace, logging.KeyExecutors, cfg.Executors(), logging.KeyAddress, listener.Addr().String())

	err = g.Wait()
	logger.Info("stopped")
	return err
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

// stop drains in-flight calls for at most grace, then cuts what is left.
func stop(s *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.Stop()
	}
}
