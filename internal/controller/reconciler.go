package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/keyed"
	"github.com/execplane/execplane/pkg/profile"
)

// Fence reasons recorded in status.
const (
	fenceWorkspaceVanished = "the recorded workspace claim vanished; it is never recreated silently"
	fenceExecutorVanished  = "the recorded executor Pod vanished before its termination was observed"
)

// Backoff of a pass that lost its status write's compare-and-swap, per environment.
const (
	conflictBackoffBase = 20 * time.Millisecond
	conflictBackoffMax  = 5 * time.Second
)

// Failpoint before a pass's status write (used with the stop action to hold a stale view).
const failBeforeStatusWrite = "before-status-write"

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	Kube      kubernetes.Interface
	Execution versioned.Interface
	Namespace string
	Profiles  *profile.Registry
	// ResyncPeriod is the informers' resync; 0 disables it.
	ResyncPeriod time.Duration
	Logger       hclog.Logger
	Now          func() time.Time
	// PoolMetrics receives the warm pools' metrics; nil: unregistered ones.
	PoolMetrics *PoolMetrics
	// EndMetrics counts environments ended by the profiles' time limits; nil: unregistered.
	EndMetrics *EndMetrics
	// TombstoneRetention is how long a deleted environment's tombstone is kept; 0: the
	// default (an hour).
	TombstoneRetention time.Duration
}

// Reconciler drives each ExecutionEnvironment's workspace claim and executor Pod towards its
// spec and writes its status — one compare-and-swap per pass, skipped when nothing changed.
type Reconciler struct {
	cfg  ReconcilerConfig
	log  hclog.Logger
	envs execlisters.ExecutionEnvironmentLister
	pods corelisters.PodLister
	// podIndex indexes Pods by namespace/environment label, so that finding an
	// environment's Pods costs its own Pods, not the namespace's, and by pool.
	podIndex cache.Indexer
	pvcs     corelisters.PersistentVolumeClaimLister
	// pvcIndex indexes claims by pool.
	pvcIndex cache.Indexer
	pools    *pools
	queue    workqueue.TypedRateLimitingInterface[string]
	// conflicts is the per-key backoff of passes that lost a status write's CAS.
	conflicts workqueue.TypedRateLimiter[string]
	synced    []cache.InformerSynced
	start     func(<-chan struct{})
	ready     atomic.Bool
	managed   labels.Selector
	// recorder writes Events; set by Initialize.
	recorder record.EventRecorder
	// written maps a key to the resourceVersion its last successful write was based on.
	// While the cache still shows that version it is stale by our own write: the pass is
	// skipped, and the update event of that write brings the key back.
	written sync.Map
	// keys admits one pass per environment at a time: a worker's, or the store's (Provision).
	keys keyed.Mutex
	// unrecorded holds the claims and Pods ("pvc/ns/name", "pod/ns/name") this process
	// created for a starting environment that the cache does not show yet: a later pass
	// that misses one in the cache reads it live instead of creating it again (a quiet start
	// records neither until Ready, see quiet.go).
	unrecorded sync.Map
	// quota are the environments a time quota suspends (quota.go).
	quota quotaSuspensions
}

