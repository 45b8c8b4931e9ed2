package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/store"
)

// Bounds of the snapshots' reconciliation.
const (
	// snapshotPendingTimeout fails a snapshot never cut (its caller went away between
	// BeginSnapshot and CutSnapshot).
	snapshotPendingTimeout = 2 * time.Minute
	// snapshotRecheck is how often a cut in progress is looked at without an event.
	snapshotRecheck = 5 * time.Second
	// maxCopyReportBytes bounds what is parsed of a copy Pod's termination message (the
	// kubelet keeps at most 4 KiB of it; the helper's report is ~150 bytes).
	maxCopyReportBytes = 4096
)

// SnapshotsConfig configures the snapshots' reconciliation.
type SnapshotsConfig struct {
	Kube      kubernetes.Interface
	Execution versioned.Interface
	// Dynamic reads and writes VolumeSnapshots (the csi method); nil fails csi snapshots.
	Dynamic   dynamic.Interface
	Namespace string
	Profiles  *profile.Registry
	// Release, when set, gives a snapshot's storage back to its quotas once its storage is
	// removed (failed or deleted).
	Release func(context.Context, store.Admitted)
	Logger  hclog.Logger
	Now     func() time.Time
}

// Snapshots drives each ExecutionSnapshot's storage (docs/snapshots.md): a copy's claim and
// copy Pod while it is cut, the outcome in its status, and its storage removed when it
// fails or is deleted. Only the leader runs it.
type Snapshots struct {
	cfg    SnapshotsConfig
	log    hclog.Logger
	snaps  execlisters.ExecutionSnapshotLister
	queue  workqueue.TypedRateLimitingInterface[string]
	synced []cache.InformerSynced
	start  func(<-chan struct{})
}

// NewSnapshots builds the informers (snapshots, and the copy Pods, whose events bring
// their snapshot back) and the queue; Initialize starts them.
func NewSnapshots(cfg SnapshotsConfig) (*Snapshots, error) {
	if cfg.Kube == nil || cfg.Execution == nil || cfg.Namespace == "" || cfg.Profiles == nil {
		return nil, errors.New("snapshots: Kube, Execution, Namespace and Profiles are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	execFactory := execinformers.NewSharedInformerFactoryWithOptions(cfg.Execution, 0, execinformers.WithNamespace(cfg.Namespace))
	copies := labels.SelectorFromSet(labels.Set{executor.LabelManagedBy: "execplane-controller", executor.LabelComponent: executor.ComponentCopy})
	kubeFactory := informers.NewSharedInformerFactoryWithOptions(cfg.Kube, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = copies.String() }))
	snapInf := execFactory.Execution().V1alpha1().ExecutionSnapshots()
	podInf := kubeFactory.Core().V1().Pods()
	s := &Snapshots{
		cfg: cfg, log: cfg.Logger.Named("snapshots"), snaps: snapInf.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "executionsnapshots"}),
		synced: []cache.InformerSynced{snapInf.Informer().HasSynced, podInf.Informer().HasSynced},
		start:  func(stop <-chan struct{}) { execFactory.Start(stop); kubeFactory.Start(stop) },
	}
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		m, err := metaOf(obj)
		if err != nil {
			return
		}
		if _, ok := obj.(*corev1.Pod); ok {
			if name := m.GetLabels()[executor.LabelSnapshot]; name != "" {
				s.queue.Add(name)
			}
			return
		}
		s.queue.Add(m.GetName())
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: enqueue, UpdateFunc: func(_, n any) { enqueue(n) }, DeleteFunc: enqueue}
	if _, err := snapInf.Informer().AddEventHandler(h); err != nil {
		return nil, err
	}
	if _, err := podInf.Informer().AddEventHandler(h); err != nil {
		return nil, err
	}
	return s, nil
}

// Initialize starts the informers and waits for their caches.
func (s *Snapshots) Initialize(ctx context.Context) error {
	s.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), s.synced...) {
		return errors.New("snapshots: caches did not sync")
	}
	return nil
}

