package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Fence reasons recorded in status.
const (
	fenceWorkspaceVanished = "the recorded workspace claim vanished; it is never recreated silently"
	fenceExecutorVanished  = "the recorded executor Pod vanished before its termination was observed"
)

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
}

// Reconciler drives each ExecutionEnvironment's workspace claim and executor Pod towards its
// spec and writes its status — one compare-and-swap per pass, skipped when nothing changed.
type Reconciler struct {
	cfg     ReconcilerConfig
	log     hclog.Logger
	envs    execlisters.ExecutionEnvironmentLister
	pods    corelisters.PodLister
	pvcs    corelisters.PersistentVolumeClaimLister
	queue   workqueue.TypedRateLimitingInterface[string]
	synced  []cache.InformerSynced
	start   func(<-chan struct{})
	ready   atomic.Bool
	managed labels.Selector
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
	managed := labels.SelectorFromSet(labels.Set{executor.LabelManagedBy: "execplane-controller"})
	execFactory := execinformers.NewSharedInformerFactoryWithOptions(cfg.Execution, cfg.ResyncPeriod, execinformers.WithNamespace(cfg.Namespace))
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, cfg.ResyncPeriod, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = managed.String() }))
	envInf := execFactory.Execution().V1alpha1().ExecutionEnvironments()
	podInf := kubeFactory.Core().V1().Pods()
	pvcInf := kubeFactory.Core().V1().PersistentVolumeClaims()
	r := &Reconciler{
		cfg: cfg, log: cfg.Logger.Named("reconciler"), managed: managed,
		envs: envInf.Lister(), pods: podInf.Lister(), pvcs: pvcInf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "executionenvironments"}),
		synced: []cache.InformerSynced{envInf.Informer().HasSynced, podInf.Informer().HasSynced, pvcInf.Informer().HasSynced},
		start:  func(stop <-chan struct{}) { execFactory.Start(stop); kubeFactory.Start(stop) },
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
	for _, add := range []func() error{
		func() error { _, err := envInf.Informer().AddEventHandler(handlers(enqueueEnv)); return err },
		func() error { _, err := podInf.Informer().AddEventHandler(handlers(enqueueOwner)); return err },
		func() error { _, err := pvcInf.Informer().AddEventHandler(handlers(enqueueOwner)); return err },
	} {
		if err := add(); err != nil {
			return nil, err
		}
	}
	return r, nil
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
	r.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), r.synced...) {
		return errors.New("reconciler: caches did not sync")
	}
	r.ready.Store(true)
	return nil
}

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
	<-ctx.Done()
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
		case apierrors.IsConflict(err):
			r.queue.AddRateLimited(key) // another write won the CAS: re-read and retry
		default:
			r.log.Warn("reconcile failed", logging.KeyEnvironment, key, logging.KeyError, err)
			r.queue.AddRateLimited(key)
		}
		r.queue.Done(key)
	}
}

// Reconcile performs one pass for namespace/name: the claim, then the Pod, then conditions
// from pure functions, then at most one status write.
func (r *Reconciler) Reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil // a malformed key can never succeed
	}
	cached, err := r.envs.ExecutionEnvironments(ns).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	env := cached.DeepCopy()
	status := env.Status.DeepCopy()
	if status.FenceState == "" {
		status.FenceState = executionv1alpha1.FenceHealthy
	}
	entry, known := r.cfg.Profiles.Get(env.Spec.Profile)
	o := observed{
		generation:     env.Generation,
		profileKnown:   known,
		profileCurrent: known && entry.Digest == env.Spec.ProfileDigest,
		deleting:       env.DeletionTimestamp != nil,
	}
	mayCreate := o.profileCurrent && !o.deleting && status.FenceState == executionv1alpha1.FenceHealthy

	if o.pvc, err = r.ensurePVC(ctx, env, status, entry, mayCreate); err != nil {
		return err
	}
	mayCreate = mayCreate && status.FenceState == executionv1alpha1.FenceHealthy
	if o.pod, err = r.ensurePod(ctx, env, status, entry, mayCreate && o.pvc != nil); err != nil {
		return err
	}
	o.fence, o.fenceReason = status.FenceState, status.FenceReason
	status.ObservedGeneration = env.Generation
	conditions(status, o, metav1.NewTime(r.cfg.Now()))
	if equality.Semantic.DeepEqual(*status, cached.Status) {
		return nil // nothing changed: no write
	}
	env.Status = *status
	// UpdateStatus carries the cached resourceVersion: a stale view loses the CAS.
	_, err = r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(ns).UpdateStatus(ctx, env, metav1.UpdateOptions{})
	return err
}

