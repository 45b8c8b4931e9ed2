package gateway

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/failpoint"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/ident"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// errStaleClaim: an authentic run grant whose claim is no longer the environment's (released,
// taken over, expired): ABORTED like a stale epoch.
var errStaleClaim = fmt.Errorf("%w: the run claim is no longer current", apierror.ErrStaleEpoch)

// errNotInView: an authentic grant names an environment this gateway does not see (yet). It
// is waited on like any grant newer than the view; if the environment still is not there
// after the wait, it is gone, and the answer is NOT_FOUND.
var errNotInView = fmt.Errorf("%w: the environment is not in this gateway's view", grant.ErrNotObserved)

// settle turns a wait that ended on an absent environment into NOT_FOUND.
func settle(err error) error {
	if errors.Is(err, errNotInView) {
		return apierror.ErrNotFound
	}
	return err
}

// material returns the current bundle, or ErrUnavailable: no material, no grants.
func (h *Handler) material() (*security.Bundle, error) {
	b, ok := h.b.Material()
	if !ok || b == nil {
		return nil, security.ErrUnavailable
	}
	return b, nil
}

// checkRef refuses a malformed environment reference before any lookup.
func checkRef(field string, r *executionv1.EnvironmentRef) (ident.EnvironmentRef, error) {
	var f ident.Fields
	ref(&f, field, r)
	if err := f.Err(); err != nil {
		return ident.EnvironmentRef{}, err
	}
	return ident.EnvironmentRef{Name: r.GetId(), UID: r.GetRevision()}, nil
}

// checkToken refuses an absent grant as malformed input; everything else about a token is the
// verifier's business.
func checkToken(field string, g *executionv1.Grant) (string, error) {
	if g.GetToken() == "" {
		return "", fmt.Errorf("%w: %s: a grant is required", apierror.ErrInvalidArgument, field)
	}
	return g.GetToken(), nil
}

// visible checks an authentic grant naming subject, presented for ref, against the cached
// environment: a grant for another environment, or an environment that is absent,
// re-created (another UID) or another client's, is apierror.ErrNotFound, indistinguishably
// (a caller learns nothing about environments that are not its own). An absent one that the
// grant names is grant.ErrNotObserved: the grant was issued for it, so the view lags.
func visible(env *executionv1alpha1.ExecutionEnvironment, ref, subject ident.EnvironmentRef, c security.Client) error {
	switch {
	case subject != ref:
		return apierror.ErrNotFound
	case env == nil:
		return errNotInView
	case string(env.UID) != ref.UID || env.Spec.ClientHash != ident.ClientHash(string(c.Identity)):
		return apierror.ErrNotFound
	}
	return nil
}

// freshAwait is Await for a grant decision: it is taken only on a view proven current within
// its freshness bound, before and after the wait (a view that went stale meanwhile decides
// nothing), so a gateway cut off from the API server honours no grant it cannot check.
func (h *Handler) freshAwait(ctx context.Context, name string, check func(*executionv1alpha1.ExecutionEnvironment) error) error {
	if err := h.b.Environments.Fresh(); err != nil {
		return err
	}
	if err := h.b.Environments.Await(ctx, name, h.cfg.ObserveWait, check); err != nil {
		return err
	}
	return h.b.Environments.Fresh()
}

// verifyEnvironmentGrant verifies an environment grant presented for ref by the caller
// against this gateway's view, waiting for the view when the grant is newer.
func (h *Handler) verifyEnvironmentGrant(ctx context.Context, c security.Client, token string, ref ident.EnvironmentRef) (grant.Verified, error) {
	b, err := h.material()
	if err != nil {
		return grant.Verified{}, err
	}
	var v grant.Verified
	err = h.freshAwait(ctx, ref.Name, func(env *executionv1alpha1.ExecutionEnvironment) error {
		var verr error
		v, verr = b.Verifier().VerifyEnvironmentFunc(token, func(s grant.Subject) (grant.EnvironmentBinding, error) {
			if err := visible(env, ref, s.Environment, c); err != nil {
				return grant.EnvironmentBinding{}, err
			}
			return grant.EnvironmentBinding{
				Client: string(c.Identity), OwnerHash: env.Spec.OwnerHash, BindingID: s.BindingID,
				Environment: ref, GrantGeneration: uint64(env.Status.GrantGeneration),
			}, nil
		})
		return verr
	})
	return v, settle(err)
}

