package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile"
)

// Failpoints of an adoption: after the Pod is claimed, and after the claim is too (both
// before the status write that records them).
const (
	failAfterPoolPodClaim = "after-pool-pod-claim"
	failAfterPoolClaim    = "after-pool-claim"
)

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
	objs, err := pl.r.podIndex.ByIndex(indexEnvironment, env.Namespace+"/"+env.Name)
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
		!p.persisted.NeverHadExecutor() || pl.wentCold(uid) || p.env.Spec.From != nil {
		return nil // a restore's workspace is its snapshot's, never a pooled empty one
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
