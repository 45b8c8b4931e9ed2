package client

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Bounds of a run claim's TTL (the server's): renewal runs at a third of it, so two
// renewals may fail before the claim lapses.
const (
	MinRunTTL     = 30 * time.Second
	MaxRunTTL     = 5 * time.Minute
	DefaultRunTTL = time.Minute
	// releaseTimeout bounds Close's release when the caller's context has no deadline.
	releaseTimeout = 10 * time.Second
)

// AcquireOptions configure Acquire.
type AcquireOptions struct {
	// RunID names the caller's run (an agent turn, a CI job). Required.
	RunID string
	// TTL is how long the claim lasts without renewal: MinRunTTL..MaxRunTTL, DefaultRunTTL
	// when 0.
	TTL time.Duration
	// NoRenew disables the background renewal (the caller calls Renew itself).
	NoRenew bool
	// Join shares the binding's live claim of RunID (acquired by this client under the
	// current grant generation) instead of replacing it: the Run gets a grant for the same
	// claim and epoch, and nothing is fenced — how replicas of a stateless front end share
	// one run. Without such a claim, one is acquired as usual.
	Join bool
	// NoResume fails with ErrNotReady (or ErrRevoked) instead of attaching again — which
	// resumes a suspended environment — and waiting for it to be Ready.
	NoResume bool
}

// Acquire takes the environment's run claim — execution authority, fencing any earlier
// holder — and, unless NoRenew, renews it in the background until Close. A suspended
// environment is resumed first (its grants were revoked: the handle attaches again and
// waits until it is Ready).
func (e *Environment) Acquire(ctx context.Context, o AcquireOptions) (*Run, error) {
	if o.TTL == 0 {
		o.TTL = DefaultRunTTL
	}
	acquire := func() (*executionv1.AcquireRunResponse, error) {
		req := &executionv1.AcquireRunRequest{OperationId: newOperationID(), EnvironmentGrant: e.environmentGrant(), Environment: e.Ref(),
			RunId: o.RunID, Ttl: durationpb.New(o.TTL), Join: o.Join}
		return call(ctx, e.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.AcquireRunResponse, error) {
			return e.c.api.AcquireRun(ctx, req, opts...)
		})
	}
	resp, err := acquire()
	if !o.NoResume && (errors.Is(err, ErrGrantInvalid) || errors.Is(err, ErrRevoked) || errors.Is(err, ErrNotReady)) {
		// The environment grant expired or was revoked (a suspension revokes every grant),
		// the handle is old, or the environment is suspending or resuming: attach again —
		// which resumes a suspended environment —, wait for it to be ready, then retry.
		// The refused attempt did nothing, so a fresh operation id is right.
		if err = e.Refresh(ctx); err == nil {
			if err = e.WaitReady(ctx); err == nil {
				resp, err = acquire()
			}
		}
	}
	if err != nil {
		return nil, err
	}
	e.set(resp.GetEnvironment(), nil)
	r := &Run{env: e, id: o.RunID, ttl: o.TTL, grant: resp.GetRunGrant(), claim: resp.GetRun(), done: make(chan struct{})}
	renewCtx, stop := context.WithCancel(context.WithoutCancel(ctx))
	r.stop = stop
	if o.NoRenew {
		close(r.done)
	} else {
		go r.renewLoop(renewCtx)
	}
	return r, nil
}

// Run is a held run claim: the authority to read and write files and run commands in the
// environment. It is safe for concurrent use.
type Run struct {
	env *Environment
	id  string
	ttl time.Duration

	mu    sync.Mutex
	grant *executionv1.Grant
	claim *executionv1.RunClaim
	lost  error

	stop      context.CancelFunc
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// ID is the run id; Environment the environment it runs in.
func (r *Run) ID() string                { return r.id }
func (r *Run) Environment() *Environment { return r.env }

// Claim returns the claim as last granted (a copy): claim id, epoch, expiry.
func (r *Run) Claim() *executionv1.RunClaim {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.claim == nil {
		return nil // a resumed run: the claim is known to the server only
	}
	return proto.Clone(r.claim).(*executionv1.RunClaim)
}

// Err returns why the run ended (a renewal refused for good: revoked, superseded by another
// claim, fenced), or nil while it holds.
func (r *Run) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lost
}

// runGrant returns the current run grant, or why the run ended.
func (r *Run) runGrant() (*executionv1.Grant, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.grant, r.lost
}