// verifyRunGrant verifies a run grant presented for ref against this gateway's view and
// returns the environment it was checked against. The claim id expected is the current
// claim's, so a grant of a released or superseded claim fails as stale.
func (h *Handler) verifyRunGrant(ctx context.Context, c security.Client, token string, ref ident.EnvironmentRef) (*executionv1alpha1.ExecutionEnvironment, grant.Verified, error) {
	b, err := h.material()
	if err != nil {
		return nil, grant.Verified{}, err
	}
	var (
		v       grant.Verified
		got     *executionv1alpha1.ExecutionEnvironment
		subject grant.Subject
	)
	err = h.freshAwait(ctx, ref.Name, func(env *executionv1alpha1.ExecutionEnvironment) error {
		var verr error
		v, verr = b.Verifier().VerifyRunFunc(token, func(s grant.Subject) (grant.RunBinding, error) {
			subject = s
			if err := visible(env, ref, s.Environment, c); err != nil {
				return grant.RunBinding{}, err
			}
			want := grant.RunBinding{
				EnvironmentBinding: grant.EnvironmentBinding{
					Client: string(c.Identity), OwnerHash: env.Spec.OwnerHash, BindingID: s.BindingID,
					Environment: ref, GrantGeneration: uint64(env.Status.GrantGeneration),
				},
				Epoch: uint64(env.Status.Epoch), RunID: s.RunID,
			}
			// Another binding's or run's claim, or none: the claim id cannot match, and the
			// verifier reports it after the generation and epoch checks.
			if run := env.Status.ActiveRun; run != nil && run.BindingID == s.BindingID && run.RunID == s.RunID {
				want.ClaimID = run.ClaimID
			}
			return want, nil
		})
		got = env
		return verr
	})
	err = settle(err)
	var mismatch *grant.MismatchError
	if errors.As(err, &mismatch) && mismatch.Claim == grant.ClaimClaimID {
		err = errStaleClaim
	}
	if current, ok := admitStale(err, got, subject, c); ok {
		return got, current, nil
	}
	if err != nil {
		return nil, grant.Verified{}, err
	}
	return got, v, nil
}

// breakStaleGrants, in a failpoint build asked to break it (failpoint.Breaks), admits an
// authentic run grant whose claim has ended — released, taken over, revoked — as the
// environment's current claim when that is held by the grant's binding: a caller keeps
// acting on a claim it gave up or lost. It is the fault suite's proof that its Grants
// check catches a data call made under a claim that had ended (test/chaos).
const breakStaleGrants = "gateway-admits-stale-grants"

// admitStale is breakStaleGrants: for a grant refused only for its claim's end (err, after
// the signature, the client, the binding and the environment matched), the verification
// of the claim the environment holds now, as if the grant named it.
func admitStale(err error, env *executionv1alpha1.ExecutionEnvironment, s grant.Subject, c security.Client) (grant.Verified, bool) {
	if !failpoint.Breaks(breakStaleGrants) || env == nil {
		return grant.Verified{}, false
	}
	if ended := errors.Is(err, apierror.ErrStaleEpoch) || errors.Is(err, grant.ErrRevoked); !ended {
		return grant.Verified{}, false
	}
	run := env.Status.ActiveRun
	if run == nil || run.BindingID != s.BindingID {
		return grant.Verified{}, false
	}
	return grant.Verified{Purpose: grant.PurposeRun, Binding: grant.RunBinding{
		EnvironmentBinding: grant.EnvironmentBinding{
			Client: string(c.Identity), OwnerHash: env.Spec.OwnerHash, BindingID: run.BindingID,
			Environment: s.Environment, GrantGeneration: uint64(env.Status.GrantGeneration),
		},
		Epoch: uint64(env.Status.Epoch), RunID: run.RunID, ClaimID: run.ClaimID,
	}}, true
}