// NewReconciler builds the informers and the queue; Initialize starts them.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	if cfg.Kube == nil || cfg.Execution == nil || cfg.Namespace == "" || cfg.Profiles == nil {
		return nil, errors.New("reconciler: Kube, Execution, Namespace and Profiles are required")
	}
	if cfg.Profiles.ExecutorServiceAccount() == "" {
		return nil, errors.New("reconciler: the profiles registry carries no executor ServiceAccount")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.EndMetrics == nil {
		cfg.EndMetrics = NewEndMetrics(nil)
	}
	if cfg.TombstoneRetention <= 0 {
		cfg.TombstoneRetention = defaultTombstoneRetention
	}
	managed := labels.SelectorFromSet(labels.Set{executor.LabelManagedBy: "execplane-controller"})
	execFactory := execinformers.NewSharedInformerFactoryWithOptions(cfg.Execution, cfg.ResyncPeriod, execinformers.WithNamespace(cfg.Namespace),
		execinformers.WithTransform(slim))
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, cfg.ResyncPeriod, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managed.String() }), informers.WithTransform(slim))
	envInf := execFactory.Execution().V1alpha1().ExecutionEnvironments()
	podInf := kubeFactory.Core().V1().Pods()
	pvcInf := kubeFactory.Core().V1().PersistentVolumeClaims()
	r := &Reconciler{
		cfg: cfg, log: cfg.Logger.Named("reconciler"), managed: managed,
		envs: envInf.Lister(), pods: podInf.Lister(), pvcs: pvcInf.Lister(), podIndex: podInf.Informer().GetIndexer(), pvcIndex: pvcInf.Informer().GetIndexer(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "executionenvironments"}),
		conflicts: workqueue.NewTypedItemExponentialFailureRateLimiter[string](conflictBackoffBase, conflictBackoffMax),
		synced:    []cache.InformerSynced{envInf.Informer().HasSynced, podInf.Informer().HasSynced, pvcInf.Informer().HasSynced},
		start:     func(stop <-chan struct{}) { execFactory.Start(stop); kubeFactory.Start(stop) },
	}
	r.pools = newPools(r, cfg.PoolMetrics)
	if err := podInf.Informer().AddIndexers(cache.Indexers{indexEnvironment: environmentIndex, indexPool: poolIndex}); err != nil {
		return nil, err
	}
	if err := pvcInf.Informer().AddIndexers(cache.Indexers{indexPool: poolIndex}); err != nil {
		return nil, err
	}
	enqueueEnv := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			r.queue.Add(key)
		}
	}
	enqueueOwner := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if m, err := metaOf(obj); err == nil {
			if env := m.GetLabels()[executor.LabelEnvironment]; env != "" {
				r.queue.Add(m.GetNamespace() + "/" + env)
			}
		}
	}
	handlers := func(f func(any)) cache.ResourceEventHandlerFuncs {
		return cache.ResourceEventHandlerFuncs{AddFunc: f, UpdateFunc: func(_, n any) { f(n) }, DeleteFunc: f}
	}
	// Pool members: the old version too, so that an adoption (which removes the pool
	// label) refills its pool.
	poolHandlers := cache.ResourceEventHandlerFuncs{AddFunc: r.pools.enqueueMember, DeleteFunc: r.pools.enqueueMember,
		UpdateFunc: func(o, n any) { r.pools.enqueueMember(o); r.pools.enqueueMember(n) }}
	for _, add := range []func() error{
		func() error { _, err := envInf.Informer().AddEventHandler(handlers(enqueueEnv)); return err },
		func() error { _, err := podInf.Informer().AddEventHandler(handlers(enqueueOwner)); return err },
		func() error { _, err := pvcInf.Informer().AddEventHandler(handlers(enqueueOwner)); return err },
		func() error { _, err := podInf.Informer().AddEventHandler(poolHandlers); return err },
		func() error { _, err := pvcInf.Informer().AddEventHandler(poolHandlers); return err },
	} {
		if err := add(); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// indexEnvironment is the Pod index by "namespace/environment label".
const indexEnvironment = "environment"

func environmentIndex(obj any) ([]string, error) {
	m, err := metaOf(obj)
	if err != nil {
		return nil, err
	}
	if env := m.GetLabels()[executor.LabelEnvironment]; env != "" {
		return []string{m.GetNamespace() + "/" + env}, nil
	}
	return nil, nil
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("not an object: %T", obj)
	}
	return m, nil
}

// Initialize starts the informers and waits for their caches; only then is the reconciler
// ready, so that no decision is taken on a partial view.
func (r *Reconciler) Initialize(ctx context.Context) error {
	recorder, stop, err := newRecorder(ctx, r.cfg.Kube)
	if err != nil {
		return err
	}
	r.recorder = recorder
	context.AfterFunc(ctx, stop)
	r.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return errors.New("reconciler: caches did not sync")
	}
	r.ready.Store(true)
	return nil
}