// Run processes the queue until ctx ends.
func (s *Snapshots) Run(ctx context.Context) {
	defer utilruntime.HandleCrash()
	go func() {
		<-ctx.Done()
		s.queue.ShutDown()
	}()
	for {
		name, quit := s.queue.Get()
		if quit {
			return
		}
		again, err := s.Reconcile(ctx, name)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				s.log.Warn("snapshot reconcile failed", logging.KeyName, name, logging.KeyError, err)
			}
			s.queue.AddRateLimited(name)
		case again > 0:
			s.queue.Forget(name)
			s.queue.AddAfter(name, again)
		default:
			s.queue.Forget(name)
		}
		s.queue.Done(name)
	}
}

// Reconcile moves one snapshot on; it answers how soon to look again (0: at its next
// event).
func (s *Snapshots) Reconcile(ctx context.Context, name string) (time.Duration, error) {
	cached, err := s.snaps.ExecutionSnapshots(s.cfg.Namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	} else if err != nil {
		return 0, err
	}
	snap := cached.DeepCopy()
	now := s.cfg.Now()
	if snap.DeletionTimestamp != nil {
		return 0, s.remove(ctx, snap)
	}
	switch snap.Status.Phase {
	case "", executionv1alpha1.SnapshotPending:
		if left := snap.CreationTimestamp.Add(snapshotPendingTimeout).Sub(now); left > 0 {
			return left, nil
		}
		return 0, s.fail(ctx, snap, apierror.ErrUnavailable, "the snapshot was never cut: its caller went away before the cut")
	case executionv1alpha1.SnapshotCutting:
		if snap.Spec.Method == executionv1alpha1.SnapshotCSI {
			return s.cutCSI(ctx, snap, now)
		}
		return s.cutCopy(ctx, snap, now)
	case executionv1alpha1.SnapshotFailed:
		return 0, s.removeStorage(ctx, snap)
	case executionv1alpha1.SnapshotReady:
		return 0, s.removeCopyPods(ctx, snap)
	}
	return 0, nil
}

// copyPodName is a snapshot's copy Pod.
func copyPodName(snap *executionv1alpha1.ExecutionSnapshot) string {
	return snap.Spec.Storage.Name + "-copy"
}

// cutCopy makes the snapshot's claim and runs its copy Pod; the copy done by the deadline
// is the snapshot, one done later (or not at all) fails it.
func (s *Snapshots) cutCopy(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot, now time.Time) (time.Duration, error) {
	by := snap.Status.CutBy
	if by == nil {
		return 0, s.fail(ctx, snap, apierror.ErrInternal, "cut without a deadline")
	}
	pods := s.cfg.Kube.CoreV1().Pods(s.cfg.Namespace)
	pod, err := pods.Get(ctx, copyPodName(snap), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !now.Before(by.Time) {
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the cut's deadline passed before its copy began")
		}
		// Only from the API server's copy: a cache still showing Cutting after this leader
		// wrote Ready (and deleted the copy Pod) must not copy the live workspace again.
		live, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace).Get(ctx, snap.Name, metav1.GetOptions{})
		if err != nil || live.UID != snap.UID || live.Status.Phase != executionv1alpha1.SnapshotCutting {
			return 0, err
		}
		return snapshotRecheck, s.startCopy(ctx, live, by.Time.Sub(now))
	} else if err != nil {
		return 0, err
	}
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		finished, report := copyOutcome(pod)
		if report.Error != "" {
			// A refusal that a retry would meet again (the helper exits 0 for those).
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the workspace cannot be copied: "+truncate(report.Error, 512))
		}
		if finished.IsZero() || finished.After(by.Time) {
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the copy finished after the cut's deadline: it is not a state the source passed through")
		}
		if why := s.sourceMoved(ctx, snap); why != "" {
			return 0, s.fail(ctx, snap, apierror.ErrStaleEpoch, why)
		}
		snap.Status.Phase = executionv1alpha1.SnapshotReady
		snap.Status.CutAt = &metav1.Time{Time: finished}
		snap.Status.ReadyAt = &metav1.Time{Time: now}
		snap.Status.RestoreBytes = snap.Spec.Storage.Bytes
		snap.Status.Copy = &executionv1alpha1.CopyProgress{Attempts: restarts(pod) + 1, Entries: clampInt64(report.Entries), Bytes: clampInt64(report.Bytes)}
		if err := s.writeStatus(ctx, snap); err != nil {
			return 0, err
		}
		return 0, s.removeCopyPods(ctx, snap)
	case corev1.PodFailed:
		_, report := copyOutcome(pod)
		if pod.Status.Reason == "DeadlineExceeded" {
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the copy outlasted the cut's deadline (the profile's snapshots.maxQuiesce)")
		}
		msg := "the copy Pod failed"
		if report.Error != "" {
			msg += ": " + truncate(report.Error, 512)
		}
		return 0, s.fail(ctx, snap, apierror.ErrInternal, msg)
	}
	if !now.Before(by.Time) {
		return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the copy outlasted the cut's deadline (the profile's snapshots.maxQuiesce)")
	}
	return min(snapshotRecheck, by.Time.Sub(now)), nil
}

