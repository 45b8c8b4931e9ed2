package client

import (
	"context"

	"google.golang.org/grpc"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Preconditions are exact expectations about an environment's current state for an
// administrative call: each set field must equal the current value, or the call fails with
// ErrPreconditionFailed and nothing changes. Which fields a call requires is stated on it.
type Preconditions struct {
	Epoch           *uint64
	PodUID          *string // "" asserts that there is no Pod
	PVCUID          *string
	GrantGeneration *uint64
}

// PreconditionsOf returns every precondition as the environment shows it: the call then
// acts only on exactly the state that was looked at.
func PreconditionsOf(env *executionv1.Environment) Preconditions {
	epoch, gen, pod, pvc := env.GetEpoch(), env.GetGrantGeneration(), env.GetPodUid(), env.GetPvcUid()
	return Preconditions{Epoch: &epoch, PodUID: &pod, PVCUID: &pvc, GrantGeneration: &gen}
}

func (p Preconditions) proto() *executionv1.AdminPreconditions {
	return &executionv1.AdminPreconditions{Epoch: p.Epoch, PodUid: p.PodUID, PvcUid: p.PVCUID, GrantGeneration: p.GrantGeneration}
}

// AdminRequest names the environment (id and revision) an administrative call acts on.
type AdminRequest struct {
	ID, Revision  string
	Preconditions Preconditions
	// Reason is recorded in events (at most 256 printable bytes).
	Reason string
}

func (r AdminRequest) ref() *executionv1.EnvironmentRef {
	return &executionv1.EnvironmentRef{Id: r.ID, Revision: r.Revision}
}

// admin runs one administrative RPC with a fresh operation id reused by its retries.
func admin[T withEnvironment](ctx context.Context, c *Client, rpc func(context.Context, string, ...grpc.CallOption) (T, error)) (*executionv1.Environment, error) {
	op := newOperationID()
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (T, error) { return rpc(ctx, op, opts...) })
	if err != nil {
		return nil, err
	}
	return resp.GetEnvironment(), nil
}

// Retire stops the executor Pod and keeps the workspace. Requires Preconditions.Epoch.
func (c *Client) Retire(ctx context.Context, r AdminRequest) (*executionv1.Environment, error) {
	return admin(ctx, c, func(ctx context.Context, op string, opts ...grpc.CallOption) (*executionv1.RetireEnvironmentResponse, error) {
		return c.api.RetireEnvironment(ctx, &executionv1.RetireEnvironmentRequest{OperationId: op, Environment: r.ref(), Preconditions: r.Preconditions.proto(), Reason: r.Reason}, opts...)
	})
}

// Replace replaces the executor Pod on the same workspace; the epoch rises once the old
// Pod's end is recorded. Requires Epoch and PodUID.
func (c *Client) Replace(ctx context.Context, r AdminRequest) (*executionv1.Environment, error) {
	return admin(ctx, c, func(ctx context.Context, op string, opts ...grpc.CallOption) (*executionv1.ReplaceExecutorResponse, error) {
		return c.api.ReplaceExecutor(ctx, &executionv1.ReplaceExecutorRequest{OperationId: op, Environment: r.ref(), Preconditions: r.Preconditions.proto(), Reason: r.Reason}, opts...)
	})
}

// Revoke kills every grant issued so far for the environment. Requires GrantGeneration.
func (c *Client) Revoke(ctx context.Context, r AdminRequest) (*executionv1.Environment, error) {
	return admin(ctx, c, func(ctx context.Context, op string, opts ...grpc.CallOption) (*executionv1.RevokeEnvironmentResponse, error) {
		return c.api.RevokeEnvironment(ctx, &executionv1.RevokeEnvironmentRequest{OperationId: op, Environment: r.ref(), Preconditions: r.Preconditions.proto(), Reason: r.Reason}, opts...)
	})
}

// Recover clears a fence given exact proof of the fenced executor's fate. Requires Epoch and
// PodUID (the fenced executor's UID, "" when it never existed).
func (c *Client) Recover(ctx context.Context, r AdminRequest) (*executionv1.Environment, error) {
	return admin(ctx, c, func(ctx context.Context, op string, opts ...grpc.CallOption) (*executionv1.RecoverEnvironmentResponse, error) {
		return c.api.RecoverEnvironment(ctx, &executionv1.RecoverEnvironmentRequest{OperationId: op, Environment: r.ref(), Preconditions: r.Preconditions.proto(), Reason: r.Reason}, opts...)
	})
}

// Migrate upgrades an environment to targetSchema (the gateway's current schema version);
// migrated is false when it was already there. Requires Epoch.
func (c *Client) Migrate(ctx context.Context, r AdminRequest, targetSchema uint32) (env *executionv1.Environment, migrated bool, err error) {
	op := newOperationID()
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.MigrateEnvironmentResponse, error) {
		return c.api.MigrateEnvironment(ctx, &executionv1.MigrateEnvironmentRequest{OperationId: op, Environment: r.ref(), Preconditions: r.Preconditions.proto(), TargetSchemaVersion: targetSchema}, opts...)
	})
	if err != nil {
		return nil, false, err
	}
	return resp.GetEnvironment(), resp.GetMigrated(), nil
}

// DeleteRetired deletes a retired environment's workspace (its PVC), then the environment.
// Requires PVCUID.
func (c *Client) DeleteRetired(ctx context.Context, r AdminRequest) error {
	op := newOperationID()
	_, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.DeleteRetiredEnvironmentResponse, error) {
		return c.api.DeleteRetiredEnvironment(ctx, &executionv1.DeleteRetiredEnvironmentRequest{OperationId: op, Environment: r.ref(), Preconditions: r.Preconditions.proto(), Reason: r.Reason}, opts...)
	})
	return err
}
