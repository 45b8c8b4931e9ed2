package controller

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/dynamic"

	"github.com/execplane/execplane/internal/allocation"
	"github.com/execplane/execplane/internal/control"
	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/startup"
	"github.com/execplane/execplane/internal/usage"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/quota"
	"github.com/execplane/execplane/pkg/store"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
)

// Readiness reasons: a bounded set, safe for probes and metric labels. A replica is ready
// when it can serve or take over: a follower is ready too (docs/controller.md "Readiness").
const (
	reasonNoMaterial   = "security material not ready"
	reasonNoElection   = "lease not reached"
	reasonNotSynced    = "caches not synced"
	reasonNotPublished = "leader endpoint not published"
)

// The replica's state, execplane_controller_replica_state{state}: ready as the leader, ready
// as a follower that could take over, or not ready (/readyz says why).
const (
	stateLeader   = "leader"
	stateStandby  = "standby"
	stateNotReady = "not_ready"
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
	// controlMaxConnectionAge ends every gateway connection this often, gracefully (GOAWAY;
	// the gateway connects again through the Service). Gateways reach the leader through a
	// Service whose only endpoint the leader publishes, and a connection keeps the Pod it was
	// made to: one made to a replica that does not lead (a route that went stale, a Pod IP
	// reused) would answer UNAVAILABLE for as long as it lives. This bounds that.
	controlMaxConnectionAge = 30 * time.Second
	// controlMaxConnectionAgeGrace lets the calls in flight on an ended connection finish:
	// the longest call the leader holds on purpose (an Attach's wait_ready) and a margin for
	// the work around it.
	controlMaxConnectionAgeGrace = store.MaxAttachWait + 15*time.Second
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
		grpc.Creds(security.NewServerCredentials(manager.Current, nil, nil)),
		grpc.ConnectionTimeout(security.HandshakeTimeout),
		grpc.MaxRecvMsgSize(controlMaxMessage),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: controlMaxConnectionAge, MaxConnectionAgeGrace: controlMaxConnectionAgeGrace}),
		grpc.ChainUnaryInterceptor(limiter.UnaryInterceptor(func(err error) error { return apierror.Status(err, "") }), control.Recovering(logger)),
	)
	controlv1.RegisterControlServiceServer(s, srv)
	return s, nil
}