// sourceMoved says why the source may have been written by an executor other than the one
// quiesced for the cut ("" when it was not): a suspended source resumed, or its executor
// replaced, while the copy ran. Such a copy is not a state the source passed through.
func (s *Snapshots) sourceMoved(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) string {
	src := snap.Spec.Source
	env, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(s.cfg.Namespace).Get(ctx, src.Environment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && string(env.UID) != src.UID) {
		return "" // gone: nothing of it wrote
	}
	if err != nil {
		return "the source cannot be read to prove its executor unchanged"
	}
	running := env.Status.Pod != nil && !env.Status.Suspended()
	if (src.PodUID == "" && running) || (src.PodUID != "" && running && string(env.Status.Pod.UID) != src.PodUID) {
		return "the source's executor changed while it was copied"
	}
	return ""
}

// startCopy creates the snapshot's claim (if absent) and its copy Pod, on the source Pod's
// node while the source runs.
func (s *Snapshots) startCopy(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot, deadline time.Duration) error {
	entry, ok := s.cfg.Profiles.Get(snap.Spec.Source.Profile)
	if !ok {
		return s.fail(ctx, snap, apierror.ErrNotReady, "the source's profile was withdrawn: no helper to copy with")
	}
	st := snap.Spec.Storage
	claim := executor.SnapshotClaim(st.Name, s.cfg.Namespace, snap.Name, snap.Spec.OwnerKey, st.StorageClass, st.Bytes)
	if _, err := s.cfg.Kube.CoreV1().PersistentVolumeClaims(s.cfg.Namespace).Create(ctx, claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the snapshot's claim: %w", err)
	}
	node := ""
	if uid := snap.Spec.Source.PodUID; uid != "" {
		list, err := s.cfg.Kube.CoreV1().Pods(s.cfg.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: labels.Set{executor.LabelEnvironment: snap.Spec.Source.Environment}.String()})
		if err != nil {
			return err
		}
		for _, p := range list.Items {
			if string(p.UID) == uid {
				node = p.Spec.NodeName
			}
		}
	}
	pod, err := executor.CopyPod(entry, executor.CopyOptions{
		Name: copyPodName(snap), Namespace: s.cfg.Namespace, Snapshot: snap.Name, OwnerKey: snap.Spec.OwnerKey,
		Source: st.SourceClaim, Target: st.Name, Node: node,
		ServiceAccount: s.cfg.Profiles.ExecutorServiceAccount(), Deadline: max(deadline, time.Second),
	})
	if err != nil {
		return s.fail(ctx, snap, apierror.ErrInternal, "the copy Pod cannot be built: "+err.Error())
	}
	if _, err := s.cfg.Kube.CoreV1().Pods(s.cfg.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create the copy Pod: %w", err)
	}
	return nil
}

