package client

import (
	"context"

	"google.golang.org/grpc"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Snapshot is an owner's snapshot of an environment's workspace (docs/snapshots.md): its
// name, state (SnapshotReady once restorable), method, source, times and size.
type Snapshot = executionv1.Snapshot

// Snapshot states.
const (
	SnapshotPending  = executionv1.SnapshotState_SNAPSHOT_STATE_PENDING
	SnapshotCutting  = executionv1.SnapshotState_SNAPSHOT_STATE_CUTTING
	SnapshotReady    = executionv1.SnapshotState_SNAPSHOT_STATE_READY
	SnapshotFailed   = executionv1.SnapshotState_SNAPSHOT_STATE_FAILED
	SnapshotDeleting = executionv1.SnapshotState_SNAPSHOT_STATE_DELETING
)

// Snapshot takes a crash-consistent snapshot of this environment's workspace named name
// (a DNS label, unique per owner): the executor's processes are stopped while it is cut.
// It returns once the snapshot is cut (SnapshotReady, or SnapshotFailed with why). Retried
// calls are the same request. Ensure with EnsureRequest.FromSnapshot restores it into a new
// environment; Fork does both.
func (e *Environment) Snapshot(ctx context.Context, name string) (*Snapshot, error) {
	req := &executionv1.CreateSnapshotRequest{OperationId: newOperationID(), Name: name,
		Target: &executionv1.ReferenceTarget{Owner: e.owner.proto(), Environment: e.Ref(), BindingId: e.binding}}
	resp, err := call(ctx, e.c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.CreateSnapshotResponse, error) {
		return e.c.api.CreateSnapshot(ctx, req, opts...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSnapshot(), nil
}

// Fork snapshots this environment as snapshot and ensures binding's environment from it on
// profile: an independent copy of the workspace, with no durable command running and none
// of this environment's grants. The snapshot stays (the caller's to delete).
func (e *Environment) Fork(ctx context.Context, snapshot string, r EnsureRequest) (*Environment, error) {
	snap, err := e.Snapshot(ctx, snapshot)
	if err != nil {
		return nil, err
	}
	if snap.GetState() != SnapshotReady {
		return nil, &snapshotFailed{snap: snap}
	}
	r.Owner, r.FromSnapshot = e.owner, snapshot
	return e.c.Ensure(ctx, r)
}

// snapshotFailed is a Fork whose snapshot was not cut.
type snapshotFailed struct{ snap *Snapshot }

func (s *snapshotFailed) Error() string {
	return "execplane: snapshot " + s.snap.GetName() + " " + s.snap.GetState().String() + ": " + s.snap.GetFailureReason() + " " + s.snap.GetFailureMessage()
}

// GetSnapshot answers one of owner's snapshots.
func (c *Client) GetSnapshot(ctx context.Context, owner Owner, name string) (*Snapshot, error) {
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.GetSnapshotResponse, error) {
		return c.api.GetSnapshot(ctx, &executionv1.GetSnapshotRequest{Owner: owner.proto(), Name: name}, opts...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSnapshot(), nil
}

// Snapshots lists owner's snapshots (this client's), by name.
func (c *Client) Snapshots(ctx context.Context, owner Owner) ([]*Snapshot, error) {
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ListSnapshotsResponse, error) {
		return c.api.ListSnapshots(ctx, &executionv1.ListSnapshotsRequest{Owner: owner.proto()}, opts...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSnapshots(), nil
}

// DeleteSnapshot deletes one of owner's snapshots; environments restored from it keep
// their files.
func (c *Client) DeleteSnapshot(ctx context.Context, owner Owner, name string) (*Snapshot, error) {
	req := &executionv1.DeleteSnapshotRequest{OperationId: newOperationID(), Owner: owner.proto(), Name: name}
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.DeleteSnapshotResponse, error) {
		return c.api.DeleteSnapshot(ctx, req, opts...)
	})
	if err != nil {
		return nil, err
	}
	return resp.GetSnapshot(), nil
}