// fence records an outcome that cannot be proven; only RecoverEnvironment clears it.
func fence(status *executionv1alpha1.ExecutionEnvironmentStatus, reason string) {
	if status.FenceState != executionv1alpha1.FenceUnknown {
		status.FenceState, status.FenceReason = executionv1alpha1.FenceUnknown, reason
	}
}

// lookup reads an object of the environment by name: from the cache, and live when a
// recorded identity is missing from the cache (which may lag behind our own create).
type lookup[T metav1.Object] struct {
	cached func(name string) (T, error)
	live   func(ctx context.Context, name string) (T, error)
}

// settle reconciles a recorded identity with what exists. It returns the object to use, or
// create=true when none exists and none was ever recorded. It adopts an object an
// interrupted pass created (matching environment UID label) instead of creating a second,
// and fences — never recreates — when a recorded UID vanished.
func settle[T metav1.Object](ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, status *executionv1alpha1.ExecutionEnvironmentStatus,
	recorded **executionv1alpha1.ObjectIdentity, name string, get lookup[T], vanished string) (obj T, exists, create bool, err error) {
	var zero T
	found, err := get.cached(name)
	exists = err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return zero, false, false, err
	}
	if *recorded != nil && (!exists || found.GetUID() != (*recorded).UID) {
		found, err = get.live(ctx, name)
		exists = err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return zero, false, false, err
		}
	}
	ours := exists && found.GetLabels()[executor.LabelEnvironmentUID] == string(env.UID)
	switch {
	case *recorded != nil && (!exists || found.GetUID() != (*recorded).UID):
		fence(status, vanished)
		return zero, false, false, nil
	case *recorded != nil:
		return found, true, false, nil
	case ours:
		*recorded = &executionv1alpha1.ObjectIdentity{Name: found.GetName(), UID: found.GetUID()}
		return found, true, false, nil
	case exists:
		return zero, false, false, fmt.Errorf("%s exists but belongs to another environment", name)
	}
	return zero, false, true, nil
}

func (r *Reconciler) ensurePVC(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, status *executionv1alpha1.ExecutionEnvironmentStatus, entry profile.Entry, mayCreate bool) (*corev1.PersistentVolumeClaim, error) {
	client := r.cfg.Kube.CoreV1().PersistentVolumeClaims(env.Namespace)
	found, exists, create, err := settle(ctx, env, status, &status.PVC, executor.PVCName(env), lookup[*corev1.PersistentVolumeClaim]{
		cached: r.pvcs.PersistentVolumeClaims(env.Namespace).Get,
		live: func(ctx context.Context, name string) (*corev1.PersistentVolumeClaim, error) {
			return client.Get(ctx, name, metav1.GetOptions{})
		},
	}, fenceWorkspaceVanished)
	if err != nil || exists || !create || !mayCreate {
		return found, err
	}
	pvc, err := executor.PVC(env, entry)
	if err != nil {
		return nil, err
	}
	created, err := client.Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	status.PVC = &executionv1alpha1.ObjectIdentity{Name: created.Name, UID: created.UID}
	return created, nil
}

func (r *Reconciler) ensurePod(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, status *executionv1alpha1.ExecutionEnvironmentStatus, entry profile.Entry, mayCreate bool) (*corev1.Pod, error) {
	var ordinal int64 // the first executor; replacements (a later issue) raise it
	name := executor.PodName(env, ordinal)
	if status.Pod != nil {
		name = status.Pod.Name
	}
	client := r.cfg.Kube.CoreV1().Pods(env.Namespace)
	found, exists, create, err := settle(ctx, env, status, &status.Pod, name, lookup[*corev1.Pod]{
		cached: r.pods.Pods(env.Namespace).Get,
		live: func(ctx context.Context, name string) (*corev1.Pod, error) {
			return client.Get(ctx, name, metav1.GetOptions{})
		},
	}, fenceExecutorVanished)
	if err != nil || exists || !create || !mayCreate {
		return found, err
	}
	pod, err := executor.Pod(env, entry, executor.PodOptions{Ordinal: ordinal, ServiceAccount: r.cfg.Profiles.ExecutorServiceAccount()})
	if err != nil {
		return nil, err
	}
	created, err := client.Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	status.Pod = &executionv1alpha1.ObjectIdentity{Name: created.Name, UID: created.UID}
	return created, nil
}
