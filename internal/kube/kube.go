// Package kube wires client-go for the binaries: REST configuration from a kubeconfig or the
// in-cluster environment, leader election on a coordination.k8s.io Lease, and the leader's
// publication of its own address as the only endpoint of a selector-less Service
// (PublishLeaderEndpoint), as kube-apiserver publishes the kubernetes Service's.
//
// Invariants:
//   - Leader election releases the Lease on a clean shutdown (ReleaseOnCancel) so a
//     successor does not wait out the lease, and reports a loss of leadership as
//     ErrLeadershipLost: the caller exits rather than keep acting on stale authority.
//   - The leader's EndpointSlice is written only by the leader, by create or by an update
//     carrying the resourceVersion read (a compare-and-swap), and never deleted by it: a
//     successor overwrites it. Only the slices Kubernetes' own controllers left from when
//     the Service had a selector are deleted, each by its UID.
//   - Client-side rate limits are explicit named constants, never client-go's silent
//     defaults (5 QPS), which would throttle a controller with many environments.
package kube

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	v1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

// Client-side rate limits: generous enough for a reconcile burst over thousands of
// environments, bounded so a bug cannot flood the API server (which also applies its own
// priority and fairness). Operators raise them with flags for very large fleets.
const (
	DefaultQPS   = 50
	DefaultBurst = 100
)

// ClientOptions configures RESTConfig.
type ClientOptions struct {
	// Kubeconfig is a kubeconfig file; empty means the in-cluster environment.
	Kubeconfig string
	UserAgent  string
	// QPS and Burst are the client-side rate limit (DefaultQPS, DefaultBurst when 0).
	QPS   float32
	Burst int
	// Requests, when set, counts every request by HTTP method (a bounded label set), so
	// that API writes are visible as a metric.
	Requests *prometheus.CounterVec
}

// RESTConfig loads the configuration from the kubeconfig, or from the in-cluster
// environment when it is empty.
func RESTConfig(o ClientOptions) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if o.Kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	cfg.QPS, cfg.Burst = DefaultQPS, DefaultBurst
	if o.QPS > 0 {
		cfg.QPS = o.QPS
	}
	if o.Burst > 0 {
		cfg.Burst = o.Burst
	}
	cfg.RateLimiter = newLimiter(cfg.QPS, cfg.Burst)
	cfg.UserAgent = o.UserAgent
	if o.Requests != nil {
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{next: rt, requests: o.Requests} })
	}
	return cfg, nil
}

// limiter is client-go's token bucket whose refusal to wait past the caller's deadline is
// context.DeadlineExceeded (client-go's own is an untyped error, which would reach a
// caller as Internal instead of a retryable deadline).
type limiter struct {
	flowcontrol.RateLimiter
}

func newLimiter(qps float32, burst int) limiter {
	return limiter{flowcontrol.NewTokenBucketRateLimiter(qps, burst)}
}

// Wait waits for a token, or fails at once with context.DeadlineExceeded when the wait
// would outlast ctx.
func (l limiter) Wait(ctx context.Context) error {
	if err := l.RateLimiter.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: client-side rate limit: %v", context.DeadlineExceeded, err)
	}
	return nil
}

// Clients are the typed clients of one REST configuration.
type Clients struct {
	REST      *rest.Config
	Kube      kubernetes.Interface
	Execution versioned.Interface
	// Lease is for leader election only: a clientset with its own client-side rate
	// limiter, so a burst of work queued behind Kube's limiter never delays a renewal past
	// the renew deadline (which would cost the leader its Lease). Its requests are a GET
	// and an UPDATE per retry period.
	Lease kubernetes.Interface
}

