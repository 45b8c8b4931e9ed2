// Package kube wires client-go for the binaries: REST configuration from a kubeconfig or the
// in-cluster environment, and leader election on a coordination.k8s.io Lease.
//
// Invariants:
//   - Leader election releases the Lease on a clean shutdown (ReleaseOnCancel) so a
//     successor does not wait out the lease, and reports a loss of leadership as
//     ErrLeadershipLost: the caller exits rather than keep acting on stale authority.
//   - Client-side rate limits are explicit named constants, never client-go's silent
//     defaults (5 QPS), which would throttle a controller with many environments.
package kube

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// Client-side rate limits: generous enough for a reconcile burst over thousands of
// environments, bounded so a bug cannot flood the API server (which also applies its own
// priority and fairness).
const (
	clientQPS   = 50
	clientBurst = 100
)

// RESTConfig loads the configuration from kubeconfig, or from the in-cluster environment
// when kubeconfig is empty.
func RESTConfig(kubeconfig, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = clientQPS, clientBurst
	cfg.UserAgent = userAgent
	return cfg, nil
}

// ErrLeadershipLost is returned by RunElection when leadership ended while ctx was live.
var ErrLeadershipLost = errors.New("leadership lost")

// Election configures RunElection.
type Election struct {
	Client    kubernetes.Interface
	Namespace string
	LeaseName string
	Identity  string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go's leaderelection.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Lead runs while this replica leads; its context ends when leadership ends.
	Lead func(ctx context.Context)
	// OnNewLeader is told the identity of every new leader (may be nil).
	OnNewLeader func(identity string)
}

// RunElection campaigns for the Lease until ctx ends (returning nil after releasing it) or
// leadership is lost (returning ErrLeadershipLost).
func RunElection(ctx context.Context, e Election) error {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  v1.ObjectMeta{Name: e.LeaseName, Namespace: e.Namespace},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	var led atomic.Bool
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		LeaseDuration:   e.LeaseDuration,
		RenewDeadline:   e.RenewDeadline,
		RetryPeriod:     e.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            e.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				led.Store(true)
				e.Lead(ctx)
			},
			OnStoppedLeading: func() {},
			OnNewLeader: func(identity string) {
				if e.OnNewLeader != nil {
					e.OnNewLeader(identity)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("leader election: %w", err)
	}
	le.Run(ctx) // returns when ctx ends or leadership is lost
	if ctx.Err() == nil && led.Load() {
		return ErrLeadershipLost
	}
	return nil
}
