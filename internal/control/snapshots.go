package control

import (
	"context"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/store"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// cutPoll is how often CutSnapshot looks at the snapshot while it waits for the cut.
const cutPoll = 100 * time.Millisecond

// BeginSnapshot implements ControlService: the snapshot recorded, and the executor to
// quiesce when its source runs.
func (s *Server) BeginSnapshot(ctx context.Context, in *controlv1.BeginSnapshotRequest) (*controlv1.SnapshotReply, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("BeginSnapshot", in.GetCaller(), err)
	}
	r := in.GetRequest()
	snap, err := st.BeginSnapshot(ctx, store.SnapshotInput{ReferenceInput: target(r.GetTarget(), caller, r.GetOperationId()), Name: r.GetName()})
	if err != nil {
		return nil, s.status("BeginSnapshot", in.GetCaller(), err)
	}
	out := &controlv1.SnapshotReply{Snapshot: SnapshotView(snap)}
	if pending(snap) && snap.Spec.Source.PodUID != "" {
		out.Executor = &controlv1.SnapshotExecutor{PodName: st.SourcePod(snap), PodUid: snap.Spec.Source.PodUID}
		out.MaxQuiesce = durationpb.New(st.QuiesceBound(snap.Spec.Source.Profile))
	}
	return out, nil
}

// CutSnapshot implements ControlService: the cut begun, and waited for until it is done
// (READY or FAILED) or the cut's deadline has passed.
func (s *Server) CutSnapshot(ctx context.Context, in *controlv1.CutSnapshotRequest) (*controlv1.SnapshotReply, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("CutSnapshot", in.GetCaller(), err)
	}
	t := store.SnapshotTarget{Caller: caller, Owner: owner(in.GetOwner()), Name: in.GetName()}
	var cmds []executionv1alpha1.SnapshotCommand
	for _, c := range in.GetCommands() {
		sc := executionv1alpha1.SnapshotCommand{ID: truncate(c.GetCommandId(), 128), State: truncate(c.GetState().String(), 32)}
		if c.ExitCode != nil {
			code := c.GetExitCode()
			sc.ExitCode = &code
		}
		cmds = append(cmds, sc)
	}
	cutBy := in.GetCutBy().AsTime()
	snap, err := st.CutSnapshot(ctx, t, in.GetQuiesced(), cmds, cutBy)
	if err != nil {
		return nil, s.status("CutSnapshot", in.GetCaller(), err)
	}
	wait, cancel := context.WithDeadline(ctx, cutBy)
	defer cancel()
	tick := time.NewTicker(cutPoll)
	defer tick.Stop()
	for snap.Status.Phase == executionv1alpha1.SnapshotCutting {
		select {
		case <-wait.Done():
			return &controlv1.SnapshotReply{Snapshot: SnapshotView(snap)}, nil
		case <-tick.C:
		}
		if next, err := st.GetSnapshot(ctx, t); err == nil {
			snap = next
		}
	}
	return &controlv1.SnapshotReply{Snapshot: SnapshotView(snap)}, nil
}

// GetSnapshot implements ControlService.
func (s *Server) GetSnapshot(ctx context.Context, in *controlv1.GetSnapshotRequest) (*controlv1.SnapshotReply, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("GetSnapshot", in.GetCaller(), err)
	}
	r := in.GetRequest()
	snap, err := st.GetSnapshot(ctx, store.SnapshotTarget{Caller: caller, Owner: owner(r.GetOwner()), Name: r.GetName()})
	if err != nil {
		return nil, s.status("GetSnapshot", in.GetCaller(), err)
	}
	return &controlv1.SnapshotReply{Snapshot: SnapshotView(snap)}, nil
}

// ListSnapshots implements ControlService.
func (s *Server) ListSnapshots(ctx context.Context, in *controlv1.ListSnapshotsRequest) (*executionv1.ListSnapshotsResponse, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("ListSnapshots", in.GetCaller(), err)
	}
	list, err := st.ListSnapshots(ctx, caller, owner(in.GetRequest().GetOwner()))
	if err != nil {
		return nil, s.status("ListSnapshots", in.GetCaller(), err)
	}
	out := &executionv1.ListSnapshotsResponse{}
	for _, snap := range list {
		out.Snapshots = append(out.Snapshots, SnapshotView(snap))
	}
	return out, nil
}

// DeleteSnapshot implements ControlService.
func (s *Server) DeleteSnapshot(ctx context.Context, in *controlv1.DeleteSnapshotRequest) (*controlv1.SnapshotReply, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("DeleteSnapshot", in.GetCaller(), err)
	}
	r := in.GetRequest()
	snap, err := st.DeleteSnapshot(ctx, store.SnapshotTarget{Caller: caller, Owner: owner(r.GetOwner()), Name: r.GetName()})
	if err != nil {
		return nil, s.status("DeleteSnapshot", in.GetCaller(), err)
	}
	return &controlv1.SnapshotReply{Snapshot: SnapshotView(snap)}, nil
}

func pending(snap *executionv1alpha1.ExecutionSnapshot) bool {
	return snap.DeletionTimestamp == nil && (snap.Status.Phase == "" || snap.Status.Phase == executionv1alpha1.SnapshotPending)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// SnapshotView is the public view of a snapshot.
func SnapshotView(snap *executionv1alpha1.ExecutionSnapshot) *executionv1.Snapshot {
	st := &snap.Status
	out := &executionv1.Snapshot{
		Name: snap.Spec.Name, Method: executionv1.SnapshotMethod_SNAPSHOT_METHOD_COPY,
		Source:          &executionv1.EnvironmentRef{Id: snap.Spec.Source.Environment, Revision: snap.Spec.Source.UID},
		SourceBindingId: snap.Spec.Source.BindingID, Profile: snap.Spec.Source.Profile,
		CreatedAt: timestamppb.New(snap.CreationTimestamp.Time), SizeBytes: st.RestoreBytes,
	}
	if snap.Spec.Method == executionv1alpha1.SnapshotCSI {
		out.Method = executionv1.SnapshotMethod_SNAPSHOT_METHOD_CSI
	}
	switch {
	case snap.DeletionTimestamp != nil:
		out.State = executionv1.SnapshotState_SNAPSHOT_STATE_DELETING
	case st.Phase == executionv1alpha1.SnapshotCutting:
		out.State = executionv1.SnapshotState_SNAPSHOT_STATE_CUTTING
	case st.Phase == executionv1alpha1.SnapshotReady:
		out.State = executionv1.SnapshotState_SNAPSHOT_STATE_READY
	case st.Phase == executionv1alpha1.SnapshotFailed:
		out.State = executionv1.SnapshotState_SNAPSHOT_STATE_FAILED
	default:
		out.State = executionv1.SnapshotState_SNAPSHOT_STATE_PENDING
	}
	if st.CutAt != nil {
		out.CutAt = timestamppb.New(st.CutAt.Time)
	}
	if st.ReadyAt != nil {
		out.ReadyAt = timestamppb.New(st.ReadyAt.Time)
	}
	if out.SizeBytes == 0 {
		out.SizeBytes = snap.Spec.Storage.Bytes
	}
	for _, c := range st.Commands {
		sc := &executionv1.SnapshotCommand{CommandId: c.ID, State: executionv1.CommandState(executionv1.CommandState_value[c.State])}
		if c.ExitCode != nil {
			code := *c.ExitCode
			sc.ExitCode = &code
		}
		out.Commands = append(out.Commands, sc)
	}
	if f := st.Failure; f != nil {
		out.FailureReason, out.FailureMessage = f.Reason, f.Message
	}
	return out
}
