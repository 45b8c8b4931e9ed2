package store

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
)

// Proof reason recorded when an administrator recovers a fenced environment.
const proofRecovered = "RecoveredByAdministrator"

// adminCall is what every administrative operation shares: input checks, the capability,
// the scope, the exact preconditions.
type adminCall struct {
	op       string
	required []string // precondition fields that must be set
	extra    []string // further arguments for the receipt's hash
	apply    func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error)
	replay   func(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result) error
	receipt  func(rc *executionv1alpha1.Receipt, r *Result)
}

func (s *Store) admin(ctx context.Context, in AdminInput, call adminCall) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.Identifier("operation_id", in.OperationID)
	c.Ref("environment", in.Environment)
	c.Reason(in.Reason)
	p := in.Preconditions
	set := map[string]bool{"epoch": p.Epoch != nil, "pod_uid": p.PodUID != nil, "pvc_uid": p.PVCUID != nil, "grant_generation": p.GrantGeneration != nil}
	for _, f := range call.required {
		if !set[f] {
			c.Fail("preconditions."+f, "is required")
		}
	}
	if p.PodUID != nil && *p.PodUID != "" {
		c.UUID("preconditions.pod_uid", *p.PodUID)
	}
	if p.PVCUID != nil {
		c.UUID("preconditions.pvc_uid", *p.PVCUID)
	}
	if c.Err() != nil {
		return nil, c.Err()
	}
	if !in.Caller.Capabilities.Administrator {
		return nil, fmt.Errorf("%w: administrative operation", apierror.ErrPermissionDenied)
	}
	args := append([]string{in.Caller.Client, in.Environment.UID, in.Reason, optU64(p.Epoch), optStr(p.PodUID), optStr(p.PVCUID), optU64(p.GrantGeneration)}, call.extra...)
	return s.mutate(ctx, mutation{
		op: call.op, id: in.OperationID, name: in.Environment.Name, args: args,
		visible: administered(in.Caller, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if err := checkPreconditions(env, p); err != nil {
				return false, err
			}
			return call.apply(env, now, r)
		},
		replay: call.replay, receipt: call.receipt,
	})
}

func optU64(v *uint64) string {
	if v == nil {
		return "-"
	}
	return fmt.Sprint(*v)
}

func optStr(v *string) string {
	if v == nil {
		return "-"
	}
	return "=" + *v
}

// checkPreconditions compares every set precondition with the environment.
func checkPreconditions(env *executionv1alpha1.ExecutionEnvironment, p Preconditions) error {
	st := env.Status
	switch {
	case p.Epoch != nil && *p.Epoch != uint64(st.Epoch):
		return mismatch("epoch")
	case p.GrantGeneration != nil && *p.GrantGeneration != uint64(st.GrantGeneration):
		return mismatch("grant_generation")
	case p.PodUID != nil && *p.PodUID != podUID(env):
		return mismatch("pod_uid")
	case p.PVCUID != nil && (st.PVC == nil || *p.PVCUID != string(st.PVC.UID)):
		return mismatch("pvc_uid")
	}
	return nil
}

func podUID(env *executionv1alpha1.ExecutionEnvironment) string {
	if env.Status.Pod == nil {
		return ""
	}
	return string(env.Status.Pod.UID)
}

// idle refuses an administrative operation while another is in progress.
func idle(env *executionv1alpha1.ExecutionEnvironment) error {
	if op := env.Status.LifecycleOperation; op.InProgress() {
		return notReady(fmt.Sprintf("%s in progress", op.Kind))
	}
	return nil
}

// parkedReplace is a Replace or Resume whose old executor is gone and whose new one cannot
// be created (its profile was withdrawn or changed, or the resource is being deleted):
// Retire (and Suspend) may take it over, so that the environment is never stuck.
func parkedReplace(env *executionv1alpha1.ExecutionEnvironment) bool {
	op := env.Status.LifecycleOperation
	return op != nil && (op.Kind == executionv1alpha1.LifecycleReplace || op.Kind == executionv1alpha1.LifecycleResume) &&
		op.Phase == executionv1alpha1.PhaseCreatingExecutor && env.Status.Pod == nil
}

// profileCurrent reports whether the environment's profile still exists unchanged: only
// then can a new executor be built for it.
func (s *Store) profileCurrent(env *executionv1alpha1.ExecutionEnvironment) bool {
	entry, ok := s.cfg.Profiles.Get(env.Spec.Profile)
	return ok && entry.Digest == env.Spec.ProfileDigest
}

// liveObject reports whether the object of this name still exists with this UID.
func liveObject(ctx context.Context, get func(context.Context, string, metav1.GetOptions) (metav1.Object, error), name string, uid string) (bool, error) {
	obj, err := get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return string(obj.GetUID()) == uid, nil
}

