package controller

import (
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Operation ids of the lifecycle operations the idle policy starts: not a caller's, and
// never in the receipts.
const (
	idleSuspendOperation = "idle-suspend"
	idleRetireOperation  = "idle-retire"
)

// idleSince is when nobody last held the environment's run claim: the latest of the last
// run activity (acquire, renew, release), the current claim's expiry once passed, and since
// (when the environment last became what it is: Ready, or suspended). It is false while an
// unexpired claim is held.
func idleSince(st *executionv1alpha1.ExecutionEnvironmentStatus, since, now time.Time) (time.Time, bool) {
	if run := st.ActiveRun; run != nil {
		if now.Before(run.ExpiresAt.Time) {
			return time.Time{}, false
		}
		since = later(since, run.ExpiresAt.Time)
	}
	if st.LastRunActivityAt != nil {
		since = later(since, st.LastRunActivityAt.Time)
	}
	return since, true
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// applyIdlePolicy suspends (suspendAfterIdle) or retires (retireAfterIdle) an environment
// nobody has used for the profile's time, and otherwise asks for a pass at the next
// deadline: an idle environment costs no API write until the policy acts. It acts only on
// a settled environment — Ready (as the last pass recorded it) or suspended, healthy, not
// being deleted, no operation in progress — and leaves the rest to that operation.
func (p *pass) applyIdlePolicy() {
	spec := p.entry.Spec
	if spec.SuspendAfterIdle == nil && spec.RetireAfterIdle == nil {
		return
	}
	st := p.status
	if !p.settled() || p.o.deleting {
		return
	}
	var since time.Time
	suspended := st.Suspended()
	switch ready := meta.FindStatusCondition(p.persisted.Conditions, executionv1alpha1.ConditionReady); {
	case suspended:
		since = st.LifecycleOperation.CompletedAt.Time
	case ready != nil && ready.Status == metav1.ConditionTrue && st.Pod != nil:
		since = ready.LastTransitionTime.Time
	default:
		return
	}
	idle, ok := idleSince(st, since, p.now.Time)
	if !ok {
		p.wakeAfter(st.ActiveRun.ExpiresAt.Time) // the claim may lapse without a write
		return
	}
	due := func(d *metav1.Duration) bool {
		at := idle.Add(d.Duration)
		if p.now.Time.Before(at) {
			p.wakeAfter(at)
			return false
		}
		return true
	}
	switch {
	case spec.RetireAfterIdle != nil && due(spec.RetireAfterIdle):
		p.startPolicyOperation(executionv1alpha1.LifecycleRetire, idleRetireOperation, EventIdle,
			fmt.Sprintf("idle for %s (the profile's retireAfterIdle)", spec.RetireAfterIdle.Duration))
	case spec.SuspendAfterIdle != nil && !suspended && due(spec.SuspendAfterIdle):
		p.startPolicyOperation(executionv1alpha1.LifecycleSuspend, idleSuspendOperation, EventIdle,
			fmt.Sprintf("idle for %s (the profile's suspendAfterIdle)", spec.SuspendAfterIdle.Duration))
	}
}

// settled reports an environment the controller's policies (idle, time limits) may act on:
// healthy, no operation in progress, and none started or ended by this pass.
func (p *pass) settled() bool {
	st := p.status
	return st.FenceState == executionv1alpha1.FenceHealthy && !st.LifecycleOperation.InProgress() &&
		equalOperation(st.LifecycleOperation, p.persisted.LifecycleOperation)
}

// startPolicyOperation starts kind as the store starts the owner's or an administrator's:
// every grant dies with a suspension or a deletion (the generation is raised), the lapsed
// claim is cleared.
func (p *pass) startPolicyOperation(kind executionv1alpha1.LifecycleKind, id, eventReason, reason string) {
	st := p.status
	op := &executionv1alpha1.LifecycleOperation{Kind: kind, Phase: executionv1alpha1.PhaseRequested, OperationID: id, Reason: reason, StartedAt: p.now}
	if st.Pod != nil {
		op.ExpectedPodUID = st.Pod.UID
	}
	if st.PVC != nil {
		op.ExpectedPVCUID = st.PVC.UID
	}
	st.ActiveRun = nil
	if kind == executionv1alpha1.LifecycleSuspend || kind == executionv1alpha1.LifecycleDelete {
		st.RaiseGrantGeneration(p.now.Time)
	}
	st.LifecycleOperation = op
	p.record(false, eventReason, "%s", op.Reason)
	p.wake = 0
}

// wakeAfter asks for a pass at t (the earliest of the deadlines asked for).
func (p *pass) wakeAfter(t time.Time) {
	d := t.Sub(p.now.Time) + wakeSlack
	if p.wake == 0 || d < p.wake {
		p.wake = d
	}
}

// wakeSlack delays a pass asked for at a deadline (the idle policy's, a time limit's, a
// tombstone's end) a little past it, so that the pass finds the deadline passed rather
// than a microsecond ahead (and asks again).
const wakeSlack = 100 * time.Millisecond

func equalOperation(a, b *executionv1alpha1.LifecycleOperation) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Kind == b.Kind && a.Phase == b.Phase && a.OperationID == b.OperationID
}
