package gateway

import (
	"context"
	"errors"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/podexec"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/grant"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Small fakes of the Handler's consumer interfaces: no cluster, no exec, no controller.

// fakeEnvironments is an EnvironmentSource over a map. Await behaves like Environments.Await:
// check runs on the current entry (nil when absent) and again after every set, until it
// returns anything but grant.ErrNotObserved, for at most wait and never past ctx.
type fakeEnvironments struct {
	mu      sync.Mutex
	envs    map[string]*executionv1alpha1.ExecutionEnvironment
	changed chan struct{} // closed (and replaced) by set
	// err, when set, is returned by Await without running check (a view that cannot judge,
	// such as one not synced yet).
	err error
	// stale, when set, is what Fresh returns (a view not proven current).
	stale error
}

func newFakeEnvironments(envs ...*executionv1alpha1.ExecutionEnvironment) *fakeEnvironments {
	f := &fakeEnvironments{envs: map[string]*executionv1alpha1.ExecutionEnvironment{}, changed: make(chan struct{})}
	for _, e := range envs {
		f.envs[e.Name] = e
	}
	return f
}

// set replaces (or, with a nil env, removes) an entry and wakes every Await. Entries are
// replaced, never mutated, so a handler holding the previous one reads it without a race.
func (f *fakeEnvironments) set(name string, env *executionv1alpha1.ExecutionEnvironment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if env == nil {
		delete(f.envs, name)
	} else {
		f.envs[name] = env
	}
	close(f.changed)
	f.changed = make(chan struct{})
}

func (f *fakeEnvironments) get(name string) (*executionv1alpha1.ExecutionEnvironment, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.envs[name], f.changed
}

func (f *fakeEnvironments) Fresh() error { return f.stale }

func (f *fakeEnvironments) Await(ctx context.Context, name string, wait time.Duration, check func(*executionv1alpha1.ExecutionEnvironment) error) error {
	if f.err != nil {
		return f.err
	}
	timeout := time.NewTimer(wait)
	defer timeout.Stop()
	for {
		env, changed := f.get(name)
		err := check(env)
		if !errors.Is(err, grant.ErrNotObserved) {
			return err
		}
		select {
		case <-changed:
		case <-timeout.C:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// execCall is one call the executor received.
type execCall struct {
	Pod         podexec.PodRef
	Request     *helperv1.Request
	ResponseCap int
	// Deadline is the call context's deadline (zero when it has none).
	Deadline time.Time
}

// fakeExecutor records every call and answers with do (a successful empty response when nil).
type fakeExecutor struct {
	do func(ctx context.Context, req *helperv1.Request) (*helperv1.Response, error)

	mu      sync.Mutex
	calls   []execCall
	entered chan struct{} // receives once per call, when the call is recorded (never blocks)
}

func newFakeExecutor() *fakeExecutor { return &fakeExecutor{entered: make(chan struct{}, 64)} }

func (f *fakeExecutor) Execute(ctx context.Context, t podexec.Target, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
	deadline, _ := ctx.Deadline()
	f.mu.Lock()
	f.calls = append(f.calls, execCall{Pod: t.Pod, Request: proto.CloneOf(req), ResponseCap: responseCap, Deadline: deadline})
	f.mu.Unlock()
	select {
	case f.entered <- struct{}{}:
	default:
	}
	if f.do == nil {
		return defaultAnswer(req), nil
	}
	return f.do(ctx, req)
}

// defaultAnswer is what a helper would answer when the fake is not told: nothing for a
// file operation or a command, and for a durable operation the record of an ended command
// of the id asked about (an empty listing for a list).
func defaultAnswer(req *helperv1.Request) *helperv1.Response {
	d := req.GetDurable()
	if d == nil {
		return &helperv1.Response{RequestId: req.GetRequestId()}
	}
	res := &helperv1.DurableResult{}
	id := d.GetStatus().GetCommandId() + d.GetCancel().GetCommandId() + d.GetFollow().GetCommandId() + d.GetStart().GetCommandId()
	if d.GetList() == nil {
		res.Commands = []*executionv1.CommandInfo{{CommandId: id, State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED,
			Result: &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED}}}
		res.Complete = d.GetFollow() != nil
		if d.GetStart() != nil { // a start answers the command running, as the helper does
			res.Commands[0].State, res.Commands[0].Result = executionv1.CommandState_COMMAND_STATE_RUNNING, nil
		}
	}
	return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_Durable{Durable: res}}
}

func (f *fakeExecutor) recorded() []execCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]execCall(nil), f.calls...)
}