func (s *Store) podExists(ctx context.Context, id *executionv1alpha1.ObjectIdentity) (bool, error) {
	if id == nil {
		return false, nil
	}
	pods := s.cfg.Kube.CoreV1().Pods(s.cfg.Namespace)
	return liveObject(ctx, func(ctx context.Context, n string, o metav1.GetOptions) (metav1.Object, error) {
		return pods.Get(ctx, n, o)
	}, id.Name, string(id.UID))
}

func (s *Store) claimExists(ctx context.Context, id *executionv1alpha1.ObjectIdentity) (bool, error) {
	if id == nil {
		return false, nil
	}
	claims := s.cfg.Kube.CoreV1().PersistentVolumeClaims(s.cfg.Namespace)
	return liveObject(ctx, func(ctx context.Context, n string, o metav1.GetOptions) (metav1.Object, error) {
		return claims.Get(ctx, n, o)
	}, id.Name, string(id.UID))
}

// startOperation records a lifecycle operation in its Requested phase, naming the exact
// executor and claim it acts on.
func startOperation(env *executionv1alpha1.ExecutionEnvironment, kind executionv1alpha1.LifecycleKind, operationID, reason string, now metav1.Time) {
	op := &executionv1alpha1.LifecycleOperation{Kind: kind, Phase: executionv1alpha1.PhaseRequested, OperationID: operationID, Reason: reason, StartedAt: now}
	if env.Status.Pod != nil {
		op.ExpectedPodUID = env.Status.Pod.UID
	}
	if env.Status.PVC != nil {
		op.ExpectedPVCUID = env.Status.PVC.UID
	}
	env.Status.LifecycleOperation = op
}

// Retire stops the executor and keeps the workspace (epoch required). An unexpired run claim
// blocks it; an expired one — its client may be gone for good — is cleared.
func (s *Store) Retire(ctx context.Context, in AdminInput) (*Result, error) {
	return s.admin(ctx, in, adminCall{op: "Retire", required: []string{"epoch"},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			if err := idle(env); err != nil && !parkedReplace(env) {
				return false, err
			}
			if env.Status.Retired() {
				return false, notReady("the environment is already retired")
			}
			if env.Status.NeverHadExecutor() {
				return false, notReady("the first executor is still being provisioned")
			}
			if run := env.Status.ActiveRun; run != nil && !authority.ClaimExpired(run, now.Time) {
				return false, apierror.ErrRunClaimHeld
			}
			env.Status.ActiveRun = nil
			startOperation(env, executionv1alpha1.LifecycleRetire, in.OperationID, in.Reason, now)
			return true, nil
		}})
}

// ReplaceExecutor starts a new executor on the same workspace (epoch and pod_uid required);
// it completes with epoch + 1, so every grant of the old executor dies. The run claim is
// cleared: its epoch will be stale. A retired environment is revived this way.
func (s *Store) ReplaceExecutor(ctx context.Context, in AdminInput) (*Result, error) {
	return s.admin(ctx, in, adminCall{op: "ReplaceExecutor", required: []string{"epoch", "pod_uid"},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			if env.Status.FenceState == executionv1alpha1.FenceUnknown {
				return false, apierror.ErrFenced
			}
			if err := idle(env); err != nil {
				return false, err
			}
			if env.DeletionTimestamp != nil {
				return false, notReady("the environment is being deleted")
			}
			if env.Status.NeverHadExecutor() {
				return false, notReady("the first executor is still being provisioned")
			}
			if !s.profileCurrent(env) {
				return false, notReady("the profile was withdrawn or changed: no new executor can be built")
			}
			env.Status.ActiveRun = nil
			startOperation(env, executionv1alpha1.LifecycleReplace, in.OperationID, in.Reason, now)
			return true, nil
		}})
}

// RevokeEnvironment raises the grant generation (grant_generation required): every grant
// issued before is dead, and the run claim with them.
func (s *Store) RevokeEnvironment(ctx context.Context, in AdminInput) (*Result, error) {
	return s.admin(ctx, in, adminCall{op: "RevokeEnvironment", required: []string{"grant_generation"},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			env.Status.RaiseGrantGeneration(now.Time)
			env.Status.ActiveRun = nil
			return true, nil
		}})
}

