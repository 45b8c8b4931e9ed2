package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Failpoints around object creation (internal/failpoint): after the API server created the
// object, before the status write that records it.
const (
	failAfterPVCCreate = "after-pvc-create"
	failAfterPodCreate = "after-pod-create"
)

// presence is what settle found for one of the environment's objects.
type presence int

const (
	// absent: nothing recorded and nothing found; it may be created.
	absent presence = iota
	// present: the recorded (or just adopted) object exists.
	present
	// vanished: the recorded UID is gone or was replaced by another object of that name.
	vanished
	// leaving: an unrecorded object of ours is being deleted; nothing is created in its place
	// until it is gone.
	leaving
)

// lookup reads an object of the environment by name: from the cache, and live when a
// recorded identity — or one this process created and has not recorded yet (unrecorded,
// under kind/namespace/name) — is missing from the cache, which may lag behind our own create.
type lookup[T metav1.Object] struct {
	kind       string
	unrecorded *sync.Map
	cached     func(name string) (T, error)
	live       func(ctx context.Context, name string) (T, error)
}

// The kinds of unrecorded keys.
const (
	kindClaim = "pvc"
	kindPod   = "pod"
)

func unrecordedKey(kind, namespace, name string) string { return kind + "/" + namespace + "/" + name }

// settle reconciles a recorded identity with what exists. It adopts an object an
// interrupted pass created (matching environment UID label, not being deleted) instead of
// creating a second, and reports a recorded UID that vanished instead of recreating it: the
// caller decides whether that was expected or fences.
func settle[T metav1.Object](ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, recorded **executionv1alpha1.ObjectIdentity,
	name string, get lookup[T]) (obj T, state presence, adopted bool, err error) {
	var zero T
	found, err := get.cached(name)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return zero, absent, false, err
	}
	made := unrecordedKey(get.kind, env.Namespace, name)
	_, unrecorded := get.unrecorded.Load(made)
	if exists && unrecorded {
		get.unrecorded.Delete(made) // the cache shows it now
		unrecorded = false
	}
	if *recorded != nil && (!exists || found.GetUID() != (*recorded).UID) || *recorded == nil && unrecorded {
		found, err = get.live(ctx, name)
		exists = err == nil
		if err != nil && !apierrors.IsNotFound(err) {
			return zero, absent, false, err
		}
		if unrecorded && !exists {
			get.unrecorded.Delete(made) // gone before the cache ever showed it: nothing to remember
		}
	}
	ours := exists && found.GetLabels()[executor.LabelEnvironmentUID] == string(env.UID)
	switch {
	case *recorded != nil && (!exists || found.GetUID() != (*recorded).UID):
		return zero, vanished, false, nil
	case *recorded != nil:
		return found, present, false, nil
	case ours && found.GetDeletionTimestamp() != nil:
		return found, leaving, false, nil
	case ours:
		*recorded = &executionv1alpha1.ObjectIdentity{Name: found.GetName(), UID: found.GetUID()}
		return found, present, true, nil
	case exists:
		return zero, absent, false, fmt.Errorf("%s exists but belongs to another environment", name)
	}
	return zero, absent, false, nil
}

