package client

import (
	"context"
	"iter"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/durationpb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// withEnvironment is every reference RPC's response.
type withEnvironment interface {
	GetEnvironment() *executionv1.Environment
}

// mutate runs one reference RPC for this binding with a fresh operation id (reused by its
// retries) and records the environment it answers.
func mutate[T withEnvironment](ctx context.Context, e *Environment, rpc func(context.Context, string, *executionv1.ReferenceTarget, ...grpc.CallOption) (T, error)) error {
	opID, target := newOperationID(), &executionv1.ReferenceTarget{Owner: e.owner.proto(), Environment: e.Ref(), BindingId: e.binding}
	resp, err := call(ctx, e.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (T, error) {
		return rpc(ctx, opID, target, opts...)
	})
	if err != nil {
		return err
	}
	e.set(resp.GetEnvironment(), nil)
	return nil
}

// CommitReference publishes the binding's pending reference (after the caller recorded the
// environment on its side).
func (e *Environment) CommitReference(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.CommitReferenceResponse, error) {
		return e.c.api.CommitReference(ctx, &executionv1.CommitReferenceRequest{OperationId: op, Target: t}, opts...)
	})
}

// AbortReference drops the binding's pending reference (the caller did not record it).
func (e *Environment) AbortReference(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.AbortReferenceResponse, error) {
		return e.c.api.AbortReference(ctx, &executionv1.AbortReferenceRequest{OperationId: op, Target: t}, opts...)
	})
}

// ReleaseReference removes the binding's published reference in one step.
func (e *Environment) ReleaseReference(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.ReleaseReferenceResponse, error) {
		return e.c.api.ReleaseReference(ctx, &executionv1.ReleaseReferenceRequest{OperationId: op, Target: t}, opts...)
	})
}

// Suspend stops the environment's executor and keeps its workspace (SuspendEnvironment).
// Every grant issued before dies, this handle's run included; refused (RUN_CLAIM_HELD)
// while an unexpired run claim exists. Resume, or Client.Ensure or Client.Attach, brings
// it back at a new epoch.
func (e *Environment) Suspend(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.SuspendEnvironmentResponse, error) {
		return e.c.api.SuspendEnvironment(ctx, &executionv1.SuspendEnvironmentRequest{OperationId: op, Target: t}, opts...)
	})
}

// Resume starts a new executor for a suspended environment on its kept workspace
// (ResumeEnvironment); WaitReady waits for it. The environment grant this handle holds was
// revoked by the suspension: Client.Attach returns a handle with a fresh one.
func (e *Environment) Resume(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.ResumeEnvironmentResponse, error) {
		return e.c.api.ResumeEnvironment(ctx, &executionv1.ResumeEnvironmentRequest{OperationId: op, Target: t}, opts...)
	})
}

// Delete ends the environment (DeleteEnvironment): every grant dies at once, this handle's
// run included; the executor stops, and every command in it with it; the workspace is
// deleted. The binding must hold the only reference on it. wait (at most 30 s; 0: none)
// lets the answer wait until the deletion completed: Lifecycle then says DELETED. A
// deleted environment is answered as it is, so a repeated Delete is safe.
func (e *Environment) Delete(ctx context.Context, wait time.Duration) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.DeleteEnvironmentResponse, error) {
		req := &executionv1.DeleteEnvironmentRequest{OperationId: op, Target: t}
		if wait > 0 {
			req.Wait = durationpb.New(wait)
		}
		return e.c.api.DeleteEnvironment(ctx, req, opts...)
	})
}

// SetRetention keeps the workspace from the profile's time limits (retiredTTL,
// suspendedTTL, maxLifetime) when retain is true, and lets them apply again when false
// (SetEnvironmentRetention).
func (e *Environment) SetRetention(ctx context.Context, retain bool) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.SetEnvironmentRetentionResponse, error) {
		return e.c.api.SetEnvironmentRetention(ctx, &executionv1.SetEnvironmentRetentionRequest{OperationId: op, Target: t, Retain: retain}, opts...)
	})
}

// DeadlineAction is what the controller does at an environment's deadline.
type DeadlineAction = executionv1.DeadlineAction

// The deadline actions.
const (
	DeadlineDelete  = executionv1.DeadlineAction_DEADLINE_ACTION_DELETE
	DeadlineSuspend = executionv1.DeadlineAction_DEADLINE_ACTION_SUSPEND
)

// Deadline asks for Action After from now (1 s..8760 h).
type Deadline struct {
	After  time.Duration
	Action DeadlineAction
}

func (d *Deadline) proto() *executionv1.Deadline {
	if d == nil {
		return nil
	}
	return &executionv1.Deadline{After: durationpb.New(d.After), Action: d.Action}
}

// SetDeadline sets or moves the environment's deadline, counted from now: at it the
// controller deletes or suspends the environment, whatever it is doing. A nil deadline
// clears it.
func (e *Environment) SetDeadline(ctx context.Context, d *Deadline) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.SetEnvironmentDeadlineResponse, error) {
		return e.c.api.SetEnvironmentDeadline(ctx, &executionv1.SetEnvironmentDeadlineRequest{OperationId: op, Target: t, Deadline: d.proto()}, opts...)
	})
}

