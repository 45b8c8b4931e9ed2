package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
)

// The profiles' time limits, as the expired metric and the operation ids name them.
const (
	limitRetiredTTL   = "retiredTTL"
	limitSuspendedTTL = "suspendedTTL"
	limitMaxLifetime  = "maxLifetime"
	// limitDeadline is the owner's deadline with the Delete action.
	limitDeadline = "deadline"
)

// The operation ids of the actions an owner's deadline starts.
const (
	deadlineDeleteOperation  = "deadline-delete"
	deadlineSuspendOperation = "deadline-suspend"
)

// EndMetrics counts the environments the controller deleted because a profile's time limit
// passed.
type EndMetrics struct {
	expired *prometheus.CounterVec
}

// NewEndMetrics registers the metrics with reg (nil: unregistered).
func NewEndMetrics(reg prometheus.Registerer) *EndMetrics {
	m := &EndMetrics{expired: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "execplane_controller_environments_expired_total",
		Help: "Environments whose Delete the controller started because a profile's time limit or the owner's deadline passed, by limit (retiredTTL, suspendedTTL, maxLifetime, deadline).",
	}, []string{"limit"})}
	for _, l := range []string{limitRetiredTTL, limitSuspendedTTL, limitMaxLifetime, limitDeadline} {
		m.expired.WithLabelValues(l) // present at 0, so that a rate over it is defined
	}
	if reg != nil {
		reg.MustRegister(m.expired)
	}
	return m
}

// applyTimeLimits deletes an environment past one of its profile's time limits — retired
// for retiredTTL, suspended for suspendedTTL, or created maxLifetime ago — unless its owner
// retains it, and otherwise asks for a pass at the next deadline (no API write until one
// passes). Like the idle policy it acts only on a settled environment: healthy, no
// operation in progress or just started. The Delete starts in this pass's status write —
// a compare-and-swap, so exactly once whichever leader runs it — and is carried out phase
// by phase like the owner's.
func (p *pass) applyTimeLimits() {
	spec := p.entry.Spec
	if !set(spec.RetiredTTL) && !set(spec.SuspendedTTL) && !set(spec.MaxLifetime) {
		return
	}
	st := p.status
	if st.Retained() || !p.settled() || st.Deleted() {
		return
	}
	type limit struct {
		name  string
		after *metav1.Duration
		since time.Time
	}
	limits := []limit{{limitMaxLifetime, spec.MaxLifetime, p.env.CreationTimestamp.Time}}
	switch op := st.LifecycleOperation; {
	case st.Retired():
		limits = append(limits, limit{limitRetiredTTL, spec.RetiredTTL, op.CompletedAt.Time})
	case st.Suspended():
		limits = append(limits, limit{limitSuspendedTTL, spec.SuspendedTTL, op.CompletedAt.Time})
	}
	for _, l := range limits {
		if !set(l.after) {
			continue
		}
		at := l.since.Add(l.after.Duration)
		if p.now.Time.Before(at) {
			p.wakeAfter(at)
			continue
		}
		p.startPolicyOperation(executionv1alpha1.LifecycleDelete, "expired-"+l.name, EventExpired,
			fmt.Sprintf("the profile's %s (%s) passed", l.name, l.after.Duration))
		p.expired = l.name
		return
	}
}

// applyDeadline starts the owner's deadline action once it has passed (E2B's sandbox
// timeout): Delete as the owner's DeleteEnvironment (refused, and the deadline spent, while
// another binding holds a reference or the run claim), or Suspend — also under a run claim,
// which it ends, unlike the idle policy — and asks for a pass at it until then. It waits
// only for an operation in progress to end. A Suspend deadline is spent when it fires, in
// the same write (a resumed environment has none until the owner sets one); one that finds
// the environment suspended or retired already is spent without an operation.
func (p *pass) applyDeadline() {
	st := p.status
	d := st.Deadline
	if d == nil || !p.settled() || st.Deleted() || p.o.deleting {
		return
	}
	if p.now.Time.Before(d.At.Time) {
		p.wakeAfter(d.At.Time)
		return
	}
	reason := fmt.Sprintf("the owner's deadline (%s) passed", d.At.UTC().Format(time.RFC3339))
	switch d.Action {
	case executionv1alpha1.DeadlineDelete:
		// As the owner's DeleteEnvironment: not while another binding holds a reference or
		// the run claim (the deadline is spent, and says so), nor before the first executor
		// (it waits for it).
		if st.NeverHadExecutor() {
			return
		}
		others := 0
		for _, ref := range st.References {
			if ref.BindingID != d.BindingID {
				others++
			}
		}
		if run := st.ActiveRun; others > 0 || run != nil && run.BindingID != d.BindingID && !authority.ClaimExpired(run, p.now.Time) {
			st.Deadline = nil
			p.record(true, EventDeadlineRefused, "%s, but another binding holds a reference or the run claim (%d other reference(s)): not deleted", reason, others)
			return
		}
		p.startPolicyOperation(executionv1alpha1.LifecycleDelete, deadlineDeleteOperation, EventExpired, reason)
		p.expired = limitDeadline
	case executionv1alpha1.DeadlineSuspend:
		st.Deadline = nil
		if !st.Suspended() && !st.Retired() {
			p.startPolicyOperation(executionv1alpha1.LifecycleSuspend, deadlineSuspendOperation, EventExpired, reason)
		}
	}
}

func set(d *metav1.Duration) bool { return d != nil && d.Duration > 0 }

// settleTombstone is every pass over a deleted environment: its finalizer released (nothing
// is left to protect), and the resource removed once the retention has passed. It never
// writes the status: a tombstone's is final.
func (p *pass) settleTombstone(ctx context.Context) error {
	p.deleted = true // no status write, no conditions: the pass ends here
	envs := p.r.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(p.env.Namespace)
	if slices.Contains(p.env.Finalizers, EnvironmentFinalizer) {
		patch, err := finalizerPatch(p.env, withoutFinalizer(p.env, EnvironmentFinalizer))
		if err != nil {
			return err
		}
		if _, err := envs.Patch(ctx, p.env.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		return nil // the update event brings it back
	}
	at := p.persisted.LifecycleOperation.CompletedAt.Add(p.r.cfg.TombstoneRetention)
	if left := at.Sub(p.now.Time); left > 0 {
		p.r.queue.AddAfter(p.env.Namespace+"/"+p.env.Name, left+wakeSlack)
		return nil
	}
	return deleteExact(ctx, envs.Delete, p.env.Name, p.env.UID)
}

// completeDelete ends a Delete once its workspace claim is gone: the references go with it
// (there is nothing left to hold), and the resource is a tombstone from here on.
func (p *pass) completeDelete(op *executionv1alpha1.LifecycleOperation) {
	p.complete(op)
	p.status.References = nil
	p.status.ActiveRun = nil
	p.record(false, EventEnvironmentDeleted, "%s: executor and workspace deleted; the record is kept for %s", op.Reason, p.r.cfg.TombstoneRetention)
}