// Renew extends the claim by its TTL and refreshes the run grant.
func (r *Run) Renew(ctx context.Context) error {
	g, err := r.runGrant()
	if err != nil {
		return err
	}
	req := &executionv1.RenewRunRequest{OperationId: newOperationID(), RunGrant: g, Environment: r.env.Ref(), Ttl: durationpb.New(r.ttl)}
	resp, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.RenewRunResponse, error) {
		return r.env.c.api.RenewRun(ctx, req, opts...)
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if ended(err) {
			r.lost = err // refused for good: later calls fail the same way
		}
		return err
	}
	r.grant, r.claim = resp.GetRunGrant(), resp.GetRun()
	return nil
}

func (r *Run) renewLoop(ctx context.Context) {
	defer close(r.done)
	t := time.NewTicker(r.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.env.c.closed:
			return
		case <-t.C:
		}
		callCtx, cancel := context.WithTimeout(ctx, r.ttl/3)
		_ = r.Renew(callCtx)
		cancel()
		if r.Err() != nil {
			return
		}
	}
}

// Close stops the renewal and releases the claim, within releaseTimeout even if ctx has
// ended. It is idempotent; a run whose claim is known to be gone is not released again.
func (r *Run) Close(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.stop()
		<-r.done
		g, err := r.runGrant()
		if err != nil {
			return // the claim is already gone
		}
		// Release even when the caller's context ended (defer run.Close(ctx) after an
		// aborted turn): an unreleased claim blocks the next Acquire until its TTL runs out.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
		defer cancel()
		req := &executionv1.ReleaseRunRequest{OperationId: newOperationID(), RunGrant: g, Environment: r.env.Ref()}
		resp, err := call(ctx, r.env.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ReleaseRunResponse, error) {
			return r.env.c.api.ReleaseRun(ctx, req, opts...)
		})
		r.mu.Lock()
		r.lost = errRunClosed
		r.mu.Unlock()
		if err != nil {
			r.closeErr = err
			return
		}
		r.env.set(resp.GetEnvironment(), nil)
	})
	return r.closeErr
}

// Leave stops the renewal without releasing the claim: it lapses after its TTL unless
// another holder of it (a caller that acquired with the same operation id) renews it. Calls
// on the Run fail afterwards. It is idempotent; Close after Leave releases nothing.
func (r *Run) Leave() {
	r.closeOnce.Do(func() {
		r.stop()
		<-r.done
		r.mu.Lock()
		r.lost = errRunClosed
		r.mu.Unlock()
	})
}

// ended reports an answer that proves the claim is gone: superseded or released (stale
// epoch), revoked, held by another, the environment absent or fenced, the grant dead. Any
// other failure (a transient INTERNAL, a limit, the network) leaves the run as it was.
func ended(err error) bool {
	for _, k := range []error{ErrStaleEpoch, ErrRevoked, ErrRunClaimHeld, ErrNotFound, ErrFenced, ErrGrantInvalid} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// errRunClosed is what calls on a closed Run return.
var errRunClosed = errors.New("execplane: the run was closed")

// RunState is what another process needs to act under a held run claim: the environment,
// the run and its current grant. It carries a bearer credential bound to this client's
// identity (useless to any other client): store it like a key (mode 0600), never log it.
type RunState struct {
	EnvironmentID, Revision string
	RunID                   string
	Grant                   string
	ExpiresAt               time.Time
}

// State exports the run (for Client.ResumeRun in another process).
func (r *Run) State() RunState {
	r.mu.Lock()
	defer r.mu.Unlock()
	ref := r.env.Ref()
	return RunState{EnvironmentID: ref.GetId(), Revision: ref.GetRevision(), RunID: r.id, Grant: r.grant.GetToken(), ExpiresAt: r.grant.GetExpiresAt().AsTime()}
}

// ResumeRun returns a Run from a state exported by Run.State, without a call and without
// background renewal (the caller renews it, or lets it lapse). ttl is what Renew asks for
// (DefaultRunTTL when 0).
func (c *Client) ResumeRun(s RunState, ttl time.Duration) *Run {
	if ttl == 0 {
		ttl = DefaultRunTTL
	}
	env := &Environment{c: c, ref: &executionv1.EnvironmentRef{Id: s.EnvironmentID, Revision: s.Revision}}
	r := &Run{env: env, id: s.RunID, ttl: ttl, grant: &executionv1.Grant{Token: s.Grant, ExpiresAt: timestamppb.New(s.ExpiresAt)},
		done: make(chan struct{}), stop: func() {}}
	close(r.done)
	return r
}
