package controller

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/control"
	"github.com/execplane/execplane/internal/diagnostics"
	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/version"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/store"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
)

// Readiness reasons: a bounded set, safe for probes and metric labels.
const (
	reasonNotLeader  = "not leader"
	reasonNotSynced  = "caches not synced"
	reasonNoMaterial = "security material not ready"
)

// Bounds of the control API server. Its only clients are gateways, each holding a few
// connections; the limits stop a misbehaving gateway from starving the others.
const (
	controlGlobalLimit = 1024
	controlClientLimit = 512
	// controlMaxMessage bounds a control request; the largest is an Ensure with identifiers.
	controlMaxMessage = 64 << 10
	// controlDrain bounds graceful shutdown before in-flight calls are cut.
	controlDrain = 5 * time.Second
)

func newGRPCServer(manager *security.Manager, srv controlv1.ControlServiceServer, logger hclog.Logger) (*grpc.Server, error) {
	auth, err := security.NewPeerAuthenticator(manager.Current)
	if err != nil {
		return nil, err
	}
	limiter, err := security.NewRPCLimiter(auth, controlGlobalLimit, controlClientLimit)
	if err != nil {
		return nil, err
	}
	s := grpc.NewServer(
		grpc.Creds(security.NewServerCredentials(manager.Current, nil)),
		grpc.ConnectionTimeout(security.HandshakeTimeout),
		grpc.MaxRecvMsgSize(controlMaxMessage),
		grpc.ChainUnaryInterceptor(limiter.UnaryInterceptor(func(err error) error { return apierror.Status(err, "") }), control.Recovering(logger)),
	)
	controlv1.RegisterControlServiceServer(s, srv)
	return s, nil
}

// stopGRPC drains in-flight calls, then cuts what is left.
func stopGRPC(s *grpc.Server) {
	done := make(chan struct{})
	go func() { s.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(controlDrain):
		s.Stop()
	}
}