func (p *pass) observePVC(ctx context.Context) (presence, error) {
	client := p.r.cfg.Kube.CoreV1().PersistentVolumeClaims(p.env.Namespace)
	pvc, state, adopted, err := settle(ctx, p.env, &p.status.PVC, p.claimName(), lookup[*corev1.PersistentVolumeClaim]{
		kind: kindClaim, unrecorded: &p.r.unrecorded,
		cached: p.r.pvcs.PersistentVolumeClaims(p.env.Namespace).Get,
		live: func(ctx context.Context, name string) (*corev1.PersistentVolumeClaim, error) {
			return client.Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		return absent, err
	}
	switch {
	case state == vanished && deletingWorkspace(p.status.LifecycleOperation):
		p.status.PVC = nil // DeleteRetired removed it: expected
	case state == vanished:
		p.fence(fenceWorkspaceVanished)
	case state == leaving:
		return state, nil // never recorded; someone else is deleting it
	case adopted && !p.starting():
		p.record(false, EventAdopted, "adopted workspace claim %s", pvc.Name)
	}
	p.o.pvc = pvc
	return state, nil
}

func (p *pass) observePod(ctx context.Context) (presence, error) {
	client := p.r.cfg.Kube.CoreV1().Pods(p.env.Namespace)
	pod, state, adopted, err := settle(ctx, p.env, &p.status.Pod, p.podName(), lookup[*corev1.Pod]{
		kind: kindPod, unrecorded: &p.r.unrecorded,
		cached: p.r.pods.Pods(p.env.Namespace).Get,
		live: func(ctx context.Context, name string) (*corev1.Pod, error) {
			return client.Get(ctx, name, metav1.GetOptions{})
		},
	})
	if err != nil {
		return absent, err
	}
	switch {
	case state == vanished && p.persisted.TerminationProof != nil && p.persisted.TerminationProof.PodUID == p.status.Pod.UID:
		p.status.Pod = nil // its termination was recorded before the finalizer was removed
	case state == vanished:
		p.fence(fenceExecutorVanished)
	case state == leaving:
		// Never recorded, so never ready and never granted: nothing to prove.
		return state, p.r.releasePod(ctx, pod)
	case adopted && p.persisted.TerminationProof != nil && p.persisted.TerminationProof.PodUID == pod.UID:
		// Declared terminated (RecoverEnvironment) yet still here: never adopt it back;
		// delete exactly it and let it go.
		p.status.Pod = nil
		if err := deleteExact(ctx, client.Delete, pod.Name, pod.UID); err != nil {
			return leaving, err
		}
		return leaving, p.r.releasePod(ctx, pod)
	case adopted && !p.starting():
		p.record(false, EventAdopted, "adopted executor Pod %s", pod.Name)
	}
	p.o.pod = pod
	return state, nil
}

// podName is the executor Pod this pass looks for: the recorded one, the replacement (or
// the resumed environment's executor) being created — named by the epoch it will carry, so
// names never repeat and a crash after its creation adopts it —, or the first.
func (p *pass) podName() string {
	if p.status.Pod != nil {
		return p.status.Pod.Name
	}
	if op := p.status.LifecycleOperation; op != nil && (op.Kind == executionv1alpha1.LifecycleReplace || op.Kind == executionv1alpha1.LifecycleResume) &&
		op.Phase == executionv1alpha1.PhaseCreatingExecutor {
		return executor.PodName(p.env, p.status.Epoch+1)
	}
	return executor.PodName(p.env, 0)
}

// claimName is the environment's workspace claim: the recorded one (a claim adopted from
// the warm pool keeps its pool name), or the one the cold path creates.
func (p *pass) claimName() string {
	if p.status.PVC != nil {
		return p.status.PVC.Name
	}
	return executor.PVCName(p.env)
}

func (p *pass) createPVC(ctx context.Context) error {
	pvc, err := executor.PVC(p.env, p.entry)
	if err != nil {
		return err
	}
	if p.env.Spec.From != nil {
		snap, err := p.restoreSource(ctx)
		if err != nil || snap == nil {
			return err
		}
		volumeSnapshot := ""
		if snap.Spec.Method == executionv1alpha1.SnapshotCSI {
			volumeSnapshot = snap.Spec.Storage.Name
		}
		executor.RestoreFrom(pvc, volumeSnapshot, snap.Spec.OwnerKey, snap.Status.RestoreBytes)
	}
	created, err := p.r.cfg.Kube.CoreV1().PersistentVolumeClaims(p.env.Namespace).Create(ctx, pvc, metav1.CreateOptions{})
	if err != nil {
		return err // AlreadyExists included: the next pass adopts it from the cache
	}
	p.r.unrecorded.Store(unrecordedKey(kindClaim, created.Namespace, created.Name), true)
	failpoint.Inject(failAfterPVCCreate)
	p.status.PVC = &executionv1alpha1.ObjectIdentity{Name: created.Name, UID: created.UID}
	p.o.pvc = created
	return nil
}

func (p *pass) createPod(ctx context.Context, ordinal int64, failName string) error {
	pod, err := executor.Pod(p.env, p.entry, executor.PodOptions{Ordinal: ordinal, ServiceAccount: p.r.cfg.Profiles.ExecutorServiceAccount(), Claim: p.claimName()})
	if err != nil {
		return err
	}
	created, err := p.r.cfg.Kube.CoreV1().Pods(p.env.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	p.r.unrecorded.Store(unrecordedKey(kindPod, created.Namespace, created.Name), true)
	failpoint.Inject(failName)
	p.status.Pod = &executionv1alpha1.ObjectIdentity{Name: created.Name, UID: created.UID}
	p.o.pod = created
	return nil
}

// deleteExact deletes exactly the object with this UID; an object already gone is success.
func deleteExact(ctx context.Context, del func(context.Context, string, metav1.DeleteOptions) error, name string, uid types.UID) error {
	err := del(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		// NotFound: gone. Conflict on a UID precondition: the name now holds another
		// object, so ours is gone too.
		return nil
	}
	return err
}

// finalizerPatch is a merge patch that sets the finalizers to want, conditioned on the
// object's resourceVersion (unique across objects, so a re-created namesake never matches).
func finalizerPatch(obj metav1.Object, want []string) ([]byte, error) {
	var list any = want
	if len(want) == 0 {
		list = nil
	}
	return json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": list, "resourceVersion": obj.GetResourceVersion()}})
}

func withFinalizer(obj metav1.Object, f string) []string {
	if slices.Contains(obj.GetFinalizers(), f) {
		return obj.GetFinalizers()
	}
	return append(slices.Clone(obj.GetFinalizers()), f)
}

func withoutFinalizer(obj metav1.Object, f string) []string {
	return slices.DeleteFunc(slices.Clone(obj.GetFinalizers()), func(s string) bool { return s == f })
}

// releasePod removes the termination-proof finalizer from exactly this Pod version.
func (r *Reconciler) releasePod(ctx context.Context, pod *corev1.Pod) error {
	if !slices.Contains(pod.Finalizers, executor.TerminationFinalizer) {
		return nil
	}
	patch, err := finalizerPatch(pod, withoutFinalizer(pod, executor.TerminationFinalizer))
	if err != nil {
		return err
	}
	_, err = r.cfg.Kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