// RecoverEnvironment clears a fence (epoch and pod_uid required: the fenced executor's UID,
// or "" when none was recorded). The administrator's exact naming of the executor is the
// proof: it is recorded as the termination proof, the executor's identity is cleared and the
// epoch raised so that nothing issued before can act. A new executor comes from
// ReplaceExecutor. A lost workspace cannot be recovered.
func (s *Store) RecoverEnvironment(ctx context.Context, in AdminInput) (*Result, error) {
	return s.admin(ctx, in, adminCall{op: "RecoverEnvironment", required: []string{"epoch", "pod_uid"},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			st := &env.Status
			if st.FenceState != executionv1alpha1.FenceUnknown {
				return false, notReady("the environment is not fenced")
			}
			if ok, err := s.claimExists(ctx, st.PVC); err != nil {
				return false, err
			} else if !ok {
				return false, notReady("the workspace is lost; it cannot be recovered (DeleteRetiredEnvironment removes the environment)")
			}
			if ok, err := s.podExists(ctx, st.Pod); err != nil {
				return false, err
			} else if ok {
				return false, notReady("the named executor still exists: delete it, then recover")
			}
			if st.Pod != nil {
				st.TerminationProof = &executionv1alpha1.TerminationProof{PodName: st.Pod.Name, PodUID: st.Pod.UID, Reason: proofRecovered, ObservedAt: now}
			}
			st.Pod = nil
			st.FenceState, st.FenceReason = executionv1alpha1.FenceHealthy, ""
			st.ActiveRun = nil
			st.RaiseEpoch(now.Time)
			switch op := st.LifecycleOperation; {
			case op.InProgress() && op.Kind == executionv1alpha1.LifecycleDelete:
				// The owner's (or a time limit's) Delete goes on: its executor's end is now
				// proven, so it starts again from its workspace.
				op.Phase, op.ExpectedPodUID = executionv1alpha1.PhaseRequested, ""
			case op.InProgress():
				op.Phase, op.CompletedAt, op.Reason = executionv1alpha1.PhaseCompleted, &now, "ended by RecoverEnvironment"
			}
			return true, nil
		}})
}

// MigrateEnvironment upgrades an environment written by an older schema version to
// TargetSchemaVersion (epoch required). This build writes version 1 only, so a current
// environment is a no-op once its preconditions hold, and any other target is refused.
func (s *Store) MigrateEnvironment(ctx context.Context, in MigrateInput) (*Result, error) {
	if in.TargetSchemaVersion != executionv1alpha1.CurrentSchemaVersion {
		return nil, invalid("target_schema_version", fmt.Sprintf("must be %d", executionv1alpha1.CurrentSchemaVersion))
	}
	return s.admin(ctx, in.AdminInput, adminCall{op: "MigrateEnvironment", required: []string{"epoch"},
		extra: []string{fmt.Sprint(in.TargetSchemaVersion)},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, _ metav1.Time, r *Result) (bool, error) {
			if env.Spec.SchemaVersion > in.TargetSchemaVersion {
				return false, notReady("the environment was written by a newer schema version")
			}
			r.Changed = false // nothing older than version 1 exists
			return false, nil
		}})
}

// DeleteRetiredEnvironment deletes a retired (or suspended) environment's workspace and then
// the environment (pvc_uid required). It refuses while an executor exists.
func (s *Store) DeleteRetiredEnvironment(ctx context.Context, in AdminInput) (*Result, error) {
	return s.admin(ctx, in, adminCall{op: "DeleteRetiredEnvironment", required: []string{"pvc_uid"},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			// A Delete fenced because its workspace vanished can be finished only here
			// (RecoverEnvironment refuses a lost workspace): the check below requires it.
			fencedDelete := env.Status.FenceState == executionv1alpha1.FenceUnknown && env.Status.LifecycleOperation.InProgress() &&
				env.Status.LifecycleOperation.Kind == executionv1alpha1.LifecycleDelete
			if err := idle(env); err != nil && !fencedDelete {
				return false, err
			}
			if !env.Status.Retired() && !env.Status.Suspended() {
				// A fenced environment whose workspace is lost can only be deleted; its
				// executor must be gone too.
				lost, err := s.workspaceLost(ctx, env)
				if err != nil {
					return false, err
				}
				if !lost {
					return false, notReady("only a retired environment, or one whose workspace is lost, can be deleted")
				}
			}
			startOperation(env, executionv1alpha1.LifecycleDeleteRetired, in.OperationID, in.Reason, now)
			return true, nil
		}})
}

// workspaceLost: fenced, the recorded claim gone, and no recorded executor alive.
func (s *Store) workspaceLost(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment) (bool, error) {
	if env.Status.FenceState != executionv1alpha1.FenceUnknown || env.Status.PVC == nil {
		return false, nil
	}
	claim, err := s.claimExists(ctx, env.Status.PVC)
	if err != nil || claim {
		return false, err
	}
	pod, err := s.podExists(ctx, env.Status.Pod)
	return !pod, err
}
