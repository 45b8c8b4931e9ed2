package controller

import (
	"context"
	"errors"
	"io"
	"sync/atomic"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/diagnostics"
	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/version"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
)

// Readiness reasons: a bounded set, safe for probes and metric labels.
const (
	reasonNotLeader = "not leader"
	reasonNotSynced = "caches not synced"
)

// Run is the controller's entry point: it campaigns for the Lease and, while it leads,
// reconciles environments and reports ready once its caches are synced. The control API is
// delivered by the store issue.
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
	restCfg, err := kube.RESTConfig(cfg.Kubeconfig, "execplane-controller/"+version.Get().Version)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	execClient, err := versioned.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	profiles, err := profile.LoadProfiles(cfg.ProfilesFile)
	if err != nil {
		return err
	}
	if profiles, err = profiles.WithExecutorServiceAccount(cfg.ExecutorServiceAccount); err != nil {
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
	registry.MustRegister(leaderGauge)
	diag := diagnostics.New(cfg.DiagnosticsAddress, diagnostics.Checks{Ready: func() string {
		switch {
		case !leading.Load():
			return reasonNotLeader
		case !synced.Load():
			return reasonNotSynced
		}
		return ""
	}}, registry)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	diagErr := make(chan error, 1)
	go func() { diagErr <- diag.Serve(ctx) }()

	logger.Info("starting", logging.KeyVersion, version.Get().Version, logging.KeyNamespace, cfg.Namespace, logging.KeyReplica, cfg.Identity)
	err = kube.RunElection(ctx, kube.Election{
		Client: client, Namespace: cfg.Namespace, LeaseName: cfg.LeaseName, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Lead: func(ctx context.Context) {
			leading.Store(true)
			defer leading.Store(false)
			defer synced.Store(false)
			logger.Info("leading", logging.KeyLeader, cfg.Identity)
			// Only the leader reconciles: a follower never acts on an operation the leader
			// may hold.
			r, err := NewReconciler(ReconcilerConfig{
				Kube: client, Execution: execClient, Namespace: cfg.Namespace, Profiles: profiles,
				ResyncPeriod: cfg.ResyncPeriod, Logger: logger,
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
			synced.Store(true)
			r.Run(ctx, cfg.Workers)
		},
		OnNewLeader: func(identity string) { logger.Info("leader observed", logging.KeyLeader, identity) },
	})
	leading.Store(false)
	cancel()
	if dErr := <-diagErr; dErr != nil && err == nil {
		err = dErr
	}
	if errors.Is(err, kube.ErrLeadershipLost) {
		logger.Error("leadership lost: exiting so that a restart rejoins as a follower")
	}
	return err
}
