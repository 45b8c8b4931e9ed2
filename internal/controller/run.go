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
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
)

// Readiness reasons: a bounded set, safe for probes and metric labels.
const (
	reasonNotLeader = "not leader"
)

// Run is the controller's entry point: it campaigns for the Lease and, while it leads,
// reports ready and runs the leader's work. Reconciliation and the control API are
// delivered by the controller and store issues; leadership, health and metrics are here.
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

	var leading atomic.Bool
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
		if !leading.Load() {
			return reasonNotLeader
		}
		return ""
	}}, registry)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	diagErr := make(chan error, 1)
	go func() { diagErr <- diag.Serve(ctx) }()

	logger.Info("starting", logging.KeyVersion, version.Get().Version, logging.KeyNamespace, cfg.Namespace, "identity", cfg.Identity)
	err = kube.RunElection(ctx, kube.Election{
		Client: client, Namespace: cfg.Namespace, LeaseName: cfg.LeaseName, Identity: cfg.Identity,
		LeaseDuration: cfg.LeaseDuration, RenewDeadline: cfg.RenewDeadline, RetryPeriod: cfg.RetryPeriod,
		Lead: func(ctx context.Context) {
			leading.Store(true)
			logger.Info("leading", logging.KeyLeader, cfg.Identity)
			<-ctx.Done()
			leading.Store(false)
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