// Run is the controller's entry point: it campaigns for the Lease and, while it leads,
// reconciles environments, serves the control API through the store and reports ready once
// its caches are synced.
// It returns kube.ErrLeadershipLost (exit 1) when leadership is lost, so that a replica
// never keeps acting on authority it no longer holds: the kubelet restarts it as a follower.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	if done, err := cli.Load("controller", &cfg, args, stdout, stderr); done {
		return err
	}
	cfg.Log.Name = "controller"
	cfg.Log.Output = stderr
	logger, err := logging.New(cfg.Log)
	if err != nil {
		return err
	}
	logging.RouteKlog(logger)
	requests := kube.RequestsCounter("execplane_controller")
	clients, err := kube.NewClients(kube.ClientOptions{
		Kubeconfig: cfg.Kubeconfig, UserAgent: "execplane-controller/" + version.Get().Version,
		QPS: float32(cfg.KubeQPS), Burst: cfg.KubeBurst, Requests: requests,
	})
	if err != nil {
		return err
	}
	client, execClient := clients.Kube, clients.Execution
	profiles, err := profile.LoadProfiles(cfg.ProfilesFile)
	if err != nil {
		return err
	}
	if profiles, err = profiles.WithExecutorServiceAccount(cfg.ExecutorServiceAccount); err != nil {
		return err
	}

	manager, err := security.NewManager(security.ManagerConfig{
		ManifestPath: cfg.SecurityManifest, Namespace: cfg.Namespace, HighWaterConfigMap: cfg.HighWaterConfigMap, RaiseMark: true,
		Kube: client, Logger: logger,
	})
	if err != nil {
		return err
	}
	var ledger atomic.Pointer[store.Store]
	gateways := make([]security.ClientIdentity, 0, len(cfg.GatewayIdentities))
	for _, id := range cfg.GatewayIdentities {
		gateways = append(gateways, security.ClientIdentity(id))
	}
	controlServer, err := control.NewServer(control.Config{Store: ledger.Load, Current: manager.Current, Gateways: gateways, Logger: logger})
	if err != nil {
		return err
	}
	grpcServer, err := newGRPCServer(manager, controlServer, logger)
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

	var leading, synced atomic.Bool
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	leaderGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "execplane_controller_leader",
		Help: "1 while this replica holds the leader Lease.",
	}, func() float64 {
		if leading.Load() {
			return 1
		}
		return 0
	})
	registry.MustRegister(leaderGauge, requests)
	poolMetrics := NewPoolMetrics(registry)
	diag := diagnostics.New(cfg.DiagnosticsAddress, diagnostics.Checks{Ready: func() string {
		switch {
		case !manager.Ready():
			return reasonNoMaterial
		case !leading.Load():
			return reasonNotLeader
		case !synced.Load():
			return reasonNotSynced
		}
		return ""
	}, Profiling: cfg.Profiling}, registry)
	election := kube.Election{
		Client: clients.Lease, Namespace: cfg.Namespace, LeaseName: cfg.LeaseName, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Lead: func(ctx context.Context) {
			leading.Store(true)
			defer leading.Store(false)
			defer synced.Store(false)
			logger.Info("leading", logging.KeyLeader, cfg.Identity)
			// Only the leader reconciles: a follower never acts on an operation the leader
			// may hold.
			r, err := NewReconciler(ReconcilerConfig{
				Kube: client, Execution: execClient, Namespace: cfg.Executors(), Profiles: profiles,
				ResyncPeriod: cfg.ResyncPeriod, Logger: logger, PoolMetrics: poolMetrics,
			})
			if err == nil {
				err = r.Initialize(ctx)
			}
			if err != nil {
				if ctx.Err() == nil {
					logger.Error("reconciler failed to start", logging.KeyError, err)
				}
				<-ctx.Done()
				return
			}
			st, err := store.New(store.Config{Execution: execClient, Kube: client, Environments: r.Environments(), Namespace: cfg.Executors(),
				Profiles: profiles, Finalizer: EnvironmentFinalizer, Provisioner: r, Now: storeClock()})
			if err != nil {
				logger.Error("store failed to start", logging.KeyError, err)
				<-ctx.Done()
				return
			}
			ledger.Store(st)
			defer ledger.Store(nil)
			synced.Store(true)
			r.Run(ctx, cfg.Workers)
		},
		OnNewLeader: func(identity string) { logger.Info("leader observed", logging.KeyLeader, identity) },
	}
	// The first server to fail ends the election, and the election's end ends the servers:
	// they outlive it so that on shutdown the Lease is released before the probes and the
	// control API go away.
	g, ctx := errgroup.WithContext(ctx)
	serving, stopServing := context.WithCancel(context.WithoutCancel(ctx))
	defer stopServing()
	g.Go(func() error { return diag.Serve(serving) })
	g.Go(func() error { manager.Run(serving); return nil })
	g.Go(func() error {
		// ErrServerStopped: the servers were stopped before Serve began, so nothing failed.
		if err := grpcServer.Serve(listener); !errors.Is(err, grpc.ErrServerStopped) {
			return err
		}
		return nil
	})
	g.Go(func() error {
		<-serving.Done()
		stopGRPC(grpcServer)
		return nil
	})

	logger.Info("starting", logging.KeyVersion, version.Get().Version, logging.KeyNamespace, cfg.Namespace, logging.KeyExecutors, cfg.Executors(), logging.KeyReplica, cfg.Identity)
	g.Go(func() error {
		defer stopServing()
		defer leading.Store(false)
		return kube.RunElection(ctx, election)
	})
	err = g.Wait()
	if errors.Is(err, kube.ErrLeadershipLost) {
		logger.Error("leadership lost: exiting so that a restart rejoins as a follower")
	}
	return err
}

// breakFastStoreClock, in a failpoint build asked to break it (failpoint.Breaks), runs the
// store's clock fastStoreClock times fast: run claims lapse long before the expiry their
// holders were told, and another run takes one that is still held — the fault suite's
// proof that its checker catches two holders (test/chaos).
const (
	breakFastStoreClock = "store-clock-runs-fast"
	fastStoreClock      = 100
)

// storeClock is the store's clock: nil (the wall clock) unless a failpoint build breaks it.
func storeClock() func() time.Time {
	if !failpoint.Breaks(breakFastStoreClock) {
		return nil
	}
	start := time.Now()
	return func() time.Time { return start.Add(time.Since(start) * fastStoreClock) }
}
