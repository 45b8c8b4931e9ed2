package controller

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
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
	// pairSuffixBytes is the random part of a pair's name: 40 bits, base32.
	pairSuffixBytes = 5
	// PoolPairPrefix starts every warm pool pair's name; environment objects start with
	// "xenv-", so a pair never shares a name with an environment's claim or Pod.
	PoolPairPrefix = "warm-"
)

// Failpoints of an adoption: after the Pod is claimed, and after the claim is too (both
// before the status write that records them).
const (
	failAfterPoolPodClaim = "after-pool-pod-claim"
	failAfterPoolClaim    = "after-pool-claim"
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

func podReady(pod *corev1.Pod) bool {
	if pod.Status.Phase != corev1.PodRunning || pod.DeletionTimestamp != nil {
		return false
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func podEnded(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded
}

// sync is one pass over a profile's pool: it retires members of another digest, broken
// ones and the surplus, finishes pairs whose Pod is missing, and creates what is lacking.
func (pl *pools) sync(ctx context.Context, name string) error {
	entry, configured := pl.r.cfg.Profiles.Get(name)
	want := 0
	if configured {
		want = int(entry.Spec.PoolSize())
	}
	pods, claims, err := pl.members(name)
	if err != nil {
		return err
	}
	byPair := make(map[string]*corev1.Pod, len(pods))
	for _, pod := range pods {
		byPair[pod.Name] = pod
	}
	current := func(m metav1.Object) bool {
		return configured && m.GetAnnotations()[executor.AnnotationDigest] == entry.Digest
	}
	var keep, starting []*corev1.Pod
	var retire []*corev1.Pod
	var missing []*corev1.PersistentVolumeClaim // claims whose pooled Pod is not in the cache
	hasClaim := make(map[string]bool, len(claims))
	for _, c := range claims {
		hasClaim[c.Name] = true
		pod := byPair[c.Name]
		switch {
		case pod == nil:
			missing = append(missing, c)
		case pod.DeletionTimestamp != nil:
			if err := pl.r.releasePod(ctx, pod); err != nil && !apierrors.IsConflict(err) {
				return err
			}
		case !current(pod) || !current(c) || podEnded(pod) || c.DeletionTimestamp != nil:
			retire = append(retire, pod)
		case podReady(pod) && c.Status.Phase == corev1.ClaimBound:
			keep = append(keep, pod)
			pl.observeReady(name, pod)
		default:
			starting = append(starting, pod)
		}
	}
	for _, pod := range pods {
		if !hasClaim[pod.Name] {
			// Its claim is gone (an adoption takes the Pod first, so a pooled Pod always
			// has a pooled claim): it can never be adopted.
			if pod.DeletionTimestamp != nil {
				if err := pl.r.releasePod(ctx, pod); err != nil && !apierrors.IsConflict(err) {
					return err
				}
				continue
			}
			retire = append(retire, pod)
		}
	}
	// The surplus goes, those still starting first.
	members := append(append([]*corev1.Pod(nil), starting...), keep...)
	ready := len(keep)
	if surplus := len(members) - want; surplus > 0 {
		retire = append(retire, members[:surplus]...)
		members = members[surplus:]
		ready -= max(0, surplus-len(starting))
	}
	for _, pod := range retire {
		if err := pl.retirePod(ctx, pod); err != nil {
			return err
		}
	}
	again := false
	for _, c := range missing {
		done, err := pl.finishOrRetireClaim(ctx, entry, c, current(c) && len(members) < want)
		if err != nil {
			return err
		}
		if done {
			members = append(members, nil) // counted; its Pod is being created
		} else {
			again = true
		}
	}
	inFlight := pl.inFlight(name, hasClaim)
	if len(members)+inFlight < want {
		n := min(want-len(members)-inFlight, poolCreateBurst)
		for range n {
			if err := pl.createPair(ctx, entry); err != nil {
				return err
			}
		}
		again = again || len(members)+inFlight+n < want
	} else if inFlight > 0 {
		again = true // until the cache shows them
	}
	pl.metrics.target.WithLabelValues(name).Set(float64(want))
	pl.metrics.members.WithLabelValues(name, "ready").Set(float64(ready))
	pl.metrics.members.WithLabelValues(name, "starting").Set(float64(len(members) - ready))
	if again {
		pl.queue.AddAfter(name, poolRefillRetry)
	}
	return nil
}

// inFlight counts the pairs created here that the cache does not show yet (seen: the
// pool's claims in the cache), forgetting those it shows and those past the grace.
func (pl *pools) inFlight(profile string, seen map[string]bool) int {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	now, n := pl.r.cfg.Now(), 0
	for pair, c := range pl.created {
		switch {
		case c.profile != profile:
		case seen[pair] || now.Sub(c.at) > poolCreatedGrace:
			delete(pl.created, pair)
		default:
			n++
		}
	}
	return n
}

// members lists a pool's Pods and claims from the caches, leaving out Pods this process
// has claimed (the cache may not show their new labels yet).
func (pl *pools) members(name string) ([]*corev1.Pod, []*corev1.PersistentVolumeClaim, error) {
	podObjs, err := pl.r.podsByEnv.ByIndex(indexPool, name)
	if err != nil {
		return nil, nil, err
	}
	claimObjs, err := pl.r.pvcIndex.ByIndex(indexPool, name)
	if err != nil {
		return nil, nil, err
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	pl.dropTaken(podObjs)
	var pods []*corev1.Pod
	for _, o := range podObjs {
		if pod, ok := o.(*corev1.Pod); ok && pod.Namespace == pl.r.cfg.Namespace && !pl.taken[pod.Name] {
			pods = append(pods, pod)
		}
	}
	var claims []*corev1.PersistentVolumeClaim
	for _, o := range claimObjs {
		if c, ok := o.(*corev1.PersistentVolumeClaim); ok && c.Namespace == pl.r.cfg.Namespace && !pl.taken[c.Name] {
			claims = append(claims, c)
		}
	}
	// Oldest first: they are the likeliest ready, and adoption order is stable.
	slices.SortFunc(pods, func(a, b *corev1.Pod) int { return a.CreationTimestamp.Compare(b.CreationTimestamp.Time) })
	return pods, claims, nil
}

// dropTaken forgets taken pairs that left the pool (adopted or deleted) and that no
// environment waits to record. Called with mu held.
func (pl *pools) dropTaken(pooled []any) {
	if len(pl.taken) == 0 {
		return
	}
	keep := make(map[string]bool, len(pl.claimed))
	for _, pod := range pl.claimed {
		keep[pod.Name] = true
	}
	for _, o := range pooled {
		if m, err := metaOf(o); err == nil {
			keep[m.GetName()] = true
		}
	}
	for name := range pl.taken {
		if !keep[name] {
			delete(pl.taken, name)
		}
	}
}

func (pl *pools) observeReady(name string, pod *corev1.Pod) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pl.readySeen[pod.UID] {
		return
	}
	pl.readySeen[pod.UID] = true
	pl.metrics.refill.WithLabelValues(name).Observe(pl.r.cfg.Now().Sub(pod.CreationTimestamp.Time).Seconds())
}

// retirePod deletes a pooled Pod — exactly the unclaimed version the cache shows, so that
// a Pod claimed meanwhile is never deleted — and its claim goes once the Pod is gone.
func (pl *pools) retirePod(ctx context.Context, pod *corev1.Pod) error {
	uid, rv := pod.UID, pod.ResourceVersion
	err := pl.r.cfg.Kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	pl.mu.Lock()
	delete(pl.readySeen, uid)
	pl.mu.Unlock()
	return nil
}

// finishOrRetireClaim handles a pooled claim whose pooled Pod is not in the cache: the Pod
// was never created (a pass ended between the two creates), was adopted (the cache has its
// new labels, the claim's are on their way), or is gone. With create it creates the Pod
// (AlreadyExists: it is there); otherwise the claim is deleted once a live read shows that
// no Pod of the pair exists. Reports whether the pair still counts as a member.
func (pl *pools) finishOrRetireClaim(ctx context.Context, entry profile.Entry, c *corev1.PersistentVolumeClaim, create bool) (bool, error) {
	pods := pl.r.cfg.Kube.CoreV1().Pods(c.Namespace)
	if create && c.DeletionTimestamp == nil {
		_, pod, err := executor.PoolMember(c.Name, c.Namespace, entry, pl.r.cfg.Profiles.ExecutorServiceAccount())
		if err != nil {
			return false, err
		}
		if _, err := pods.Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		return true, nil
	}
	if _, err := pods.Get(ctx, c.Name, metav1.GetOptions{}); err == nil {
		return false, nil // adopted or still there: never delete a claim a Pod may mount
	} else if !apierrors.IsNotFound(err) {
		return false, err
	}
	if c.DeletionTimestamp != nil {
		return false, nil
	}
	uid, rv := c.UID, c.ResourceVersion
	err := pl.r.cfg.Kube.CoreV1().PersistentVolumeClaims(c.Namespace).Delete(ctx, c.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return false, err
	}
	return false, nil
}

// createPair creates a pool member: the claim, then the Pod that mounts it.
func (pl *pools) createPair(ctx context.Context, entry profile.Entry) error {
	pair, err := pairName(entry.Name)
	if err != nil {
		return err
	}
	claim, pod, err := executor.PoolMember(pair, pl.r.cfg.Namespace, entry, pl.r.cfg.Profiles.ExecutorServiceAccount())
	if err != nil {
		return err
	}
	if _, err := pl.r.cfg.Kube.CoreV1().PersistentVolumeClaims(claim.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		return err
	}
	pl.mu.Lock()
	pl.created[pair] = createdPair{profile: entry.Name, at: pl.r.cfg.Now()}
	pl.mu.Unlock()
	_, err = pl.r.cfg.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	return err
}

// pairName is "warm-<profile>-<random>"; a profile name is a DNS label of at most 63
// bytes, so the name stays a valid Pod and claim name.
func pairName(profile string) (string, error) {
	var b [pairSuffixBytes]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz234567"
	suffix := make([]byte, 0, 8)
	bits, n := uint64(0), 0
	for _, x := range b {
		bits, n = bits<<8|uint64(x), n+8
		for n >= 5 {
			n -= 5
			suffix = append(suffix, alphabet[(bits>>n)&31])
		}
	}
	return PoolPairPrefix + profile + "-" + string(suffix), nil
}

// errPoolEmpty: no ready member could be claimed; the environment is created cold.
var errPoolEmpty = errors.New("the warm pool has no ready member")

// adopt gives a new environment a warm pair: the one an interrupted pass already claimed
// for it, or a ready member claimed now. It returns errPoolEmpty when there is none.
func (pl *pools) adopt(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, entry profile.Entry) (pod *corev1.Pod, claim *corev1.PersistentVolumeClaim, fresh bool, err error) {
	pod, err = pl.claimedFor(env)
	if err != nil {
		return nil, nil, false, err
	}
	fresh = pod == nil
	for attempt := 0; pod == nil && attempt < poolAdoptAttempts; attempt++ {
		candidate := pl.candidate(entry)
		if candidate == nil {
			break
		}
		pod, err = pl.claimPod(ctx, env, candidate)
		if err != nil {
			return nil, nil, false, err
		}
	}
	if pod == nil {
		return nil, nil, false, errPoolEmpty
	}
	failpoint.Inject(failAfterPoolPodClaim)
	claim, err = pl.claimClaim(ctx, env, pod)
	if err != nil {
		return nil, nil, false, err
	}
	failpoint.Inject(failAfterPoolClaim)
	if claim == nil {
		// The pair's claim is gone: this Pod can never serve. Delete exactly it and let
		// it go (it was never recorded, never granted).
		pods := pl.r.cfg.Kube.CoreV1().Pods(pod.Namespace)
		if err := deleteExact(ctx, pods.Delete, pod.Name, pod.UID); err != nil {
			return nil, nil, false, err
		}
		if live, err := pods.Get(ctx, pod.Name, metav1.GetOptions{}); err == nil && live.UID == pod.UID {
			if err := pl.r.releasePod(ctx, live); err != nil && !apierrors.IsConflict(err) {
				return nil, nil, false, err
			}
		} else if err != nil && !apierrors.IsNotFound(err) {
			return nil, nil, false, err
		}
		pl.forget(env.UID)
		return nil, nil, false, errPoolEmpty
	}
	return pod, claim, fresh, nil
}

// claimedFor is the pooled Pod already claimed for env: by this process (remembered), or
// by an earlier one (its labels in the cache, its pair annotation still there).
func (pl *pools) claimedFor(env *executionv1alpha1.ExecutionEnvironment) (*corev1.Pod, error) {
	pl.mu.Lock()
	pod := pl.claimed[env.UID]
	pl.mu.Unlock()
	if pod != nil {
		return pod, nil
	}
	objs, err := pl.r.podsByEnv.ByIndex(indexEnvironment, env.Namespace+"/"+env.Name)
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if p, ok := o.(*corev1.Pod); ok && p.Labels[executor.LabelEnvironmentUID] == string(env.UID) &&
			p.Annotations[executor.AnnotationPoolPair] != "" && p.DeletionTimestamp == nil {
			return p, nil
		}
	}
	return nil, nil
}

// candidate picks the oldest ready member of the profile's current digest that no pass of
// this process has claimed, and marks it taken.
func (pl *pools) candidate(entry profile.Entry) *corev1.Pod {
	pods, claims, err := pl.members(entry.Name)
	if err != nil {
		return nil
	}
	bound := make(map[string]bool, len(claims))
	for _, c := range claims {
		if c.Status.Phase == corev1.ClaimBound && c.DeletionTimestamp == nil && c.Annotations[executor.AnnotationDigest] == entry.Digest {
			bound[c.Name] = true
		}
	}
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for _, pod := range pods {
		if !pl.taken[pod.Name] && bound[pod.Name] && podReady(pod) && pod.Annotations[executor.AnnotationDigest] == entry.Digest {
			pl.taken[pod.Name] = true
			return pod
		}
	}
	return nil
}

// adoptionPatch is a merge patch, conditioned on the pooled version's resourceVersion,
// that replaces the pool label by the environment's labels (and, for a Pod, makes the
// environment its owner).
func adoptionPatch(obj metav1.Object, env *executionv1alpha1.ExecutionEnvironment, owner bool) ([]byte, error) {
	meta := map[string]any{
		"resourceVersion": obj.GetResourceVersion(),
		"labels": map[string]any{
			executor.LabelPool:           nil,
			executor.LabelEnvironment:    env.Name,
			executor.LabelEnvironmentUID: string(env.UID),
		},
	}
	if owner {
		meta["ownerReferences"] = []metav1.OwnerReference{executor.OwnerReference(env)}
	}
	return json.Marshal(map[string]any{"metadata": meta})
}

// claimPod claims a pooled Pod for env by compare-and-swap; nil when another claim (or a
// retirement) changed it first.
func (pl *pools) claimPod(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, pod *corev1.Pod) (*corev1.Pod, error) {
	patch, err := adoptionPatch(pod, env, true)
	if err != nil {
		return nil, err
	}
	claimed, err := pl.r.cfg.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		// Changed first (claimed, or being retired) or a failed request: either way the
		// next pool pass and candidate see it as it now is.
		pl.untake(pod.Name)
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	pl.mu.Lock()
	pl.claimed[env.UID] = claimed
	pl.mu.Unlock()
	return claimed, nil
}

// claimClaim relabels the claimed Pod's claim for env; nil when the claim is gone. Only
// the holder of the pair's Pod relabels its claim, so a conflict is a concurrent status
// change (binding): read it again and retry.
func (pl *pools) claimClaim(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, pod *corev1.Pod) (*corev1.PersistentVolumeClaim, error) {
	client := pl.r.cfg.Kube.CoreV1().PersistentVolumeClaims(pod.Namespace)
	name := pod.Annotations[executor.AnnotationPoolPair]
	c, err := pl.r.pvcs.PersistentVolumeClaims(pod.Namespace).Get(name)
	for range poolAdoptAttempts {
		switch {
		case apierrors.IsNotFound(err):
			c, err = client.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil, nil
			}
			continue
		case err != nil:
			return nil, err
		case c.DeletionTimestamp != nil:
			return nil, nil
		case c.Labels[executor.LabelEnvironmentUID] == string(env.UID) && c.Labels[executor.LabelPool] == "":
			return c, nil // relabelled already
		case c.Labels[executor.LabelPool] == "":
			return nil, fmt.Errorf("pool claim %s belongs to another environment", name)
		}
		patch, perr := adoptionPatch(c, env, false)
		if perr != nil {
			return nil, perr
		}
		var patched *corev1.PersistentVolumeClaim
		patched, err = client.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		if err == nil {
			return patched, nil
		}
		if apierrors.IsConflict(err) {
			c, err = client.Get(ctx, name, metav1.GetOptions{})
		}
	}
	if err == nil {
		err = fmt.Errorf("pool claim %s: relabelling kept conflicting", name)
	}
	return nil, err
}

func (pl *pools) untake(pair string) {
	pl.mu.Lock()
	delete(pl.taken, pair)
	pl.mu.Unlock()
}

// forget drops what this process remembers of env's adoption once its status records the
// pair (or the cold path was taken for good).
func (pl *pools) forget(uid types.UID) {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if pod := pl.claimed[uid]; pod != nil {
		delete(pl.taken, pod.Name)
		delete(pl.readySeen, pod.UID)
		delete(pl.claimed, uid)
	}
	delete(pl.cold, uid)
}

func (pl *pools) markCold(uid types.UID) {
	pl.mu.Lock()
	pl.cold[uid] = true
	pl.mu.Unlock()
}

func (pl *pools) wentCold(uid types.UID) bool {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	return pl.cold[uid]
}

// adoptPooled gives a new environment a warm pair in place of creating one: only before
// anything of its own exists (no claim found, none recorded, never an executor) and not
// after its pass took the cold path. The claimed pair is recorded in this pass's status
// write — the one ledger transition of an adoption; an interrupted adoption is finished
// by the next pass from the relabelled Pod.
func (p *pass) adoptPooled(ctx context.Context, pvcState presence) error {
	pl, uid := p.r.pools, p.env.UID
	if p.persisted.PVC != nil {
		pl.forget(uid) // recorded: nothing left to remember
		return nil
	}
	if pvcState != absent || p.podPresence != absent || p.status.PVC != nil || p.status.Pod != nil ||
		!p.persisted.NeverHadExecutor() || pl.wentCold(uid) {
		return nil
	}
	pod, claim, fresh, err := pl.adopt(ctx, p.env, p.entry)
	if errors.Is(err, errPoolEmpty) {
		pl.markCold(uid)
		if p.entry.Spec.PoolSize() > 0 {
			pl.metrics.adoptions.WithLabelValues(p.entry.Name, "miss").Inc()
		}
		return nil
	}
	if err != nil {
		return err
	}
	p.status.PVC = &executionv1alpha1.ObjectIdentity{Name: claim.Name, UID: claim.UID}
	p.status.Pod = &executionv1alpha1.ObjectIdentity{Name: pod.Name, UID: pod.UID}
	p.o.pvc, p.o.pod, p.podPresence = claim, pod, present
	if fresh {
		pl.metrics.adoptions.WithLabelValues(p.entry.Name, "hit").Inc()
		pl.queue.Add(p.entry.Name) // refill
	}
	p.record(false, EventAdoptedFromPool, "adopted warm executor Pod %s and workspace claim %s", pod.Name, claim.Name)
	return nil
}