// controlCall is one call the control API received.
type controlCall struct {
	Method  string
	Request proto.Message
}

// fakeControl is a controlv1.ControlServiceClient that records every call and answers reply
// (or list, for ListReferenceIntents) or err.
type fakeControl struct {
	reply *controlv1.EnvironmentReply
	list  *executionv1.ListReferenceIntentsResponse
	err   error
	// admit answers AdmitCommand when set (a slot not taken, or err, otherwise).
	admit func(*controlv1.AdmitCommandRequest) (*controlv1.AdmitCommandResponse, error)

	mu    sync.Mutex
	calls []controlCall
}

var _ controlv1.ControlServiceClient = (*fakeControl)(nil)

func (f *fakeControl) record(method string, in proto.Message) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, controlCall{Method: method, Request: proto.Clone(in)})
}

func (f *fakeControl) recorded() []controlCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]controlCall(nil), f.calls...)
}

func (f *fakeControl) answer(method string, in proto.Message) (*controlv1.EnvironmentReply, error) {
	f.record(method, in)
	if f.err != nil {
		return nil, f.err
	}
	return proto.CloneOf(f.reply), nil
}

func (f *fakeControl) Ensure(_ context.Context, in *controlv1.EnsureRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Ensure", in)
}

func (f *fakeControl) Attach(_ context.Context, in *controlv1.AttachRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Attach", in)
}

func (f *fakeControl) Suspend(_ context.Context, in *controlv1.SuspendRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Suspend", in)
}

func (f *fakeControl) Resume(_ context.Context, in *controlv1.ResumeRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Resume", in)
}

func (f *fakeControl) Delete(_ context.Context, in *controlv1.DeleteRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Delete", in)
}

func (f *fakeControl) SetRetention(_ context.Context, in *controlv1.SetRetentionRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("SetRetention", in)
}

func (f *fakeControl) SetDeadline(_ context.Context, in *controlv1.SetDeadlineRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("SetDeadline", in)
}

func (f *fakeControl) ListEnvironments(_ context.Context, in *controlv1.ListEnvironmentsRequest, _ ...grpc.CallOption) (*executionv1.ListEnvironmentsResponse, error) {
	f.record("ListEnvironments", in)
	if f.err != nil {
		return nil, f.err
	}
	return &executionv1.ListEnvironmentsResponse{Environments: []*executionv1.Environment{f.reply.GetEnvironment()}}, nil
}

func (f *fakeControl) GetUsage(_ context.Context, in *controlv1.GetUsageRequest, _ ...grpc.CallOption) (*executionv1.GetUsageResponse, error) {
	f.record("GetUsage", in)
	if f.err != nil {
		return nil, f.err
	}
	return &executionv1.GetUsageResponse{Environment: in.GetRequest().GetEnvironment()}, nil
}

func (f *fakeControl) ListUsage(_ context.Context, in *controlv1.ListUsageRequest, _ ...grpc.CallOption) (*executionv1.ListUsageResponse, error) {
	f.record("ListUsage", in)
	if f.err != nil {
		return nil, f.err
	}
	return &executionv1.ListUsageResponse{}, nil
}

func (f *fakeControl) snapshot(rpc string, in proto.Message) (*controlv1.SnapshotReply, error) {
	f.record(rpc, in)
	if f.err != nil {
		return nil, f.err
	}
	return &controlv1.SnapshotReply{Snapshot: &executionv1.Snapshot{Name: "s", State: executionv1.SnapshotState_SNAPSHOT_STATE_READY}}, nil
}

func (f *fakeControl) BeginSnapshot(_ context.Context, in *controlv1.BeginSnapshotRequest, _ ...grpc.CallOption) (*controlv1.SnapshotReply, error) {
	return f.snapshot("BeginSnapshot", in)
}

func (f *fakeControl) CutSnapshot(_ context.Context, in *controlv1.CutSnapshotRequest, _ ...grpc.CallOption) (*controlv1.SnapshotReply, error) {
	return f.snapshot("CutSnapshot", in)
}