// Environments is the reconciler's environment cache (the store counts and lists from it).
func (r *Reconciler) Environments() execlisters.ExecutionEnvironmentLister { return r.envs }

// Pods and Claims list the executor Pods and workspace claims (slimmed, transform.go).
func (r *Reconciler) Pods() corelisters.PodLister { return r.pods }

// Claims lists the workspace claims.
func (r *Reconciler) Claims() corelisters.PersistentVolumeClaimLister { return r.pvcs }

// Ready reports whether the caches are synced.
func (r *Reconciler) Ready() bool { return r.ready.Load() }

// ReadinessReason is "" when ready, or why not (bounded).
func (r *Reconciler) ReadinessReason() string {
	if r.Ready() {
		return ""
	}
	return "caches not synced"
}

// Run processes the queue with workers until ctx ends.
func (r *Reconciler) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer r.queue.ShutDown()
	for range workers {
		go wait.UntilWithContext(ctx, r.worker, time.Second)
	}
	r.pools.run(ctx)
}

func (r *Reconciler) worker(ctx context.Context) {
	for {
		key, quit := r.queue.Get()
		if quit {
			return
		}
		err := r.Reconcile(ctx, key)
		switch {
		case err == nil:
			r.queue.Forget(key)
			r.conflicts.Forget(key)
		case apierrors.IsConflict(err):
			// Another write won the CAS (the store's, on a new environment, nearly always):
			// its watch event brings the key back; this retry, with a backoff of its own,
			// only guards against missing it. Not the queue's rate limiter: its overall
			// bucket (10 a second) would make every such race wait behind all the others.
			r.queue.Forget(key)
			r.queue.AddAfter(key, r.conflicts.When(key))
		default:
			r.log.Warn("reconcile failed", logging.KeyEnvironment, key, logging.KeyError, err)
			r.queue.AddRateLimited(key)
		}
		r.queue.Done(key)
	}
}

// pass is one reconcile of one environment: what it read, what it saw, and the status it
// computes. Side effects happen in the order of the phase being served; the computed status
// is written once at the end.
type pass struct {
	r           *Reconciler
	env         *executionv1alpha1.ExecutionEnvironment
	persisted   *executionv1alpha1.ExecutionEnvironmentStatus // as read; never modified
	status      *executionv1alpha1.ExecutionEnvironmentStatus // being computed
	entry       profile.Entry
	o           observed
	podPresence presence
	now         metav1.Time
	events      []event
	deleted     bool
	// wake asks for another pass after this long (the idle policy's next deadline); 0: none.
	wake time.Duration
	// expired names the time limit whose Delete this pass started, counted once written.
	expired string
}

// Reconcile performs one pass for namespace/name: the claim, then the Pod, termination
// proof, the lifecycle phase, conditions from pure functions, then at most one status write.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key can never succeed
	}
	unlock := r.keys.Lock(key)
	defer unlock()
	cached, err := r.envs.ExecutionEnvironments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return r.releaseOrphans(ctx, ns, name, "")
	}
	if err != nil {
		return err
	}
	if base, ok := r.written.Load(key); ok {
		if base == cached.ResourceVersion {
			return nil
		}
		r.written.Delete(key)
	}
	if err := r.releaseOrphans(ctx, ns, name, cached.UID); err != nil {
		return err
	}
	env := cached.DeepCopy()
	if env.DeletionTimestamp == nil && !slices.Contains(env.Finalizers, EnvironmentFinalizer) &&
		!deletingWorkspace(env.Status.LifecycleOperation) {
		if err := r.protect(ctx, env); err != nil {
			return err
		}
		r.written.Store(key, cached.ResourceVersion) // the update event brings it back
		return nil
	}
	p := r.newPass(env, &cached.Status)
	if err := p.compute(ctx); err != nil || p.deleted {
		return err
	}
	if left, ok := p.quiet(); ok {
		if p.wake > 0 {
			left = min(left, p.wake) // a restore's copy being waited for
		}
		r.queue.AddAfter(key, left) // the bound: written then if still not Ready
		return nil
	}
	if !equality.Semantic.DeepEqual(*p.status, cached.Status) {
		env.Status = *p.status
		failpoint.Inject(failBeforeStatusWrite)
		// UpdateStatus carries the cached resourceVersion: a stale view loses the CAS.
		if _, err := r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(ns).UpdateStatus(ctx, env, metav1.UpdateOptions{}); err != nil {
			switch {
			case apierrors.IsConflict(err):
				r.log.Debug("status write lost the compare-and-swap", logging.KeyEnvironment, key)
			case ctx.Err() != nil:
				r.log.Debug("status write abandoned: leadership ended", logging.KeyEnvironment, key)
			}
			return err
		}
		r.written.Store(key, cached.ResourceVersion)
	}
	p.finish(key, env)
	return nil
}

