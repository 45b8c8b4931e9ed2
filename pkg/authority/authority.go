// Package authority holds the rules of execution authority that more than the ledger's
// writer reads: whether an environment can serve run and data operations (Usable), and
// whether a verified run grant names its current, unexpired claim (ValidateRunClaim). The
// store decides with them on the live object, the gateway on its informer view, so the two
// judge a grant alike.
//
// Invariants:
//   - Pure functions of the environment, the verified claims and the time: no I/O.
//   - Every refusal wraps a class of pkg/apierror; "not this environment" is NOT_FOUND.
package authority

import (
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
)

// GrantClaims is what was verified of a grant (control.v1 VerifiedGrant carries it from the
// gateway to the controller). Run fields are zero for an environment grant.
type GrantClaims struct {
	BindingID       string
	Environment     ident.EnvironmentRef
	GrantGeneration uint64
	Epoch           uint64
	RunID           string
	ClaimID         string
}

func notReady(why string) error { return fmt.Errorf("%w: %s", apierror.ErrNotReady, why) }

// ValidateRunClaim checks a verified run grant against an environment as observed at now:
// the current, unexpired claim, epoch and generation, and a usable reference. The gateway
// runs it on its cached environment for every data operation; the store on the live object.
func ValidateRunClaim(env *executionv1alpha1.ExecutionEnvironment, g GrantClaims, now time.Time) error {
	if err := CurrentClaim(env, g); err != nil {
		return err
	}
	if ClaimExpired(env.Status.ActiveRun, now) {
		return fmt.Errorf("%w: the run claim expired", apierror.ErrStaleEpoch)
	}
	return BoundReference(env, g.BindingID)
}

// CurrentClaim checks that the grant names the environment's current claim.
func CurrentClaim(env *executionv1alpha1.ExecutionEnvironment, g GrantClaims) error {
	if string(env.UID) != g.Environment.UID || env.Name != g.Environment.Name {
		return apierror.ErrNotFound
	}
	if uint64(env.Status.GrantGeneration) != g.GrantGeneration {
		return apierror.ErrRevoked
	}
	run := env.Status.ActiveRun
	if uint64(env.Status.Epoch) != g.Epoch || run == nil || run.ClaimID != g.ClaimID || run.BindingID != g.BindingID || run.RunID != g.RunID {
		return apierror.ErrStaleEpoch
	}
	return nil
}

// Usable refuses run and data operations on an environment that cannot serve them: fenced,
// being deleted, under or after an administrative operation, or not Ready. The gateway runs
// it on its cached environment for every data operation; the store on the live object.
func Usable(env *executionv1alpha1.ExecutionEnvironment) error {
	switch op := env.Status.LifecycleOperation; {
	case env.Status.FenceState == executionv1alpha1.FenceUnknown:
		return apierror.ErrFenced
	case env.DeletionTimestamp != nil:
		return notReady("the environment is being deleted")
	case op.InProgress():
		return notReady(fmt.Sprintf("%s in progress", op.Kind))
	case op != nil && op.Kind == executionv1alpha1.LifecycleRetire:
		return notReady("the environment is retired")
	case op != nil && op.Kind == executionv1alpha1.LifecycleSuspend:
		return notReady("the environment is suspended: ResumeEnvironment, EnsureEnvironment, AttachEnvironment or AcquireRun resumes it")
	case !meta.IsStatusConditionTrue(env.Status.Conditions, executionv1alpha1.ConditionReady):
		return notReady("the environment is not ready")
	}
	return nil
}

// BoundReference requires the binding to hold a reference that is not being deleted.
func BoundReference(env *executionv1alpha1.ExecutionEnvironment, binding string) error {
	i := slices.IndexFunc(env.Status.References, func(r executionv1alpha1.Reference) bool { return r.BindingID == binding })
	if i < 0 || env.Status.References[i].State == executionv1alpha1.ReferencePendingDelete {
		return notReady("the binding holds no usable reference on the environment")
	}
	return nil
}

// ClaimExpired reports an active claim past its expiry: it never blocks administration.
func ClaimExpired(run *executionv1alpha1.RunClaim, now time.Time) bool {
	return run != nil && !now.Before(run.ExpiresAt.Time)
}
