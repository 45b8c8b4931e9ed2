package gateway

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/pkg/apierror"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// QuiesceExecutor holds an executor's processes stopped for a snapshot's cut
// (podexec.Pool).
type QuiesceExecutor interface {
	Quiesce(ctx context.Context, t podexec.Target, d time.Duration) (*podexec.Hold, error)
}

// quiesceSlack is how much longer than the cut's deadline the helper holds the quiesce at
// most: the cut is judged by its deadline (the copy's end by the node's clock against it,
// set by this gateway's), which falls within the hold by this much.
const quiesceSlack = 20 * time.Second

// maxHold is the helper's bound on a quiesce (30 minutes).
const maxHold = 30 * time.Minute

// defaultMaxQuiesce applies when the controller names no bound (profile.DefaultMaxQuiesce).
const defaultMaxQuiesce = 2 * time.Minute

// CreateSnapshot implements ExecutionProviderService: the snapshot begun, the source's
// executor quiesced while it is cut, the answer once it is cut (docs/snapshots.md).
func (h *Handler) CreateSnapshot(ctx context.Context, in *executionv1.CreateSnapshotRequest) (*executionv1.CreateSnapshotResponse, error) {
	c, _, err := h.begin(ctx, in)
	if err != nil {
		return nil, err
	}
	begun, err := h.b.Control.BeginSnapshot(ctx, &controlv1.BeginSnapshotRequest{Caller: c, Request: in})
	if err != nil {
		return nil, err
	}
	if begun.GetSnapshot().GetState() != executionv1.SnapshotState_SNAPSHOT_STATE_PENDING {
		return &executionv1.CreateSnapshotResponse{Snapshot: begun.GetSnapshot()}, nil // a retry: as it is
	}
	maxQuiesce := begun.GetMaxQuiesce().AsDuration()
	if maxQuiesce <= 0 {
		maxQuiesce = defaultMaxQuiesce
	}
	// The hold and the cut outlive the caller's call: a caller gone mid-cut must not end the
	// hold while a copy still runs (the helper, too, holds until its deadline unless released).
	hold := min(maxQuiesce+quiesceSlack, maxHold)
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hold+quiesceSlack)
	defer cancel()
	quiesced := false
	if ex := begun.GetExecutor(); ex != nil {
		if ex.GetPodName() == "" {
			return nil, fmt.Errorf("%w: the source's executor is changing: retry", apierror.ErrNotReady)
		}
		q, ok := h.b.Executor.(QuiesceExecutor)
		if !ok {
			return nil, fmt.Errorf("%w: this gateway cannot quiesce executors", apierror.ErrUnimplemented)
		}
		held, err := q.Quiesce(ctx, podexec.Target{Pod: podexec.PodRef{Name: ex.GetPodName(), UID: types.UID(ex.GetPodUid())}}, hold)
		if err != nil {
			return nil, err
		}
		defer held.Release()
		quiesced = true
	}
	cut, err := h.b.Control.CutSnapshot(ctx, &controlv1.CutSnapshotRequest{
		Caller: c, Owner: in.GetTarget().GetOwner(), Name: in.GetName(), Quiesced: quiesced,
		CutBy: timestamppb.New(time.Now().Add(hold - quiesceSlack)),
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.CreateSnapshotResponse{Snapshot: cut.GetSnapshot()}, nil
}

// GetSnapshot implements ExecutionProviderService.
func (h *Handler) GetSnapshot(ctx context.Context, in *executionv1.GetSnapshotRequest) (*executionv1.GetSnapshotResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.GetSnapshot, func(c *controlv1.Caller) *controlv1.GetSnapshotRequest {
		return &controlv1.GetSnapshotRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.GetSnapshotResponse{Snapshot: reply.GetSnapshot()}, nil
}

// ListSnapshots implements ExecutionProviderService.
func (h *Handler) ListSnapshots(ctx context.Context, in *executionv1.ListSnapshotsRequest) (*executionv1.ListSnapshotsResponse, error) {
	return forward(ctx, h, in, h.b.Control.ListSnapshots, func(c *controlv1.Caller) *controlv1.ListSnapshotsRequest {
		return &controlv1.ListSnapshotsRequest{Caller: c, Request: in}
	})
}

// DeleteSnapshot implements ExecutionProviderService.
func (h *Handler) DeleteSnapshot(ctx context.Context, in *executionv1.DeleteSnapshotRequest) (*executionv1.DeleteSnapshotResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.DeleteSnapshot, func(c *controlv1.Caller) *controlv1.DeleteSnapshotRequest {
		return &controlv1.DeleteSnapshotRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.DeleteSnapshotResponse{Snapshot: reply.GetSnapshot()}, nil
}