func (f *fakeControl) GetSnapshot(_ context.Context, in *controlv1.GetSnapshotRequest, _ ...grpc.CallOption) (*controlv1.SnapshotReply, error) {
	return f.snapshot("GetSnapshot", in)
}

func (f *fakeControl) DeleteSnapshot(_ context.Context, in *controlv1.DeleteSnapshotRequest, _ ...grpc.CallOption) (*controlv1.SnapshotReply, error) {
	return f.snapshot("DeleteSnapshot", in)
}

func (f *fakeControl) ListSnapshots(_ context.Context, in *controlv1.ListSnapshotsRequest, _ ...grpc.CallOption) (*executionv1.ListSnapshotsResponse, error) {
	f.record("ListSnapshots", in)
	if f.err != nil {
		return nil, f.err
	}
	return &executionv1.ListSnapshotsResponse{}, nil
}

func (f *fakeControl) AdmitCommand(_ context.Context, in *controlv1.AdmitCommandRequest, _ ...grpc.CallOption) (*controlv1.AdmitCommandResponse, error) {
	f.record("AdmitCommand", in)
	if f.admit != nil {
		return f.admit(in)
	}
	if f.err != nil {
		return nil, f.err
	}
	return &controlv1.AdmitCommandResponse{}, nil
}

func (f *fakeControl) ReportUsage(_ context.Context, in *controlv1.ReportUsageRequest, _ ...grpc.CallOption) (*controlv1.ReportUsageResponse, error) {
	f.record("ReportUsage", in)
	if f.err != nil {
		return nil, f.err
	}
	return &controlv1.ReportUsageResponse{}, nil
}

func (f *fakeControl) ReleaseReference(_ context.Context, in *controlv1.ReleaseReferenceRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("ReleaseReference", in)
}

func (f *fakeControl) ReserveSuccessor(_ context.Context, in *controlv1.ReserveSuccessorRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("ReserveSuccessor", in)
}

func (f *fakeControl) CommitReference(_ context.Context, in *controlv1.CommitReferenceRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("CommitReference", in)
}

func (f *fakeControl) AbortReference(_ context.Context, in *controlv1.AbortReferenceRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("AbortReference", in)
}

func (f *fakeControl) PrepareReferenceDelete(_ context.Context, in *controlv1.PrepareReferenceDeleteRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("PrepareReferenceDelete", in)
}

func (f *fakeControl) ConfirmReferenceDelete(_ context.Context, in *controlv1.ConfirmReferenceDeleteRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("ConfirmReferenceDelete", in)
}

func (f *fakeControl) CancelReferenceDelete(_ context.Context, in *controlv1.CancelReferenceDeleteRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("CancelReferenceDelete", in)
}

func (f *fakeControl) ListReferenceIntents(_ context.Context, in *controlv1.ListReferenceIntentsRequest, _ ...grpc.CallOption) (*executionv1.ListReferenceIntentsResponse, error) {
	f.record("ListReferenceIntents", in)
	if f.err != nil {
		return nil, f.err
	}
	if f.list == nil {
		return &executionv1.ListReferenceIntentsResponse{}, nil
	}
	return proto.CloneOf(f.list), nil
}

func (f *fakeControl) AcquireRun(_ context.Context, in *controlv1.AcquireRunRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("AcquireRun", in)
}

func (f *fakeControl) RenewRun(_ context.Context, in *controlv1.RenewRunRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("RenewRun", in)
}

func (f *fakeControl) ReleaseRun(_ context.Context, in *controlv1.ReleaseRunRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("ReleaseRun", in)
}

func (f *fakeControl) Retire(_ context.Context, in *controlv1.RetireRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Retire", in)
}

func (f *fakeControl) Replace(_ context.Context, in *controlv1.ReplaceRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Replace", in)
}

func (f *fakeControl) Revoke(_ context.Context, in *controlv1.RevokeRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Revoke", in)
}

func (f *fakeControl) Recover(_ context.Context, in *controlv1.RecoverRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Recover", in)
}

func (f *fakeControl) Migrate(_ context.Context, in *controlv1.MigrateRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("Migrate", in)
}

func (f *fakeControl) DeleteRetired(_ context.Context, in *controlv1.DeleteRetiredRequest, _ ...grpc.CallOption) (*controlv1.EnvironmentReply, error) {
	return f.answer("DeleteRetired", in)
}