// PrepareReferenceDelete marks the binding's reference PENDING_DELETE (first phase of a
// two-phase removal); ConfirmReferenceDelete removes it, CancelReferenceDelete restores it.
func (e *Environment) PrepareReferenceDelete(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.PrepareReferenceDeleteResponse, error) {
		return e.c.api.PrepareReferenceDelete(ctx, &executionv1.PrepareReferenceDeleteRequest{OperationId: op, Target: t}, opts...)
	})
}

// ConfirmReferenceDelete removes a reference prepared for deletion.
func (e *Environment) ConfirmReferenceDelete(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.ConfirmReferenceDeleteResponse, error) {
		return e.c.api.ConfirmReferenceDelete(ctx, &executionv1.ConfirmReferenceDeleteRequest{OperationId: op, Target: t}, opts...)
	})
}

// CancelReferenceDelete publishes again a reference prepared for deletion.
func (e *Environment) CancelReferenceDelete(ctx context.Context) error {
	return mutate(ctx, e, func(ctx context.Context, op string, t *executionv1.ReferenceTarget, opts ...grpc.CallOption) (*executionv1.CancelReferenceDeleteResponse, error) {
		return e.c.api.CancelReferenceDelete(ctx, &executionv1.CancelReferenceDeleteRequest{OperationId: op, Target: t}, opts...)
	})
}

// ReserveSuccessor reserves a successor binding (a fork of this binding's conversation, say)
// on the same environment: a pending reference that remembers this binding as its source.
// The successor commits it through its own handle (Client.Attach with successorBindingID).
func (e *Environment) ReserveSuccessor(ctx context.Context, successorBindingID string) error {
	req := &executionv1.ReserveSuccessorRequest{OperationId: newOperationID(), Owner: e.owner.proto(), Environment: e.Ref(),
		SourceBindingId: e.binding, SuccessorBindingId: successorBindingID}
	resp, err := call(ctx, e.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ReserveSuccessorResponse, error) {
		return e.c.api.ReserveSuccessor(ctx, req, opts...)
	})
	if err != nil {
		return err
	}
	e.set(resp.GetEnvironment(), nil)
	return nil
}

// ReferenceIntent is a reference left unfinished (pending create, pending delete, reserved
// successor): the crash-recovery feed a platform reconciles at start-up.
type ReferenceIntent struct {
	Environment *executionv1.EnvironmentRef
	Reference   *executionv1.Reference
}

// ListOptions select ListEnvironments' environments; the zero value selects all of the
// owner's.
type ListOptions struct {
	// BindingID keeps only that binding's environment.
	BindingID string
	// Lifecycle keeps only environments in these states.
	Lifecycle []executionv1.LifecycleState
	// Metadata keeps only environments whose metadata has every entry.
	Metadata map[string]string
	// PageSize is the server's page (0: its default of 100).
	PageSize uint32
}

// ListEnvironments iterates over the environments this client created for owner, ordered
// by id, page by page (deleted ones are never listed).
func (c *Client) ListEnvironments(ctx context.Context, owner Owner, o ListOptions) iter.Seq2[*executionv1.Environment, error] {
	return func(yield func(*executionv1.Environment, error) bool) {
		token := ""
		for {
			envs, next, err := c.ListEnvironmentsPage(ctx, owner, o, token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, env := range envs {
				if !yield(env, nil) {
					return
				}
			}
			if token = next; token == "" {
				return
			}
		}
	}
}

// ListEnvironmentsPage answers one page of ListEnvironments from a page token ("" for the
// first), and the next page's token ("" after the last): for callers that hand pages on.
func (c *Client) ListEnvironmentsPage(ctx context.Context, owner Owner, o ListOptions, token string) ([]*executionv1.Environment, string, error) {
	req := &executionv1.ListEnvironmentsRequest{Owner: owner.proto(), BindingId: o.BindingID, Lifecycle: o.Lifecycle,
		Metadata: o.Metadata, PageSize: o.PageSize, PageToken: token}
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ListEnvironmentsResponse, error) {
		return c.api.ListEnvironments(ctx, req, opts...)
	})
	if err != nil {
		return nil, "", err
	}
	return resp.GetEnvironments(), resp.GetNextPageToken(), nil
}

// ListReferenceIntents iterates over the client's unfinished references, page by page: one
// owner's, or every owner's when owner is the zero Owner.
func (c *Client) ListReferenceIntents(ctx context.Context, owner Owner) iter.Seq2[ReferenceIntent, error] {
	return func(yield func(ReferenceIntent, error) bool) {
		token := ""
		for {
			req := &executionv1.ListReferenceIntentsRequest{PageToken: token}
			if owner != (Owner{}) {
				req.Owner = owner.proto()
			}
			resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ListReferenceIntentsResponse, error) {
				return c.api.ListReferenceIntents(ctx, req, opts...)
			})
			if err != nil {
				yield(ReferenceIntent{}, err)
				return
			}
			for _, in := range resp.GetIntents() {
				if !yield(ReferenceIntent{Environment: in.GetEnvironment(), Reference: in.GetReference()}, nil) {
					return
				}
			}
			if token = resp.GetNextPageToken(); token == "" {
				return
			}
		}
	}
}