// copyReport is the helper's mirror report (helper.MirrorReport), from the termination
// message: untrusted, so only counters and an error text are taken, and bounded.
type copyReport struct {
	Entries uint64 `json:"entries"`
	Bytes   uint64 `json:"bytes"`
	Error   string `json:"error"`
}

// copyOutcome is when the copy container last finished and its report.
func copyOutcome(pod *corev1.Pod) (time.Time, copyReport) {
	var rep copyReport
	for _, cs := range pod.Status.ContainerStatuses {
		term := cs.State.Terminated
		if term == nil {
			continue
		}
		if msg := term.Message; len(msg) <= maxCopyReportBytes {
			_ = json.Unmarshal([]byte(msg), &rep)
		}
		return term.FinishedAt.Time, rep
	}
	return time.Time{}, rep
}

func restarts(pod *corev1.Pod) int32 {
	var n int32
	for _, cs := range pod.Status.ContainerStatuses {
		n += cs.RestartCount
	}
	return n
}

func clampInt64(v uint64) int64 { return int64(min(v, 1<<62)) }

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// fail records why the snapshot holds no state and removes what it made.
func (s *Snapshots) fail(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot, class *apierror.Error, msg string) error {
	snap.Status.Phase = executionv1alpha1.SnapshotFailed
	snap.Status.Failure = &executionv1alpha1.SnapshotFailure{Reason: apierror.ReasonName(class.Reason()), Message: truncate(msg, 1024)}
	if err := s.writeStatus(ctx, snap); err != nil {
		return err
	}
	s.log.Info("snapshot failed", logging.KeyName, snap.Name, "reason", snap.Status.Failure.Reason)
	if err := s.removeStorage(ctx, snap); err != nil {
		return err
	}
	s.release(ctx, snap)
	return nil
}

func (s *Snapshots) writeStatus(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) error {
	_, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace).UpdateStatus(ctx, snap, metav1.UpdateOptions{})
	return err
}

// removeCopyPods deletes the snapshot's copy Pods.
func (s *Snapshots) removeCopyPods(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) error {
	err := s.cfg.Kube.CoreV1().Pods(s.cfg.Namespace).Delete(ctx, copyPodName(snap), metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// removeStorage deletes the copy Pods and the snapshot's claim or VolumeSnapshot.
func (s *Snapshots) removeStorage(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) error {
	if err := s.removeCopyPods(ctx, snap); err != nil {
		return err
	}
	if snap.Spec.Method == executionv1alpha1.SnapshotCSI {
		return s.removeVolumeSnapshot(ctx, snap)
	}
	err := s.cfg.Kube.CoreV1().PersistentVolumeClaims(s.cfg.Namespace).Delete(ctx, snap.Spec.Storage.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// remove deletes a deleted snapshot's storage, then lets it go (its finalizer removed).
func (s *Snapshots) remove(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) error {
	if err := s.removeStorage(ctx, snap); err != nil {
		return err
	}
	if !slices.Contains(snap.Finalizers, store.SnapshotFinalizer) {
		return nil
	}
	snap.Finalizers = slices.DeleteFunc(snap.Finalizers, func(f string) bool { return f == store.SnapshotFinalizer })
	_, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace).Update(ctx, snap, metav1.UpdateOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	s.release(ctx, snap)
	return nil
}

// release gives the snapshot's storage back to its quotas.
func (s *Snapshots) release(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) {
	if s.cfg.Release != nil {
		s.cfg.Release(ctx, store.Admitted{ClientHash: snap.Spec.ClientHash, OwnerHash: snap.Spec.OwnerHash, Name: snap.Spec.Storage.Name})
	}
}
