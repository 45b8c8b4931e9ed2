package store

import (
	"context"
	"fmt"
	"strconv"
	"time"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AcquireRun takes the environment's run claim for the grant's binding: epoch + 1, a new
// claim id, an expiry. Another binding's or run's unexpired claim is ErrRunClaimHeld; an
// expired one is replaced. The same binding and run id acquiring again replaces its own
// claim (a client that lost it after a crash).
func (s *Store) AcquireRun(ctx context.Context, in AcquireRunInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.identifier("operation_id", in.OperationID)
	c.ref("environment", in.Environment)
	c.identifier("run_id", in.RunID)
	c.ttl(in.TTL)
	c.identifier("grant.binding_id", in.Grant.BindingID)
	if c.err != nil {
		return nil, c.err
	}
	ttl := in.TTL
	if ttl == 0 {
		ttl = DefaultRunTTL
	}
	claimID := s.cfg.NewID()
	client := ClientHash(in.Caller.Client)
	return s.mutate(ctx, mutation{
		op: "AcquireRun", id: in.OperationID, name: in.Environment.Name,
		args:    []string{string(in.Caller.Client), in.Environment.UID, in.Grant.BindingID, in.RunID, ttl.String()},
		visible: clientOf(in.Caller, in.Grant, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if err := Usable(env); err != nil {
				return false, err
			}
			if uint64(env.Status.GrantGeneration) != in.Grant.GrantGeneration {
				return false, ErrRevoked
			}
			if err := boundReference(env, in.Grant.BindingID); err != nil {
				return false, err
			}
			if run := env.Status.ActiveRun; run != nil && now.Before(&run.ExpiresAt) && (run.BindingID != in.Grant.BindingID || run.RunID != in.RunID) {
				return false, ErrRunClaimHeld
			}
			env.Status.RaiseEpoch(now.Time)
			env.Status.ActiveRun = &executionv1alpha1.RunClaim{
				BindingID: in.Grant.BindingID, RunID: in.RunID, ClaimID: claimID,
				Epoch: env.Status.Epoch, GrantGeneration: env.Status.GrantGeneration, ClientHash: client,
				AcquiredAt: now, ExpiresAt: metav1.NewTime(now.Add(ttl)),
			}
			r.Run = env.Status.ActiveRun
			return true, nil
		},
		receipt: func(rc *executionv1alpha1.Receipt, r *Result) {
			rc.Epoch, rc.GrantGeneration, rc.ClaimID = r.Run.Epoch, r.Run.GrantGeneration, r.Run.ClaimID
		},
		replay: func(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result) error {
			return replayRun(env, rc, r, s.cfg.Now())
		},
	})
}

// replayRun answers a replayed AcquireRun or RenewRun: the claim it produced, if it is
// still the environment's and unexpired; otherwise that claim is over, and the replay says
// so as a fresh call would have.
func replayRun(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result, now time.Time) error {
	run := env.Status.ActiveRun
	if run == nil || run.ClaimID != rc.ClaimID || run.Epoch != rc.Epoch || claimExpired(run, now) {
		return ErrStaleEpoch
	}
	r.Run = run
	return nil
}

// RenewRun extends the claim the run grant names.
func (s *Store) RenewRun(ctx context.Context, in RenewRunInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.identifier("operation_id", in.OperationID)
	c.ref("environment", in.Environment)
	c.ttl(in.TTL)
	checkRunGrant(&c, in.Grant)
	if c.err != nil {
		return nil, c.err
	}
	ttl := in.TTL
	if ttl == 0 {
		ttl = DefaultRunTTL
	}
	return s.mutate(ctx, mutation{
		op: "RenewRun", id: in.OperationID, name: in.Environment.Name,
		args:    []string{string(in.Caller.Client), in.Environment.UID, in.Grant.BindingID, in.Grant.RunID, in.Grant.ClaimID, strconv.FormatUint(in.Grant.Epoch, 10), ttl.String()},
		visible: clientOf(in.Caller, in.Grant, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if err := Usable(env); err != nil {
				return false, err
			}
			if err := ValidateRunClaim(env, in.Grant, now.Time); err != nil {
				return false, err
			}
			env.Status.ActiveRun.ExpiresAt = metav1.NewTime(now.Add(ttl))
			r.Run = env.Status.ActiveRun
			return true, nil
		},
		receipt: func(rc *executionv1alpha1.Receipt, r *Result) {
			rc.Epoch, rc.GrantGeneration, rc.ClaimID = r.Run.Epoch, r.Run.GrantGeneration, r.Run.ClaimID
		},
		supersedes: func(old, rc executionv1alpha1.Receipt) bool {
			return old.Operation == rc.Operation && old.ClaimID == rc.ClaimID
		},
		replay: func(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result) error {
			return replayRun(env, rc, r, s.cfg.Now())
		},
	})
}

// ReleaseRun ends the claim the run grant names. The epoch stays: the next AcquireRun
// raises it.
func (s *Store) ReleaseRun(ctx context.Context, in ReleaseRunInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.identifier("operation_id", in.OperationID)
	c.ref("environment", in.Environment)
	checkRunGrant(&c, in.Grant)
	if c.err != nil {
		return nil, c.err
	}
	return s.mutate(ctx, mutation{
		op: "ReleaseRun", id: in.OperationID, name: in.Environment.Name,
		args:    []string{string(in.Caller.Client), in.Environment.UID, in.Grant.BindingID, in.Grant.RunID, in.Grant.ClaimID, strconv.FormatUint(in.Grant.Epoch, 10)},
		visible: clientOf(in.Caller, in.Grant, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, _ metav1.Time, _ *Result) (bool, error) {
			// No reference or expiry check: a claim can always be given back, even after its
			// binding's reference went or it lapsed.
			if err := currentClaim(env, in.Grant); err != nil {
				return false, err
			}
			env.Status.ActiveRun = nil
			return true, nil
		},
	})
}

func checkRunGrant(c *checker, g GrantClaims) {
	c.identifier("grant.binding_id", g.BindingID)
	c.identifier("grant.run_id", g.RunID)
	if g.ClaimID == "" || len(g.ClaimID) > 64 || !isIdentifier(g.ClaimID) {
		c.fail("grant.claim_id", "must be a claim id")
	}
}

// ValidateRunClaim checks a verified run grant against an environment as observed at now:
// the current, unexpired claim, epoch and generation, and a usable reference. The gateway
// runs it on its cached environment for every data operation; the store on the live object.
func ValidateRunClaim(env *executionv1alpha1.ExecutionEnvironment, g GrantClaims, now time.Time) error {
	if err := currentClaim(env, g); err != nil {
		return err
	}
	if claimExpired(env.Status.ActiveRun, now) {
		return fmt.Errorf("%w: the run claim expired", ErrStaleEpoch)
	}
	return boundReference(env, g.BindingID)
}

// currentClaim checks that the grant names the environment's current claim.
func currentClaim(env *executionv1alpha1.ExecutionEnvironment, g GrantClaims) error {
	if string(env.UID) != g.Environment.UID || env.Name != g.Environment.Name {
		return ErrNotFound
	}
	if uint64(env.Status.GrantGeneration) != g.GrantGeneration {
		return ErrRevoked
	}
	run := env.Status.ActiveRun
	if uint64(env.Status.Epoch) != g.Epoch || run == nil || run.ClaimID != g.ClaimID || run.BindingID != g.BindingID || run.RunID != g.RunID {
		return ErrStaleEpoch
	}
	return nil
}

// Usable refuses run and data operations on an environment that cannot serve them: fenced,
// being deleted, under or after an administrative operation, or not Ready. The gateway runs
// it on its cached environment for every data operation; the store on the live object.
func Usable(env *executionv1alpha1.ExecutionEnvironment) error {
	switch op := env.Status.LifecycleOperation; {
	case env.Status.FenceState == executionv1alpha1.FenceUnknown:
		return ErrFenced
	case env.DeletionTimestamp != nil:
		return notReady("the environment is being deleted")
	case op.InProgress():
		return notReady(fmt.Sprintf("%s in progress", op.Kind))
	case op != nil && op.Kind == executionv1alpha1.LifecycleRetire:
		return notReady("the environment is retired")
	case !meta.IsStatusConditionTrue(env.Status.Conditions, executionv1alpha1.ConditionReady):
		return notReady("the environment is not ready")
	}
	return nil
}

// boundReference requires the binding to hold a reference that is not being deleted.
func boundReference(env *executionv1alpha1.ExecutionEnvironment, binding string) error {
	i := refIndex(env, binding)
	if i < 0 || env.Status.References[i].State == executionv1alpha1.ReferencePendingDelete {
		return notReady("the binding holds no usable reference on the environment")
	}
	return nil
}

// claimExpired reports an active claim past its expiry: it never blocks administration.
func claimExpired(run *executionv1alpha1.RunClaim, now time.Time) bool {
	return run != nil && !now.Before(run.ExpiresAt.Time)
}
