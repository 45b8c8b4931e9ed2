package store

import (
	"context"
	"errors"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
)

// AcquireRun takes the environment's run claim for the grant's binding: epoch + 1, a new
// claim id, an expiry. Another binding's or run's unexpired claim is apierror.ErrRunClaimHeld; an
// expired one is replaced. The same binding and run id acquiring again replaces its own
// claim (a client that lost it after a crash).
func (s *Store) AcquireRun(ctx context.Context, in AcquireRunInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.Identifier("operation_id", in.OperationID)
	c.Ref("environment", in.Environment)
	c.Identifier("run_id", in.RunID)
	c.ttl(in.TTL)
	c.Identifier("grant.binding_id", in.Grant.BindingID)
	if c.Err() != nil {
		return nil, c.Err()
	}
	ttl := in.TTL
	if ttl == 0 {
		ttl = DefaultRunTTL
	}
	claimID := s.cfg.NewID()
	client := ident.ClientHash(in.Caller.Client)
	visible := clientOf(in.Caller, in.Grant, in.Environment)
	args := []string{in.Caller.Client, in.Environment.UID, in.Grant.BindingID, in.RunID, ttl.String()}
	if in.Join {
		args = append(args, "join") // only then: receipts of acquisitions before the field stay as they were
	}
	r, err := s.mutate(ctx, mutation{
		op: "AcquireRun", id: in.OperationID, name: in.Environment.Name,
		args:    args,
		visible: visible,
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if err := authority.Usable(env); err != nil {
				return false, err
			}
			if uint64(env.Status.GrantGeneration) != in.Grant.GrantGeneration {
				return false, apierror.ErrRevoked
			}
			if err := authority.BoundReference(env, in.Grant.BindingID); err != nil {
				return false, err
			}
			if run := env.Status.ActiveRun; run != nil && now.Before(&run.ExpiresAt) && (run.BindingID != in.Grant.BindingID || run.RunID != in.RunID) {
				return false, apierror.ErrRunClaimHeld
			}
			if run := env.Status.ActiveRun; in.Join && run != nil && now.Before(&run.ExpiresAt) && run.ClientHash == client &&
				run.GrantGeneration == env.Status.GrantGeneration {
				// The binding's own live claim of this run: shared, not replaced (the
				// binding and run id matched above).
				r.Run = run.DeepCopy()
				return false, nil
			}
			env.Status.RaiseEpoch(now.Time)
			env.Status.ActiveRun = &executionv1alpha1.RunClaim{
				BindingID: in.Grant.BindingID, RunID: in.RunID, ClaimID: claimID,
				Epoch: env.Status.Epoch, GrantGeneration: env.Status.GrantGeneration, ClientHash: client,
				AcquiredAt: now, ExpiresAt: claimExpiry(now, ttl),
			}
			env.Status.LastRunActivityAt = &now
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
	if errors.Is(err, apierror.ErrNotReady) {
		return nil, s.resumeForRun(ctx, in, visible, err)
	}
	return r, err
}

// claimExpiry is a claim's expiry ttl after now, to the second: the resource stores times to
// the second, and the expiry the holder is told must be the one every later check reads —
// a finer one promised the holder up to a second that the next AcquireRun did not honour.
func claimExpiry(now metav1.Time, ttl time.Duration) metav1.Time {
	return metav1.NewTime(now.Add(ttl).Truncate(time.Second))
}

// resumeForRun answers an AcquireRun refused as not ready: when the environment is suspended
// and the grant is current (a revoked one wakes nothing), its resume starts, and the call is
// still refused (retryable) until the new executor is Ready.
func (s *Store) resumeForRun(ctx context.Context, in AcquireRunInput, visible func(*executionv1alpha1.ExecutionEnvironment) error, refusal error) error {
	resumed := false
	err := s.resumeSuspended(ctx, in.Environment.Name, reasonResumedByAcquire, func(env *executionv1alpha1.ExecutionEnvironment) error {
		if err := visible(env); err != nil {
			return err
		}
		if !env.Status.Suspended() || uint64(env.Status.GrantGeneration) != in.Grant.GrantGeneration ||
			authority.BoundReference(env, in.Grant.BindingID) != nil {
			return refusal
		}
		resumed = true
		return nil
	})
	switch {
	case err != nil:
		return err
	case resumed:
		return notReady("the environment was suspended and is resuming: acquire the run once it is Ready")
	}
	return refusal
}

// replayRun answers a replayed AcquireRun or RenewRun: the claim it produced, if it is
// still the environment's and unexpired; otherwise that claim is over, and the replay says
// so as a fresh call would have.
func replayRun(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result, now time.Time) error {
	run := env.Status.ActiveRun
	if run == nil || run.ClaimID != rc.ClaimID || run.Epoch != rc.Epoch || authority.ClaimExpired(run, now) {
		return apierror.ErrStaleEpoch
	}
	r.Run = run
	return nil
}

// RenewRun extends the claim the run grant names.
func (s *Store) RenewRun(ctx context.Context, in RenewRunInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.Identifier("operation_id", in.OperationID)
	c.Ref("environment", in.Environment)
	c.ttl(in.TTL)
	checkRunGrant(&c, in.Grant)
	if c.Err() != nil {
		return nil, c.Err()
	}
	ttl := in.TTL
	if ttl == 0 {
		ttl = DefaultRunTTL
	}
	return s.mutate(ctx, mutation{
		op: "RenewRun", id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, in.Environment.UID, in.Grant.BindingID, in.Grant.RunID, in.Grant.ClaimID, strconv.FormatUint(in.Grant.Epoch, 10), ttl.String()},
		visible: clientOf(in.Caller, in.Grant, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if err := authority.Usable(env); err != nil {
				return false, err
			}
			if err := authority.ValidateRunClaim(env, in.Grant, now.Time); err != nil {
				return false, err
			}
			env.Status.ActiveRun.ExpiresAt = claimExpiry(now, ttl)
			env.Status.LastRunActivityAt = &now
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
	c.Identifier("operation_id", in.OperationID)
	c.Ref("environment", in.Environment)
	checkRunGrant(&c, in.Grant)
	if c.Err() != nil {
		return nil, c.Err()
	}
	return s.mutate(ctx, mutation{
		op: "ReleaseRun", id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, in.Environment.UID, in.Grant.BindingID, in.Grant.RunID, in.Grant.ClaimID, strconv.FormatUint(in.Grant.Epoch, 10)},
		visible: clientOf(in.Caller, in.Grant, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			// No reference or expiry check: a claim can always be given back, even after its
			// binding's reference went or it lapsed.
			if err := authority.CurrentClaim(env, in.Grant); err != nil {
				return false, err
			}
			env.Status.ActiveRun = nil
			env.Status.LastRunActivityAt = &now
			return true, nil
		},
	})
}

func checkRunGrant(c *checker, g authority.GrantClaims) {
	c.Identifier("grant.binding_id", g.BindingID)
	c.Identifier("grant.run_id", g.RunID)
	if g.ClaimID == "" || len(g.ClaimID) > 64 || !ident.IsIdentifier(g.ClaimID) {
		c.Fail("grant.claim_id", "must be a claim id")
	}
}
