package store

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
)

// Reasons recorded on the owner's lifecycle operations (LifecycleOperation.reason).
const (
	reasonSuspendedByOwner = "suspended by its owner"
	reasonResumedByOwner   = "resumed by its owner"
	reasonResumedByEnsure  = "resumed by EnsureEnvironment"
	reasonResumedByAttach  = "resumed by AttachEnvironment"
	reasonResumedByAcquire = "resumed by AcquireRun"
)

// SuspendEnvironment stops the executor and keeps the workspace, for the owner of a binding
// that holds a usable reference. Every grant issued so far dies with it (the grant
// generation is raised, the run claim cleared); a resume starts a new executor at epoch + 1.
// An unexpired run claim refuses it (apierror.ErrRunClaimHeld): release the run first. A
// suspended environment, or one suspending, is answered as it is, unchanged.
func (s *Store) SuspendEnvironment(ctx context.Context, in ReferenceInput) (*Result, error) {
	if err := checkReferenceInput(in); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{
		op: "SuspendEnvironment", id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.BindingID},
		visible: ownedBy(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			if err := authority.BoundReference(env, in.BindingID); err != nil {
				return false, err
			}
			st := &env.Status
			op := st.LifecycleOperation
			switch {
			case st.Suspended(), op.InProgress() && op.Kind == executionv1alpha1.LifecycleSuspend:
				return false, nil
			case st.FenceState == executionv1alpha1.FenceUnknown:
				return false, apierror.ErrFenced
			case env.DeletionTimestamp != nil:
				return false, notReady("the environment is being deleted")
			case op.InProgress() && !parkedReplace(env):
				return false, notReady(fmt.Sprintf("%s in progress", op.Kind))
			case st.Retired():
				return false, notReady("the environment is retired")
			case st.NeverHadExecutor():
				return false, notReady("the first executor is still being provisioned")
			}
			if run := st.ActiveRun; run != nil && !authority.ClaimExpired(run, now.Time) {
				return false, fmt.Errorf("%w: release the run before suspending", apierror.ErrRunClaimHeld)
			}
			st.ActiveRun = nil
			st.RaiseGrantGeneration(now.Time)
			startOperation(env, executionv1alpha1.LifecycleSuspend, in.OperationID, reasonSuspendedByOwner, now)
			return true, nil
		},
	})
}

// ResumeEnvironment starts a new executor for a suspended environment, on the same
// workspace, at epoch + 1; the caller waits for Ready as after Ensure. An environment that
// is not suspended (ready, or resuming already) is answered as it is, unchanged.
func (s *Store) ResumeEnvironment(ctx context.Context, in ReferenceInput) (*Result, error) {
	if err := checkReferenceInput(in); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{
		op: "ResumeEnvironment", id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.BindingID},
		visible: ownedBy(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			if err := authority.BoundReference(env, in.BindingID); err != nil {
				return false, err
			}
			if op := env.Status.LifecycleOperation; op.InProgress() && op.Kind == executionv1alpha1.LifecycleSuspend {
				return false, notReady("Suspend in progress: resume once it completed")
			}
			return s.resume(env, in.OperationID, reasonResumedByOwner, now)
		},
	})
}

// resume starts a Resume on a suspended environment (changed) and leaves any other alone
// (unchanged). It refuses what would leave the operation parked: a fence, a deletion, a
// profile that can no longer build an executor.
func (s *Store) resume(env *executionv1alpha1.ExecutionEnvironment, operationID, reason string, now metav1.Time) (bool, error) {
	if !env.Status.Suspended() {
		return false, nil
	}
	switch {
	case env.Status.FenceState == executionv1alpha1.FenceUnknown:
		return false, apierror.ErrFenced
	case env.DeletionTimestamp != nil:
		return false, notReady("the environment is being deleted")
	case !s.profileCurrent(env):
		return false, notReady("the profile was withdrawn or changed: no new executor can be built")
	}
	startOperation(env, executionv1alpha1.LifecycleResume, operationID, reason, now)
	return true, nil
}

// resumeSuspended starts the resume of a suspended environment for a call that does not
// carry an operation of its own to record it under (Attach, AcquireRun): the Resume is its
// own operation, idempotent by the state it leaves (a second caller finds it resuming).
func (s *Store) resumeSuspended(ctx context.Context, name, reason string, visible func(*executionv1alpha1.ExecutionEnvironment) error) error {
	id := "resume-" + s.cfg.NewID()
	_, err := s.mutate(ctx, mutation{
		op: "ResumeEnvironment", id: id, name: name, args: []string{reason},
		visible: visible,
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			return s.resume(env, id, reason, now)
		},
	})
	return err
}
