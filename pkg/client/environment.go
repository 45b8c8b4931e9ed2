package client

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/execplane/execplane/pkg/apierror"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Polling of WaitReady where a gateway does not hold its answer: quick at first, then
// gentler.
const (
	readyPollInitial = 200 * time.Millisecond
	readyPollMax     = 2 * time.Second
	// readyLongPoll is how long one AttachEnvironment of WaitReady holds its answer (the
	// API's bound is 30 s); readyLongPollMargin is kept from a context's deadline so that
	// the call answers before the deadline cuts it.
	readyLongPoll       = 20 * time.Second
	readyLongPollMargin = 250 * time.Millisecond
)

// EnsureRequest asks for the environment of a binding.
type EnsureRequest struct {
	Owner     Owner
	BindingID string
	// Profile names the executor profile; ExpectedProfileDigest, when set, pins its digest.
	Profile, ExpectedProfileDigest string
	// KeepReferencePending leaves the binding's reference PENDING_CREATE for the caller to
	// commit (Environment.CommitReference) once it has recorded the environment on its side
	// — the two-phase protocol of docs/store.md. By default Ensure commits it.
	KeepReferencePending bool
	// NoWait returns as soon as the environment exists, without waiting until it is Ready.
	NoWait bool
	// Metadata is the caller's metadata for a new environment (at most 32 entries, 4 KiB),
	// part of the request like the profile; ListEnvironments matches it.
	Metadata map[string]string
	// Deadline, when set, is a new environment's deadline (Environment.SetDeadline moves
	// it), set in the same write that creates the binding's reference.
	Deadline *Deadline
	// FromSnapshot, when set, names one of the owner's ready snapshots that a new
	// environment's workspace starts as (docs/snapshots.md); part of the request.
	FromSnapshot string
}

// Ensure returns the binding's environment, creating it on first use, and (unless NoWait)
// waits until it is Ready or ctx ends. Identical concurrent Ensure calls yield one
// environment.
func (c *Client) Ensure(ctx context.Context, r EnsureRequest) (*Environment, error) {
	req := &executionv1.EnsureEnvironmentRequest{OperationId: newOperationID(), Owner: r.Owner.proto(), BindingId: r.BindingID,
		Profile: r.Profile, ExpectedProfileDigest: r.ExpectedProfileDigest, Metadata: r.Metadata, Deadline: r.Deadline.proto(), FromSnapshot: r.FromSnapshot}
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.EnsureEnvironmentResponse, error) {
		return c.api.EnsureEnvironment(ctx, req, opts...)
	})
	if err != nil {
		return nil, err
	}
	env := &Environment{c: c, owner: r.Owner, binding: r.BindingID, ref: resp.GetEnvironment().GetRef()}
	env.set(resp.GetEnvironment(), resp.GetEnvironmentGrant())
	env.Created = resp.GetCreated()
	if !r.KeepReferencePending && env.referenceState() == executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE {
		if err := env.CommitReference(ctx); err != nil {
			return env, err // the environment exists: the handle lets the caller retry the commit
		}
	}
	if r.NoWait {
		return env, nil
	}
	if err := env.WaitReady(ctx); err != nil {
		return env, err
	}
	return env, nil
}

// AttachRequest names an existing environment of a binding, as the platform recorded it.
type AttachRequest struct {
	Owner     Owner
	BindingID string
	// ID and Revision are Environment.ID and Environment.Revision.
	ID, Revision string
}

// Attach returns a handle on an existing environment of the binding. An environment that is
// absent, re-created (another revision), or not the owner's answers ErrNotFound.
func (c *Client) Attach(ctx context.Context, r AttachRequest) (*Environment, error) {
	env := &Environment{c: c, owner: r.Owner, binding: r.BindingID, ref: &executionv1.EnvironmentRef{Id: r.ID, Revision: r.Revision}}
	if err := env.Refresh(ctx); err != nil {
		return nil, err
	}
	return env, nil
}

// Handle returns a handle on an environment without a call: for reference operations on a
// binding whose reference is not usable yet (pending, reserved), where Attach would refuse.
// Status is nil until Refresh.
func (c *Client) Handle(r AttachRequest) *Environment {
	return &Environment{c: c, owner: r.Owner, binding: r.BindingID, ref: &executionv1.EnvironmentRef{Id: r.ID, Revision: r.Revision}}
}

// Environment is a handle on one binding's environment. It is safe for concurrent use.
type Environment struct {
	c       *Client
	owner   Owner
	binding string
	// Created reports whether the Ensure that returned this handle created the environment.
	Created bool

	mu    sync.Mutex
	ref   *executionv1.EnvironmentRef
	state *executionv1.Environment
	grant *executionv1.Grant
}

// ID is the environment's id (its name in the cluster); Revision its UID. A platform
// records both beside the binding.
func (e *Environment) ID() string { return e.Ref().GetId() }

// Revision is the environment's UID: a re-created environment of the same id has another.
func (e *Environment) Revision() string { return e.Ref().GetRevision() }

