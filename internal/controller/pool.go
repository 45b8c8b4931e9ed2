package controller

import (
	"context"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/logging"
)

// Bounds of the warm pools.
const (
	// poolCreateBurst bounds the pairs one pool pass creates: a pool of thousands fills in
	// steps that leave the API server to environments being ensured meanwhile.
	poolCreateBurst = 50
	// poolCreatedGrace is how long a pair this process created counts as a member before
	// the cache shows it: far longer than a watch event takes, and short enough that a
	// create that never landed is made good soon.
	poolCreatedGrace = 30 * time.Second
	// poolRefillRetry is when a pool pass that could not finish its work runs again.
	poolRefillRetry = time.Second
	// poolAdoptAttempts bounds the pool members one pass tries to claim: each loses only to
	// another claim of the same member, which this process avoids; more means a pool being
	// replaced under us, and the cold path is then the faster answer.
	poolAdoptAttempts = 3
	// poolBindGrace is how long a pooled claim without a provisioner's annotation waits
	// for its volume before its Pod is created anyway: the persistent-volume controller
	// annotates a claim of an immediately binding class within milliseconds, so a claim
	// still without one waits for a consumer (WaitForFirstConsumer) or a static volume.
	poolBindGrace = time.Second
	// pairSuffixBytes is the random part of a pair's name: 40 bits, base32.
	pairSuffixBytes = 5
	// PoolPairPrefix starts every warm pool pair's name; environment objects start with
	// "xenv-", so a pair never shares a name with an environment's claim or Pod.
	PoolPairPrefix = "warm-"
)

// indexPool indexes pool members (Pods and claims) by their pool's profile.
const indexPool = "pool"

func poolIndex(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	if p := m.GetLabels()[executor.LabelPool]; p != "" {
		return []string{p}, nil
	}
	return nil, nil
}

// PoolMetrics are the warm pools' metrics, registered once per process (a reconciler is
// built per leadership term). Labels are profile names: the operator's, bounded.
type PoolMetrics struct {
	members   *prometheus.GaugeVec
	target    *prometheus.GaugeVec
	adoptions *prometheus.CounterVec
	refill    *prometheus.HistogramVec
}

// NewPoolMetrics registers the pool metrics with reg (nil: unregistered).
func NewPoolMetrics(reg prometheus.Registerer) *PoolMetrics {
	m := &PoolMetrics{
		members: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "execplane_controller_pool_members",
			Help: "Warm pool pairs of a profile, by state: ready (adoptable) or starting.",
		}, []string{"profile", "state"}),
		target: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "execplane_controller_pool_target",
			Help: "The warm pool size a profile asks for.",
		}, []string{"profile"}),
		adoptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "execplane_controller_pool_adoptions_total",
			Help: "New environments of a pooled profile: hit (adopted a warm pair) or miss (created cold).",
		}, []string{"profile", "result"}),
		refill: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "execplane_controller_pool_refill_seconds",
			Help:    "From a pool pair's creation until its executor Pod is ready.",
			Buckets: prometheus.ExponentialBuckets(0.25, 2, 10),
		}, []string{"profile"}),
	}
	if reg != nil {
		reg.MustRegister(m.members, m.target, m.adoptions, m.refill)
	}
	return m
}

// pools keeps every profile's warm pool at its size and hands members to new
// environments. A member is a claim and an executor Pod, both named by the pair; the Pod's
// pool label is the lock: a member is claimed by one compare-and-swap on the Pod that
// replaces the pool label by an environment's, so a pair serves at most one environment
// however many passes, workers or replicas race for it.
type pools struct {
	r       *Reconciler
	log     hclog.Logger
	metrics *PoolMetrics
	queue   workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// taken holds pairs claimed by this process that the cache may still show pooled.
	taken map[string]bool
	// claimed remembers, per environment UID, the Pod this process claimed for it, until a
	// status write records it: the cache may not show the relabelled Pod yet.
	claimed map[types.UID]*corev1.Pod
	// cold remembers environments that took the cold path, until their claim is recorded:
	// one whose status write was lost must not adopt a pair beside the claim it created.
	cold map[types.UID]bool
	// readySeen holds the pool Pods whose readiness is counted in the refill histogram.
	readySeen map[types.UID]bool
	// created holds pairs this process created that the cache has not shown yet, with when:
	// counted as members, so that a pass running before the cache catches up does not
	// create the same shortfall twice.
	created map[string]createdPair
}

// createdPair is a pair this process created: its profile and when.
type createdPair struct {
	profile string
	at      time.Time
}

func newPools(r *Reconciler, m *PoolMetrics) *pools {
	if m == nil {
		m = NewPoolMetrics(nil)
	}
	return &pools{
		r: r, log: r.log.Named("pool"), metrics: m,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "warmpools"}),
		taken: map[string]bool{}, claimed: map[types.UID]*corev1.Pod{}, cold: map[types.UID]bool{}, readySeen: map[types.UID]bool{}, created: map[string]createdPair{},
	}
}

// enqueueMember queues the pool of a pooled object (on the old and the new version of an
// update, so that an adoption, which removes the label, refills the pool).
func (pl *pools) enqueueMember(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	if m, err := metaOf(obj); err == nil {
		if p := m.GetLabels()[executor.LabelPool]; p != "" {
			pl.queue.Add(p)
		}
	}
}

// run syncs pools until ctx ends; every configured profile is synced once at the start
// (members of a profile no longer configured are found through their own events).
func (pl *pools) run(ctx context.Context) {
	defer pl.queue.ShutDown()
	for _, name := range pl.r.cfg.Profiles.Names() {
		pl.queue.Add(name)
	}
	go func() {
		for {
			name, quit := pl.queue.Get()
			if quit {
				return
			}
			if err := pl.sync(ctx, name); err != nil {
				if ctx.Err() == nil {
					pl.log.Warn("warm pool pass failed", logging.KeyProfile, name, logging.KeyError, err)
				}
				pl.queue.AddRateLimited(name)
			} else {
				pl.queue.Forget(name)
			}
			pl.queue.Done(name)
		}
	}()
	<-ctx.Done()
}

func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}