// newPass starts a pass over env (a copy it may change), whose status as read is persisted.
func (r *Reconciler) newPass(env *executionv1alpha1.ExecutionEnvironment, persisted *executionv1alpha1.ExecutionEnvironmentStatus) *pass {
	p := &pass{r: r, env: env, persisted: persisted, status: persisted.DeepCopy(), now: metav1.NewTime(r.cfg.Now())}
	if p.status.FenceState == "" {
		p.status.FenceState = executionv1alpha1.FenceHealthy
	}
	var known bool
	p.entry, known = r.cfg.Profiles.Get(env.Spec.Profile)
	p.o = observed{
		generation:     env.Generation,
		profileKnown:   known,
		profileCurrent: known && p.entry.Digest == env.Spec.ProfileDigest,
		deleting:       env.DeletionTimestamp != nil,
	}
	return p
}

// compute runs the pass up to its status write: observations and side effects, the idle
// policy, the conditions.
func (p *pass) compute(ctx context.Context) error {
	if err := p.run(ctx); err != nil || p.deleted {
		return err
	}
	p.applyDeadline()
	p.applyIdlePolicy()
	p.applyTimeLimits()
	p.applyQuota()
	p.o.fence, p.o.fenceReason = p.status.FenceState, p.status.FenceReason
	p.o.operation = p.status.LifecycleOperation
	p.o.terminated = p.status.Pod == nil && p.status.TerminationProof != nil
	p.o.retired = p.status.Retired()
	p.o.suspended = p.status.Suspended()
	p.o.deleted = p.status.Deleted()
	p.status.ObservedGeneration = p.env.Generation
	if p.o.deleting && !p.persistedDeletionBlocked() && !deletingWorkspace(p.status.LifecycleOperation) {
		p.record(true, EventDeletionBlocked, "deleting an environment needs DeleteRetiredEnvironment; the workspace is kept")
	}
	conditions(p.status, p.o, p.now)
	return nil
}

// finish, once the pass's status is written (or needed no write), records its Events
// against env and asks for the next pass it needs.
func (p *pass) finish(key string, env *executionv1alpha1.ExecutionEnvironment) {
	for _, e := range p.events {
		p.emit(env, e)
	}
	if p.expired != "" {
		p.r.cfg.EndMetrics.expired.WithLabelValues(p.expired).Inc()
	}
	if p.wake > 0 {
		p.r.queue.AddAfter(key, p.wake)
	}
}

