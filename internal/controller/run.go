package controller

import (
	"context"
	"errors"
	"io"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/control"
	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/startup"
	"github.com/execplane/execplane/pkg/apierror"
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

// Run is the controller's entry point: it campaigns for the Lease and, while it leads,
// reconciles environments, serves the control API through the store and reports ready once
// its caches are synced.
// It returns kube.ErrLeadershipLost (exit 1) when leadership is lost, so that a replica
// never keeps acting on authority it no longer holds: the kubelet restarts it as a follower.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	proc, err := startup.Begin(&cfg, args, stdout, stderr)
	if proc == nil {
		return err
	}
	defer proc.Close()
	logger, client, execClient := proc.Logger, proc.Clients.Kube, proc.Clients.Execution
	profiles, err := proc.Profiles.WithExecutorServiceAccount(cfg.ExecutorServiceAccount)
	if err != nil {
		return err
	}
	var ledger atomic.Pointer[store.Store]
	gateways := make([]security.ClientIdentity, 0, len(cfg.GatewayIdentities))
	for _, id := range cfg.GatewayIdentities {
		gateways = append(gateways, security.ClientIdentity(id))
	}
	controlServer, err := control.NewServer(control.Config{Store: ledger.Load, Current: proc.Security.Current, Gateways: gateways, Logger: logger})
	if err != nil {
		return err
	}
	grpcServer, err := newGRPCServer(proc.Security, controlServer, logger)
	if err != nil {
		return err
	}

	var leading, synced atomic.Bool
	proc.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "execplane_controller_leader",
		Help: "1 while this replica holds the leader Lease.",
	}, func() float64 {
		if leading.Load() {
			return 1
		}
		return 0
	}))
	poolMetrics := NewPoolMetrics(proc.Registry)
	election := kube.Election{
		Client: proc.Clients.Lease, Namespace: cfg.Namespace, LeaseName: cfg.LeaseName, Identity: cfg.Identity,
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
	err = proc.Serve(ctx, startup.Serving{
		GRPC: grpcServer, Grace: controlDrain, Log: []any{logging.KeyReplica, cfg.Identity},
		Ready: func() string {
			switch {
			case !proc.Security.Ready():
				return reasonNoMaterial
			case !leading.Load():
				return reasonNotLeader
			case !synced.Load():
				return reasonNotSynced
			}
			return ""
		},
		// The election is the work the servers outlive: on shutdown the Lease is released
		// before the probes and the control API go away.
		Work: func(ctx context.Context) error {
			defer leading.Store(false)
			return kube.RunElection(ctx, election)
		},
	})
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