// NewClients loads the REST configuration (RESTConfig) and builds the core and the
// ExecutionEnvironment clientsets on it: the wiring every binary needs.
func NewClients(o ClientOptions) (Clients, error) {
	cfg, err := RESTConfig(o)
	if err != nil {
		return Clients{}, err
	}
	c := Clients{REST: cfg}
	if c.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return Clients{}, err
	}
	if c.Execution, err = versioned.NewForConfig(cfg); err != nil {
		return Clients{}, err
	}
	// Kube and Execution share one token bucket; the Lease client has its own.
	lease := rest.CopyConfig(cfg)
	lease.UserAgent += "/leader-election"
	lease.RateLimiter = newLimiter(lease.QPS, lease.Burst)
	if c.Lease, err = kubernetes.NewForConfig(lease); err != nil {
		return Clients{}, err
	}
	return c, nil
}

// RequestsCounter is the counter RESTConfig fills: requests to the API server by method.
func RequestsCounter(prefix string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: prefix + "_kube_requests_total",
		Help: "Requests to the Kubernetes API server by HTTP method (POST, PUT, PATCH and DELETE are writes) and resource.",
	}, []string{"method", "resource"})
}

// methods bounds the label: anything unexpected is counted as OTHER.
var methods = map[string]bool{http.MethodGet: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

type countingTransport struct {
	next     http.RoundTripper
	requests *prometheus.CounterVec
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	m := r.Method
	if !methods[m] {
		m = "OTHER"
	}
	c.requests.WithLabelValues(m, resourceOf(r.URL.Path)).Inc()
	return c.next.RoundTrip(r)
}

// resources bounds the resource label to what the binaries touch; the rest is "other".
var resources = map[string]bool{
	"executionenvironments": true, "pods": true, "persistentvolumeclaims": true, "events": true,
	"leases": true, "configmaps": true, "selfsubjectaccessreviews": true,
	"endpointslices": true, "endpoints": true, "services": true,
}

// resourceOf extracts the resource from an API path: /api/v1/[namespaces/ns/]res/... or
// /apis/group/version/[namespaces/ns/]res/...
func resourceOf(path string) string {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		parts = parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		parts = parts[3:]
	default:
		return "other"
	}
	if len(parts) >= 3 && parts[0] == "namespaces" {
		parts = parts[2:]
	}
	if len(parts) > 0 && resources[parts[0]] {
		return parts[0]
	}
	return "other"
}

// ErrLeadershipLost is returned by RunElection when leadership ended while ctx was live.
var ErrLeadershipLost = errors.New("leadership lost")

// Election configures RunElection.
type Election struct {
	// Client is Clients.Lease: renewals must not queue behind the binary's other requests.
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
	// Heard, if set, is called after every read or write of the Lease that the API server
	// answered: a follower reads it every retry period, the leader renews it as often, so
	// its calls say that the election runs and could take over (may be nil).
	Heard func()
}

// heardLock is a Lease lock that reports every answered request (Election.Heard).
type heardLock struct {
	resourcelock.Interface
	heard func()
}

func (l heardLock) Get(ctx context.Context) (*resourcelock.LeaderElectionRecord, []byte, error) {
	r, raw, err := l.Interface.Get(ctx)
	if err == nil {
		l.heard()
	}
	return r, raw, err
}

func (l heardLock) Create(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Create(ctx, r)
	if err == nil {
		l.heard()
	}
	return err
}

func (l heardLock) Update(ctx context.Context, r resourcelock.LeaderElectionRecord) error {
	err := l.Interface.Update(ctx, r)
	if err == nil {
		l.heard()
	}
	return err
}

// RunElection campaigns for the Lease until ctx ends (returning nil after releasing it) or
// leadership is lost (returning ErrLeadershipLost).
//
// Released on a clean stop (ReleaseOnCancel: the holder is cleared and the duration set to a
// second), the Lease is taken by a follower at its next attempt, at most RetryPeriod ×
// (1 + leaderelection.JitterFactor) later — not a LeaseDuration later, as after a crash.
func RunElection(ctx context.Context, e Election) error {
	var lock resourcelock.Interface = &resourcelock.LeaseLock{
		LeaseMeta:  v1.ObjectMeta{Name: e.LeaseName, Namespace: e.Namespace},
		Client:     e.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.Identity},
	}
	if e.Heard != nil {
		lock = heardLock{Interface: lock, heard: e.Heard}
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