// run observes the claim and the Pod, creates what provisioning needs, settles termination
// and steps the lifecycle operation.
func (p *pass) run(ctx context.Context) error {
	if p.persisted.Deleted() {
		return p.settleTombstone(ctx)
	}
	pvcState, err := p.observePVC(ctx)
	if err != nil {
		return err
	}
	if p.podPresence, err = p.observePod(ctx); err != nil {
		return err
	}
	if p.status.LifecycleOperation == nil && p.mayCreate() {
		if err := p.adoptPooled(ctx, pvcState); err != nil {
			return err
		}
		if pvcState == absent && p.status.PVC == nil {
			if err := p.createPVC(ctx); err != nil {
				return err
			}
		}
		if p.podPresence == absent && p.o.pvc != nil && p.status.Pod == nil && p.persisted.NeverHadExecutor() {
			// A copy restore fills the claim first (restore.go).
			if done, err := p.restored(ctx); err != nil || !done {
				return err
			}
			if err := p.createPod(ctx, 0, failAfterPodCreate); err != nil {
				return err
			}
			p.restoreDone(ctx)
		}
	}
	if err := p.settleTermination(ctx); err != nil {
		return err
	}
	return p.stepLifecycle(ctx)
}

// mayCreate: new objects only for a current profile, a healthy fence and no deletion.
func (p *pass) mayCreate() bool {
	return p.o.profileCurrent && !p.o.deleting && p.status.FenceState == executionv1alpha1.FenceHealthy
}

// fence records an outcome that cannot be proven; only RecoverEnvironment clears it.
func (p *pass) fence(reason string) {
	if p.status.FenceState != executionv1alpha1.FenceUnknown {
		p.status.FenceState, p.status.FenceReason = executionv1alpha1.FenceUnknown, reason
		p.record(true, EventFenced, "%s", reason)
	}
}

// record queues an Event for after the status write.
func (p *pass) record(warning bool, reason, format string, args ...any) {
	p.events = append(p.events, event{warning: warning, reason: reason, message: fmt.Sprintf(format, args...)})
}

// recordOnce notes why an operation waits in the operation itself, with one Event when the
// note changes: a waiting operation costs no write per pass.
func (p *pass) recordOnce(reason, message string) {
	if op := p.status.LifecycleOperation; op != nil && op.Reason != message {
		op.Reason = message
		p.record(true, reason, "%s", message)
	}
}

func (p *pass) persistedDeletionBlocked() bool {
	return meta.IsStatusConditionTrue(p.persisted.Conditions, executionv1alpha1.ConditionDeletionBlocked)
}

// protect adds the environment finalizer, so that deleting the resource cannot lose track of
// its workspace.
func (r *Reconciler) protect(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment) error {
	patch, err := finalizerPatch(env, withFinalizer(env, EnvironmentFinalizer))
	if err != nil {
		return err
	}
	_, err = r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(env.Namespace).Patch(ctx, env.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// releaseOrphans deletes and releases executor Pods labelled with this environment name
// whose environment no longer exists (uid ""), or is another object of the same name: no
// ledger can record their end, and their finalizer would hold them forever. Workspace
// claims are never deleted this way: a claim outlives any mistake about its environment.
func (r *Reconciler) releaseOrphans(ctx context.Context, ns, name string, uid types.UID) error {
	objs, err := r.podIndex.ByIndex(indexEnvironment, ns+"/"+name)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		pod, ok := obj.(*corev1.Pod)
		if !ok {
			continue
		}
		if pod.Labels[executor.LabelEnvironmentUID] == string(uid) {
			continue
		}
		// The cache may lag: confirm with a live read that the owner is really gone.
		live, err := r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(ns).Get(ctx, name, metav1.GetOptions{})
		switch {
		case err == nil && string(live.UID) == pod.Labels[executor.LabelEnvironmentUID]:
			continue
		case err != nil && !apierrors.IsNotFound(err):
			return err
		}
		if pod.DeletionTimestamp == nil {
			if err := deleteExact(ctx, r.cfg.Kube.CoreV1().Pods(ns).Delete, pod.Name, pod.UID); err != nil {
				return err
			}
		}
		if err := r.releasePod(ctx, pod); err != nil && !apierrors.IsConflict(err) {
			return err
		}
		r.log.Info("released an orphaned executor Pod", logging.KeyPod, pod.Name, logging.KeyEnvironment, ns+"/"+name)
	}
	return nil
}
