package controller

import (
	"context"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/failpoint"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// EnvironmentFinalizer keeps an ExecutionEnvironment until DeleteRetired has removed its
// workspace: a plain delete of the resource only reports DeletionBlocked.
const EnvironmentFinalizer = "execution.mecatl.dev/delete-retired"

// fenceExpectationBroken is recorded when an operation's expected UIDs no longer match the
// ledger: acting on another object than the one the administrator named is never safe.
const fenceExpectationBroken = "a lifecycle operation's expected executor or workspace is not the recorded one"

// lifecycleFailpoint names the point inside kind/phase after its side effect and before the
// status write that advances it, e.g. "lifecycle/Replace/StoppingExecutor".
func lifecycleFailpoint(op *executionv1alpha1.LifecycleOperation) string {
	return "lifecycle/" + string(op.Kind) + "/" + string(op.Phase)
}

// breakKeepWorkspace, in a failpoint build asked to break it (failpoint.Breaks), completes
// a Delete without deleting the workspace claim: the tombstone says the workspace is gone
// while its claim stays behind. It is the fault suite's proof that its sweeps catch what a
// delete leaves (test/chaos).
const breakKeepWorkspace = "controller-skips-workspace-delete"

// deletingWorkspace reports a DeleteRetired or a Delete past the point where the claim may
// vanish (a completed Delete included: its tombstone has none).
func deletingWorkspace(op *executionv1alpha1.LifecycleOperation) bool {
	if op == nil {
		return false
	}
	switch op.Kind {
	case executionv1alpha1.LifecycleDeleteRetired:
		return op.Phase == executionv1alpha1.PhaseDeletingWorkspace || op.Phase == executionv1alpha1.PhaseDeletingEnvironment
	case executionv1alpha1.LifecycleDelete:
		return op.Phase == executionv1alpha1.PhaseDeletingWorkspace || op.Phase == executionv1alpha1.PhaseCompleted
	}
	return false
}

// stepLifecycle advances the operation by at most one phase. Each phase's side effect is
// idempotent and exact (UID preconditions), performed by the pass that reads the phase from
// the persisted status; the move to the next phase is part of the pass's single status write.
// A crash anywhere repeats at most the current phase's side effect.
func (p *pass) stepLifecycle(ctx context.Context) error {
	op := p.status.LifecycleOperation
	if !op.InProgress() {
		return nil
	}
	if p.status.FenceState == executionv1alpha1.FenceUnknown && op.Kind != executionv1alpha1.LifecycleDeleteRetired {
		// A fenced environment waits for RecoverEnvironment. DeleteRetired goes on: the
		// store admits it on a fenced environment only when its workspace is lost and no
		// executor is alive, and it deletes nothing but exact UIDs.
		return nil
	}
	switch op.Phase {
	case executionv1alpha1.PhaseRequested:
		return p.admitLifecycle(op)
	case executionv1alpha1.PhaseStoppingExecutor:
		if pod := p.o.pod; pod != nil && pod.DeletionTimestamp == nil {
			pods := p.r.cfg.Kube.CoreV1().Pods(p.env.Namespace)
			if err := deleteExact(ctx, pods.Delete, pod.Name, pod.UID); err != nil {
				return err
			}
		}
		failpoint.Inject(lifecycleFailpoint(op))
		p.advance(op, executionv1alpha1.PhaseAwaitingTermination)
	case executionv1alpha1.PhaseAwaitingTermination:
		if p.status.Pod != nil {
			return nil // settleTermination clears it once the proof is recorded and the Pod gone
		}
		failpoint.Inject(lifecycleFailpoint(op))
		switch op.Kind {
		case executionv1alpha1.LifecycleReplace:
			p.advance(op, executionv1alpha1.PhaseCreatingExecutor)
		case executionv1alpha1.LifecycleSuspend:
			p.complete(op)
			p.record(false, EventSuspended, "executor stopped; the workspace claim is kept until the environment resumes")
		case executionv1alpha1.LifecycleDelete:
			p.advance(op, executionv1alpha1.PhaseDeletingWorkspace)
			p.record(false, EventDeletingWorkspace, "executor stopped; deleting the workspace claim")
		default:
			p.complete(op)
			p.record(false, EventRetired, "executor stopped; the workspace claim is kept")
		}
	case executionv1alpha1.PhaseCreatingExecutor:
		return p.createReplacement(ctx, op)
	case executionv1alpha1.PhaseDeletingWorkspace:
		if op.Kind == executionv1alpha1.LifecycleDelete && failpoint.Breaks(breakKeepWorkspace) {
			p.status.PVC = nil
			p.completeDelete(op)
			return nil
		}
		if pvc := p.o.pvc; pvc != nil && pvc.DeletionTimestamp == nil {
			if err := deleteExact(ctx, p.r.cfg.Kube.CoreV1().PersistentVolumeClaims(p.env.Namespace).Delete, pvc.Name, pvc.UID); err != nil {
				return err
			}
		}
		failpoint.Inject(lifecycleFailpoint(op))
		if p.status.PVC == nil { // observePVC cleared it once the claim was gone
			if op.Kind == executionv1alpha1.LifecycleDelete {
				p.completeDelete(op)
				return nil
			}
			p.advance(op, executionv1alpha1.PhaseDeletingEnvironment)
			p.record(false, EventWorkspaceDeleted, "workspace claim deleted")
		}
	case executionv1alpha1.PhaseDeletingEnvironment:
		return p.deleteEnvironment(ctx, op)
	}
	return nil
}

// admitLifecycle checks that the operation names the recorded objects, then starts it.
func (p *pass) admitLifecycle(op *executionv1alpha1.LifecycleOperation) error {
	mismatch := func(recorded *executionv1alpha1.ObjectIdentity, expected types.UID) bool {
		return expected != "" && (recorded == nil || recorded.UID != expected)
	}
	switch op.Kind {
	case executionv1alpha1.LifecycleRetire, executionv1alpha1.LifecycleReplace, executionv1alpha1.LifecycleSuspend:
		if mismatch(p.status.Pod, op.ExpectedPodUID) || (op.ExpectedPodUID == "" && p.status.Pod != nil) {
			p.fence(fenceExpectationBroken)
			return nil
		}
		p.advance(op, executionv1alpha1.PhaseStoppingExecutor)
		p.record(false, EventStoppingExecutor, "%s: stopping executor", op.Kind)
	case executionv1alpha1.LifecycleDeleteRetired:
		if p.o.pod != nil || p.podPresence == leaving || (p.status.Pod != nil && p.podPresence != vanished) {
			p.recordOnce(EventOperationBlocked, "DeleteRetired waits: the environment still has an executor; retire it first")
			return nil
		}
		p.status.Pod = nil // a recorded executor that vanished (the store admitted this on a fence)
		if mismatch(p.status.PVC, op.ExpectedPVCUID) {
			p.fence(fenceExpectationBroken)
			return nil
		}
		p.advance(op, executionv1alpha1.PhaseDeletingWorkspace)
		p.record(false, EventDeletingWorkspace, "deleting the workspace claim")
	case executionv1alpha1.LifecycleDelete:
		// From Ready: stop the executor first. From retired or suspended (no executor
		// recorded): straight to the workspace, once no Pod of ours is left.
		ended := p.status.Pod == nil && p.status.TerminationProof != nil && p.status.TerminationProof.PodUID == op.ExpectedPodUID
		if !ended && (p.status.Pod != nil || op.ExpectedPodUID != "") {
			if mismatch(p.status.Pod, op.ExpectedPodUID) || op.ExpectedPodUID == "" {
				p.fence(fenceExpectationBroken)
				return nil
			}
			p.advance(op, executionv1alpha1.PhaseStoppingExecutor)
			p.record(false, EventStoppingExecutor, "%s: stopping executor", op.Kind)
			return nil
		}
		if p.o.pod != nil || p.podPresence == leaving {
			// Not recordOnce: the operation's reason (the owner's, or the time limit's) is
			// what the tombstone keeps.
			p.record(true, EventOperationBlocked, "Delete waits: an executor Pod of the environment still exists")
			return nil
		}
		if mismatch(p.status.PVC, op.ExpectedPVCUID) {
			p.fence(fenceExpectationBroken)
			return nil
		}
		p.advance(op, executionv1alpha1.PhaseDeletingWorkspace)
		p.record(false, EventDeletingWorkspace, "deleting the workspace claim")
	case executionv1alpha1.LifecycleResume:
		// Admitted on a suspended environment: no executor to stop.
		if mismatch(p.status.Pod, op.ExpectedPodUID) || (op.ExpectedPodUID == "" && p.status.Pod != nil) {
			p.fence(fenceExpectationBroken)
			return nil
		}
		p.advance(op, executionv1alpha1.PhaseCreatingExecutor)
	default:
		return fmt.Errorf("unknown lifecycle kind %q", op.Kind)
	}
	return nil
}

// createReplacement creates the new executor on the same claim and completes the Replace
// or Resume, raising the epoch so that every grant of the old executor is dead.
func (p *pass) createReplacement(ctx context.Context, op *executionv1alpha1.LifecycleOperation) error {
	if p.status.Pod == nil {
		// Not p.mayCreate(): an administrator's Replace goes on while a plain delete of the
		// resource is pending (DeletionBlocked), or the environment would lose its executor.
		if !p.o.profileCurrent || p.status.FenceState != executionv1alpha1.FenceHealthy || p.o.pvc == nil || p.podPresence == leaving {
			return nil // waits: ProfileCurrent, Fenced or WorkspaceBound says why; Retire may take over
		}
		if err := p.createPod(ctx, p.status.Epoch+1, lifecycleFailpoint(op)); err != nil {
			return err
		}
	}
	p.status.RaiseEpoch(p.now.Time)
	if op.Kind == executionv1alpha1.LifecycleResume {
		p.complete(op)
		p.record(false, EventResumed, "executor %s started at epoch %d; the workspace is kept", p.status.Pod.Name, p.status.Epoch)
		return nil
	}
	p.status.LastReplacement = &executionv1alpha1.Replacement{
		OldPodUID: op.ExpectedPodUID, NewPodUID: p.status.Pod.UID, Epoch: p.status.Epoch, CompletedAt: p.now,
	}
	p.complete(op)
	p.record(false, EventExecutorReplaced, "executor replaced by %s at epoch %d", p.status.Pod.Name, p.status.Epoch)
	return nil
}

// deleteEnvironment is DeleteRetired's last phase, entered only once the claim is gone and
// the status says so: delete the resource (exactly this UID), then release its finalizer.
func (p *pass) deleteEnvironment(ctx context.Context, op *executionv1alpha1.LifecycleOperation) error {
	envs := p.r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(p.env.Namespace)
	if p.env.DeletionTimestamp == nil {
		if err := deleteExact(ctx, envs.Delete, p.env.Name, p.env.UID); err != nil {
			return err
		}
		return nil // the update event brings the deleting object back
	}
	failpoint.Inject(lifecycleFailpoint(op))
	if !slices.Contains(p.env.Finalizers, EnvironmentFinalizer) {
		return nil
	}
	patch, err := finalizerPatch(p.env, withoutFinalizer(p.env, EnvironmentFinalizer))
	if err != nil {
		return err
	}
	if _, err := envs.Patch(ctx, p.env.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	p.r.recorder.Event(p.env, corev1.EventTypeNormal, EventEnvironmentDeleted, "workspace and environment deleted")
	p.deleted = true
	return nil
}

func (p *pass) advance(op *executionv1alpha1.LifecycleOperation, to executionv1alpha1.LifecyclePhase) {
	op.Phase = to
}

func (p *pass) complete(op *executionv1alpha1.LifecycleOperation) {
	op.Phase = executionv1alpha1.PhaseCompleted
	op.CompletedAt = &p.now
}
