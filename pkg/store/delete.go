package store

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
)

// MaxDeleteWait bounds DeleteInput.Wait, for the reasons MaxAttachWait is bounded.
const MaxDeleteWait = MaxAttachWait

// reasonDeletedByOwner is recorded on the owner's Delete (LifecycleOperation.reason).
const reasonDeletedByOwner = "deleted by its owner"

// DeleteInput ends an environment for its owner.
type DeleteInput struct {
	ReferenceInput
	// Wait lets the answer wait until the deletion completed (at most MaxDeleteWait); it is
	// not part of the operation: a retry that waits longer is the same delete.
	Wait time.Duration
}

// DeleteEnvironment ends an environment for the owner of the binding that holds the only
// reference on it: every grant dies in this write (the grant generation is raised, the run
// claim cleared), then the controller stops the executor — every command in it ends with it
// — deletes the workspace claim and leaves the resource as a tombstone (Deleted) that
// answers a repeated delete until it is removed. A deleting or deleted environment is
// answered as it is; other bindings' references refuse it (each releases its own first).
func (s *Store) DeleteEnvironment(ctx context.Context, in DeleteInput) (*Result, error) {
	if err := checkReferenceInput(in.ReferenceInput); err != nil {
		return nil, err
	}
	if in.Wait < 0 || in.Wait > MaxDeleteWait {
		return nil, invalid("wait", fmt.Sprintf("must be between 0 and %s", MaxDeleteWait))
	}
	r, err := s.mutate(ctx, mutation{
		op: "DeleteEnvironment", id: in.OperationID, name: in.Environment.Name,
		args: []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.BindingID},
		// Not ownedBy: a tombstone is visible to its owner's delete, and to nothing else.
		visible: ownerOf(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			st := &env.Status
			op := st.LifecycleOperation
			if deleting(env) {
				return false, nil // answered as it is
			}
			if err := authority.BoundReference(env, in.BindingID); err != nil {
				return false, err
			}
			if n := len(st.References) - 1; n > 0 {
				return false, notReady(fmt.Sprintf("%d other binding(s) hold a reference on the environment: each releases its own before it can be deleted", n))
			}
			switch {
			case st.FenceState == executionv1alpha1.FenceUnknown:
				return false, apierror.ErrFenced
			case op.InProgress() && !(parkedReplace(env) && !s.profileCurrent(env)):
				// A parked Replace or Resume is taken over only when its executor can
				// never be built: otherwise the controller may be creating it right now,
				// and a Pod it creates after this write would hold the claim for ever.
				return false, notReady(fmt.Sprintf("%s in progress", op.Kind))
			case st.NeverHadExecutor():
				return false, notReady("the first executor is still being provisioned")
			}
			if run := st.ActiveRun; run != nil && run.BindingID != in.BindingID && !authority.ClaimExpired(run, now.Time) {
				return false, fmt.Errorf("%w: another binding holds the run claim", apierror.ErrRunClaimHeld)
			}
			// The owner's own run, held or not, ends here: deleting is the owner's decision.
			st.ActiveRun = nil
			st.RaiseGrantGeneration(now.Time)
			startOperation(env, executionv1alpha1.LifecycleDelete, in.OperationID, reasonDeletedByOwner, now)
			return true, nil
		},
	})
	if err != nil || in.Wait <= 0 || r.Environment.Status.Deleted() {
		return r, err
	}
	// The cache's tombstone is the answer (no read of the API server). Gone meanwhile (an
	// administrator's DeleteRetired, which keeps no tombstone) or still deleting when the
	// wait ran out: the answer is what this call read, DELETING.
	if env := s.await(ctx, r.Environment.Name, r.Environment.UID, in.Wait, func(env *executionv1alpha1.ExecutionEnvironment) bool {
		return env.Status.Deleted()
	}); env != nil && env.Status.Deleted() {
		r.Environment = env.DeepCopy()
	}
	return r, nil
}

// RetentionInput sets or clears the owner's retention of a workspace.
type RetentionInput struct {
	ReferenceInput
	Retain bool
}

// SetRetention keeps the workspace from the profile's time limits (retain) or lets them
// apply again, for the owner of a binding that holds a usable reference. Setting what is
// already set is answered as it is.
func (s *Store) SetRetention(ctx context.Context, in RetentionInput) (*Result, error) {
	if err := checkReferenceInput(in.ReferenceInput); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{
		op: "SetEnvironmentRetention", id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.BindingID, fmt.Sprint(in.Retain)},
		visible: ownedBy(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			if err := authority.BoundReference(env, in.BindingID); err != nil {
				return false, err
			}
			if err := acceptingReferences(env); err != nil {
				return false, err
			}
			if env.Status.Retained() == in.Retain {
				return false, nil
			}
			env.Status.Retention = &executionv1alpha1.Retention{Retain: in.Retain, BindingID: in.BindingID, OperationID: in.OperationID, UpdatedAt: now}
			return true, nil
		},
	})
}

// deleting reports an environment whose Delete (the owner's, or a time limit's) or
// DeleteRetired has begun or completed: it takes no new reference, grant or operation.
func deleting(env *executionv1alpha1.ExecutionEnvironment) bool {
	op := env.Status.LifecycleOperation
	return op != nil && (op.Kind == executionv1alpha1.LifecycleDelete || (op.Kind == executionv1alpha1.LifecycleDeleteRetired && op.InProgress()))
}

// clearTombstone removes the binding's deleted environment, if the cache shows one, so that
// Ensure can create the binding's next one under the same name. It returns the UID it
// removed ("" when none): the cache may show that object a little longer.
func (s *Store) clearTombstone(ctx context.Context, name, clientHash, ownerHash string) (types.UID, error) {
	env, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).Get(name)
	if err != nil || !env.Status.Deleted() || env.Spec.ClientHash != clientHash || env.Spec.OwnerHash != ownerHash {
		return "", nil
	}
	uid := env.UID
	err = s.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(s.cfg.Namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return "", err
	}
	// A creation remembered for capacity is that incarnation's, which the cache has shown.
	s.capMu.Lock()
	delete(s.created, name)
	s.capMu.Unlock()
	return uid, nil
}

// ownerOf is ownedBy without the tombstone rule: the owner's environment of this UID,
// deleted or not (DeleteEnvironment's visibility).
func ownerOf(c Caller, o Owner, ref ident.EnvironmentRef) func(*executionv1alpha1.ExecutionEnvironment) error {
	client, owner := ident.ClientHash(c.Client), OwnerHash(o)
	return func(env *executionv1alpha1.ExecutionEnvironment) error {
		if env.Spec.ClientHash != client || env.Spec.OwnerHash != owner || string(env.UID) != ref.UID {
			return apierror.ErrNotFound
		}
		return nil
	}
}