// Run is the controller's entry point: it campaigns for the Lease and, while it leads,
// publishes its own address as the only endpoint of the control API's Service, reconciles
// environments and serves the control API through the store. It is ready when it can serve
// or take over (readiness).
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
	var usages atomic.Pointer[usage.Recorder]
	var allocations atomic.Pointer[allocation.Allocator]
	gateways := make([]security.ClientIdentity, 0, len(cfg.GatewayIdentities))
	for _, id := range cfg.GatewayIdentities {
		gateways = append(gateways, security.ClientIdentity(id))
	}
	controlServer, err := control.NewServer(control.Config{Store: ledger.Load, Usage: usages.Load, Allocations: allocations.Load, Current: proc.Security.Current, Gateways: gateways, Logger: logger})
	if err != nil {
		return err
	}
	grpcServer, err := newGRPCServer(proc.Security, controlServer, logger)
	if err != nil {
		return err
	}

	ready := &readiness{material: proc.Security.Ready, heardWithin: electionHeardWithin(cfg), publishes: cfg.LeaderService != ""}
	ready.register(proc.Registry)
	leading, synced, published := &ready.leading, &ready.synced, &ready.published
	poolMetrics := NewPoolMetrics(proc.Registry)
	endMetrics := NewEndMetrics(proc.Registry)
	usageMetrics := usage.NewMetrics(proc.Registry)
	quotaMetrics := allocation.NewMetrics(proc.Registry)
	usage.NewClientMetrics(proc.Registry, usages.Load, clientNames(proc.Security.Current))
	quotas, err := quota.NewSource(cfg.QuotasFile)
	if err != nil {
		return err
	}
	go quotas.Watch(ctx, quotaReload,
		func() { logger.Info("quotas reloaded") },
		func(err error) {
			logger.Error("quotas file refused: the last good one stays in force", logging.KeyError, err)
		})
	election := kube.Election{
		Client: proc.Clients.Lease, Namespace: cfg.Namespace, LeaseName: cfg.LeaseName, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Heard: ready.heard,
		Lead: func(ctx context.Context) {
			leading.Store(true)
			defer leading.Store(false)
			defer synced.Store(false)
			logger.Info("leading", logging.KeyLeader, cfg.Identity)
			// The leader's endpoint first: the Service routes the gateways to this replica
			// while its caches sync (their calls meanwhile are answered UNAVAILABLE and
			// retried), and it is not ready before the route is.
			var publishing sync.WaitGroup
			defer published.Store(false) // after the publisher's end, below
			defer publishing.Wait()
			if cfg.LeaderService != "" {
				endpoint := kube.LeaderEndpoint{
					Client: client, Namespace: cfg.Namespace, Service: cfg.LeaderService,
					Address: cfg.AdvertiseAddress, PortName: ControlPortName, Port: listenPort(proc),
					Pod: cfg.PodName, Published: published.Store, Logger: logger,
				}
				publishing.Go(func() {
					if err := kube.PublishLeaderEndpoint(ctx, endpoint); err != nil {
						logger.Error("the leader endpoint cannot be published", logging.KeyError, err)
					}
				})
			}
			// Only the leader reconciles: a follower never acts on an operation the leader
			// may hold.
			r, err := NewReconciler(ReconcilerConfig{
				Kube: client, Execution: execClient, Namespace: cfg.Executors(), Profiles: profiles,
				ResyncPeriod: cfg.ResyncPeriod, Logger: logger, PoolMetrics: poolMetrics,
				EndMetrics: endMetrics, TombstoneRetention: cfg.TombstoneRetention,
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
			rec, err := newUsageRecorder(cfg, proc.Clients, r, usageMetrics, logger)
			var alloc *allocation.Allocator
			if err == nil {
				alloc, err = allocation.New(allocation.Config{Execution: execClient, Namespace: cfg.Executors(), Environments: r.Environments(),
					Quotas: quotas, Use: rec.Use, Storage: profileStorage(profiles), MaxCommand: profileMaxCommand(profiles), Logger: logger, Metrics: quotaMetrics})
			}
			if err == nil {
				err = alloc.Start(ctx)
			}
			if err == nil {
				err = rec.Start(ctx) // no usage answered, nor quota judged, before the ledgers are read
			}
			var snaps *Snapshots
			if err == nil {
				var dyn dynamic.Interface
				if dyn, err = dynamic.NewForConfig(proc.Clients.REST); err == nil {
					snaps, err = NewSnapshots(SnapshotsConfig{Kube: client, Execution: execClient, Dynamic: dyn, Namespace: cfg.Executors(),
						Profiles: profiles, Release: alloc.ReleaseSnapshot, Logger: logger})
				}
			}
			if err == nil {
				err = snaps.Initialize(ctx)
			}
			var st *store.Store
			if err == nil {
				st, err = store.New(store.Config{Execution: execClient, Kube: client, Environments: r.Environments(), Namespace: cfg.Executors(),
					Profiles: profiles, Finalizer: EnvironmentFinalizer, Provisioner: r, Now: storeClock(), Admission: alloc})
			}
			if err != nil {
				if ctx.Err() == nil {
					logger.Error("store, usage recorder, quotas or snapshots failed to start", logging.KeyError, err)
				}
				<-ctx.Done()
				return
			}
			var recording sync.WaitGroup
			defer recording.Wait()
			recording.Go(func() {
				if err := rec.Run(ctx); err != nil && ctx.Err() == nil {
					logger.Error("usage recorder stopped", logging.KeyError, err)
				}
			})
			recording.Go(func() { syncAllocations(ctx, alloc, r) })
			recording.Go(func() { snaps.Run(ctx) })
			ledger.Store(st)
			defer ledger.Store(nil)
			usages.Store(rec)
			defer usages.Store(nil)
			allocations.Store(alloc)
			defer allocations.Store(nil)
			synced.Store(true)
			r.Run(ctx, cfg.Workers)
		},
		OnNewLeader: func(identity string) { logger.Info("leader observed", logging.KeyLeader, identity) },
	}
	err = proc.Serve(ctx, startup.Serving{
		GRPC: grpcServer, Grace: controlDrain, Log: []any{logging.KeyReplica, cfg.Identity},
		Ready: ready.reason,
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

// newUsageRecorder builds the leader's usage recorder over the reconciler's caches.
func newUsageRecorder(cfg Config, clients kube.Clients, r *Reconciler, m *usage.Metrics, logger hclog.Logger) (*usage.Recorder, error) {
	rc := usage.RecorderConfig{
		Execution: clients.Execution, Namespace: cfg.Executors(), Environments: r.Environments(), Pods: r.Pods(), Claims: r.Claims(),
		SampleInterval: cfg.UsageSampleInterval, CheckpointInterval: cfg.UsageCheckpointInterval, Retention: cfg.UsageRetention,
		Logger: logger, Metrics: m,
	}
	if cfg.UsageKubelet {
		k, err := usage.NewKubelet(usage.KubeletConfig{Rest: clients.REST, CAFile: cfg.KubeletCAFile, InsecureSkipVerify: cfg.KubeletInsecureSkipVerify})
		if err != nil {
			return nil, err
		}
		rc.Scraper, rc.Node = k, usage.NodeGetter(clients.Kube, time.Now)
	}
	return usage.NewRecorder(rc)
}

// quotaReload is how often the quotas file is read for a change: a ConfigMap's update
// reaches the Pod's volume within a minute anyway.
const quotaReload = 10 * time.Second

// allocationSync is how often allocations are made true to the environments, and time
// quotas with the suspend action acted on.
const allocationSync = 15 * time.Second

// syncAllocations runs the allocations' sync until ctx ends, and has the reconciler suspend
// the environments of scopes over a suspending time quota.
func syncAllocations(ctx context.Context, a *allocation.Allocator, r *Reconciler) {
	t := time.NewTicker(allocationSync)
	defer t.Stop()
	for {
		r.quotaSuspend(a.Sync(ctx))
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// profileStorage is the claim size of a profile's environments.
func profileStorage(profiles *profile.Registry) func(string) int64 {
	return func(name string) int64 {
		e, ok := profiles.Get(name)
		if !ok || e.Spec.StorageSize == nil {
			return 0
		}
		return e.Spec.StorageSize.Value()
	}
}

// clientNames names a client hash by the identity the security policy lists ("" when it
// lists none of that hash): the bounded label of the usage metrics.
func clientNames(current func() (*security.Bundle, bool)) func(string) string {
	return func(hash string) string {
		b, ok := current()
		if !ok || b == nil {
			return ""
		}
		for _, id := range b.Policies().Identities() {
			if ident.ClientHash(string(id)) == hash {
				return string(id)
			}
		}
		return ""
	}
}

// profileMaxCommand is the longest a profile's detached command runs.
func profileMaxCommand(profiles *profile.Registry) func(string) time.Duration {
	return func(name string) time.Duration {
		p, ok := profiles.Profile(name)
		if !ok {
			return 0
		}
		return p.Commands.MaxDuration
	}
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