// Ref is the environment's reference.
func (e *Environment) Ref() *executionv1.EnvironmentRef {
	e.mu.Lock()
	defer e.mu.Unlock()
	return proto.Clone(e.ref).(*executionv1.EnvironmentRef)
}

// Status returns the environment as last seen (a copy).
func (e *Environment) Status() *executionv1.Environment {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == nil {
		return nil // a resumed run's environment: not looked at yet
	}
	return proto.Clone(e.state).(*executionv1.Environment)
}

// Owner and BindingID are the binding the handle was obtained for.
func (e *Environment) Owner() Owner      { return e.owner }
func (e *Environment) BindingID() string { return e.binding }

func (e *Environment) set(state *executionv1.Environment, grant *executionv1.Grant) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if state != nil {
		e.state, e.ref = state, state.GetRef()
	}
	if grant != nil {
		e.grant = grant
	}
}

func (e *Environment) environmentGrant() *executionv1.Grant {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.grant
}

func (e *Environment) referenceState() executionv1.ReferenceState {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range e.state.GetReferences() {
		if r.GetBindingId() == e.binding {
			return r.GetState()
		}
	}
	return executionv1.ReferenceState_REFERENCE_STATE_UNSPECIFIED
}

// Refresh attaches again: the current state and a fresh environment grant.
func (e *Environment) Refresh(ctx context.Context) error {
	return e.attach(ctx, 0)
}

// attach is AttachEnvironment for this binding, waiting up to wait for the environment to
// be ready (0: answered at once).
func (e *Environment) attach(ctx context.Context, wait time.Duration) error {
	req := &executionv1.AttachEnvironmentRequest{Owner: e.owner.proto(), BindingId: e.binding, Environment: e.Ref()}
	if wait > 0 {
		req.WaitReady = durationpb.New(wait)
	}
	resp, err := call(ctx, e.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.AttachEnvironmentResponse, error) {
		return e.c.api.AttachEnvironment(ctx, req, opts...)
	})
	if err != nil {
		return err
	}
	e.set(resp.GetEnvironment(), resp.GetEnvironmentGrant())
	return nil
}

// WaitReady waits until the environment is Ready: each AttachEnvironment holds its answer
// until the controller sees the environment ready (wait_ready), so the wait ends as soon as
// it is, without polling. It fails at once with ErrFenced when the environment is fenced,
// and with ErrNotReady when it is retiring, retired or being deleted (it would never become
// ready); otherwise it waits until ctx ends. A gateway that answers without waiting (older
// than wait_ready) is polled with a growing pause instead.
func (e *Environment) WaitReady(ctx context.Context) error {
	pause := readyPollInitial
	for {
		st := e.Status()
		switch {
		case st.GetReady():
			return nil
		case st.GetFenceState() == executionv1.FenceState_FENCE_STATE_FENCE_UNKNOWN:
			return &Error{Code: codes.FailedPrecondition, Reason: apierror.ReasonName(executionv1.ErrorReason_ERROR_REASON_FENCED), Message: "the environment is fenced: " + st.GetMessage()}
		case isTerminal(st.GetLifecycle()):
			return &Error{Code: codes.FailedPrecondition, Reason: apierror.ReasonName(executionv1.ErrorReason_ERROR_REASON_NOT_READY), Message: fmt.Sprintf("the environment is %s", st.GetLifecycle())}
		}
		wait := readyLongPoll
		if dl, ok := ctx.Deadline(); ok {
			wait = min(wait, time.Until(dl)-readyLongPollMargin)
		}
		start := time.Now()
		err := e.attach(ctx, max(wait, 0))
		if ctx.Err() != nil {
			return fmt.Errorf("execplane: waiting for environment %s to be ready (last: %s %s): %w", e.ID(), st.GetLifecycle(), st.GetMessage(), ctx.Err())
		}
		if err != nil {
			return err
		}
		if e.Status().GetReady() {
			continue
		}
		if early := pause - time.Since(start); early > 0 {
			// Answered sooner than a poll would have waited, and not ready: no long poll
			// here (an older gateway, or the wait was cut short by the deadline).
			t := time.NewTimer(early)
			select {
			case <-ctx.Done():
				t.Stop()
				return fmt.Errorf("execplane: waiting for environment %s to be ready (last: %s %s): %w", e.ID(), e.Status().GetLifecycle(), e.Status().GetMessage(), ctx.Err())
			case <-t.C:
			}
			pause = min(pause*3/2, readyPollMax)
		}
	}
}

func isTerminal(l executionv1.LifecycleState) bool {
	switch l {
	case executionv1.LifecycleState_LIFECYCLE_STATE_RETIRING, executionv1.LifecycleState_LIFECYCLE_STATE_RETIRED, executionv1.LifecycleState_LIFECYCLE_STATE_DELETING,
		executionv1.LifecycleState_LIFECYCLE_STATE_DELETED:
		return true
	}
	return false
}