// verifiedGrant is what the control API receives of a verified grant.
func verifiedGrant(v grant.Verified) *controlv1.VerifiedGrant {
	b := v.Binding
	return &controlv1.VerifiedGrant{
		BindingId: b.BindingID, Environment: &executionv1.EnvironmentRef{Id: b.Environment.Name, Revision: b.Environment.UID},
		Epoch: b.Epoch, GrantGeneration: b.GrantGeneration, RunId: b.RunID, ClaimId: b.ClaimID,
		KeyId: v.KeyID, ExpiresAt: timestamppb.New(v.ExpiresAt),
	}
}

// claimsOf is what the ledger's predicates read of a verified run grant.
func claimsOf(v grant.Verified) authority.GrantClaims {
	b := v.Binding
	return authority.GrantClaims{
		BindingID: b.BindingID, Environment: b.Environment,
		GrantGeneration: b.GrantGeneration, Epoch: b.Epoch, RunID: b.RunID, ClaimID: b.ClaimID,
	}
}

// issueEnvironmentGrant signs an environment grant for the caller's binding on the
// environment the controller answered with.
func (h *Handler) issueEnvironmentGrant(c security.Client, binding string, reply *controlv1.EnvironmentReply) (*executionv1.Grant, error) {
	b, err := h.material()
	if err != nil {
		return nil, err
	}
	env := reply.GetEnvironment()
	issued, err := b.Signer(grant.PurposeEnvironment).SignEnvironment(grant.EnvironmentBinding{
		Client: string(c.Identity), OwnerHash: reply.GetOwnerHash(), BindingID: binding,
		Environment:     ident.EnvironmentRef{Name: env.GetRef().GetId(), UID: env.GetRef().GetRevision()},
		GrantGeneration: env.GetGrantGeneration(),
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.Grant{Token: issued.Token, ExpiresAt: timestamppb.New(issued.ExpiresAt)}, nil
}

// issueRunGrant signs a run grant for the claim the controller answered with.
func (h *Handler) issueRunGrant(c security.Client, reply *controlv1.EnvironmentReply) (*executionv1.Grant, error) {
	b, err := h.material()
	if err != nil {
		return nil, err
	}
	run, ref := reply.GetRun(), reply.GetEnvironment().GetRef()
	if run == nil || ref == nil {
		return nil, errors.New("gateway: the controller answered a run call without its claim")
	}
	issued, err := b.Signer(grant.PurposeRun).SignRun(grant.RunBinding{
		EnvironmentBinding: grant.EnvironmentBinding{
			Client: string(c.Identity), OwnerHash: reply.GetOwnerHash(), BindingID: run.GetBindingId(),
			Environment:     ident.EnvironmentRef{Name: ref.GetId(), UID: ref.GetRevision()},
			GrantGeneration: run.GetGrantGeneration(),
		},
		Epoch: run.GetEpoch(), RunID: run.GetRunId(), ClaimID: run.GetClaimId(),
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.Grant{Token: issued.Token, ExpiresAt: timestamppb.New(issued.ExpiresAt)}, nil
}

// observe waits, for at most the observation bound, until this gateway's view of the
// environment satisfies seen: after a control call changed authority (a claim taken or
// released, grants revoked, an epoch raised), the caller's next call through this gateway
// is judged by the new state (read-your-writes). It is best effort: on timeout the answer
// stands, and other gateways observe the change within their own delay (the authority
// observation metric).
func (h *Handler) observe(ctx context.Context, ref *executionv1.EnvironmentRef, seen func(*executionv1alpha1.ExecutionEnvironment) bool) {
	if ref == nil {
		return
	}
	_ = h.b.Environments.Await(ctx, ref.GetId(), h.cfg.ObserveWait, func(env *executionv1alpha1.ExecutionEnvironment) error {
		if env != nil && string(env.UID) == ref.GetRevision() && seen(env) {
			return nil
		}
		return grant.ErrNotObserved
	})
}

// atLeast is seen once the view's epoch and generation reach the environment's.
func atLeast(e *executionv1.Environment) func(*executionv1alpha1.ExecutionEnvironment) bool {
	return func(env *executionv1alpha1.ExecutionEnvironment) bool {
		return uint64(env.Status.Epoch) >= e.GetEpoch() && uint64(env.Status.GrantGeneration) >= e.GetGrantGeneration()
	}
}
