package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/pkg/apierror"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// A detached start and the quota slot the leader admits it under: a start replayed by its
// id answers its command when the quota is full now — the helper asked to replay only, so
// that no command begins uncounted; a start that fails gives back only the slot its own
// admission took; a replay of an ended command keeps no slot.
func TestHandlerDetachedStartQuota(t *testing.T) {
	k := newKeys(t)
	first := timestamppb.New(time.Unix(1_800_000_000, 0))
	quotaFull := apierror.Status(apierror.WithMetadata(fmt.Errorf("%w: the owner quota detachedCommands (limit 1, in use 1)", apierror.ErrQuotaExceeded),
		map[string]string{"quota": "detachedCommands"}), testReqID)
	quotaRefused := answer{codes.ResourceExhausted, "QUOTA_EXCEEDED", false}
	info := func(state executionv1.CommandState, at *timestamppb.Timestamp) *executionv1.CommandInfo {
		c := &executionv1.CommandInfo{CommandId: "cmd-1", Detached: true, State: state, StartedAt: at}
		if state != executionv1.CommandState_COMMAND_STATE_RUNNING {
			c.Result = &executionv1.CommandResult{State: state}
		}
		return c
	}
	cancelled := executionv1.CommandState_COMMAND_STATE_CANCELLED
	running := executionv1.CommandState_COMMAND_STATE_RUNNING
	// helper has record (nil: no command of the id): a start answers it, or begins started;
	// a replay-only start answers it, or NOT_FOUND.
	helper := func(record, started *executionv1.CommandInfo) func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
		return func(_ context.Context, _ *world, req *helperv1.Request) (*helperv1.Response, error) {
			c := record
			if c == nil && !req.GetDurable().GetStart().GetReplayOnly() {
				c = started
			}
			if c == nil {
				return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_Error{Error: &helperv1.Error{
					Code: helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, Message: "no such command"}}}, nil
			}
			return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_Durable{Durable: &helperv1.DurableResult{
				Commands: []*executionv1.CommandInfo{c}}}}, nil
		}
	}
	refuses := func(code helperv1.ErrorCode) func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
		return helperRefuses(code, "refused")
	}
	for _, c := range []struct {
		name  string
		admit func(*controlv1.AdmitCommandRequest) (*controlv1.AdmitCommandResponse, error)
		exec  func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error)
		want  answer
		state executionv1.CommandState
		// ops are the helper's operations, controls the leader's calls ("admit", "release").
		ops, controls []string
	}{
		{name: "a new command, a slot taken", admit: taken(true, nil), exec: helper(nil, info(running, first)),
			want: ok, state: running, ops: []string{"start"}, controls: []string{"admit"}},
		{name: "a replay of an ended command, a slot taken", admit: taken(true, nil), exec: helper(info(cancelled, first), nil),
			want: ok, state: cancelled, ops: []string{"start"}, controls: []string{"admit", "release"}},
		{name: "a replay of an ended command, its slot listed already", admit: taken(false, nil), exec: helper(info(cancelled, first), nil),
			want: ok, state: cancelled, ops: []string{"start"}, controls: []string{"admit", "release"}},
		{name: "a start failed, a slot taken", admit: taken(true, nil), exec: refuses(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS),
			want: answer{codes.Aborted, "OPERATION_ID_REUSED", false}, ops: []string{"start"}, controls: []string{"admit", "release"}},
		{name: "a start failed, the slot another start's", admit: taken(false, nil), exec: refuses(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS),
			want: answer{codes.Aborted, "OPERATION_ID_REUSED", false}, ops: []string{"start"}, controls: []string{"admit"}},
		{name: "a start failed, a controller before taken", admit: func(*controlv1.AdmitCommandRequest) (*controlv1.AdmitCommandResponse, error) {
			return &controlv1.AdmitCommandResponse{}, nil
		}, exec: refuses(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS),
			want: answer{codes.Aborted, "OPERATION_ID_REUSED", false}, ops: []string{"start"}, controls: []string{"admit", "release"}},
		{name: "the quota full, a replay of a running command", admit: taken(false, quotaFull), exec: helper(info(running, first), nil),
			want: ok, state: running, ops: []string{"replay"}, controls: []string{"admit"}},
		{name: "the quota full, a replay of an ended command", admit: taken(false, quotaFull), exec: helper(info(cancelled, first), nil),
			want: ok, state: cancelled, ops: []string{"replay"}, controls: []string{"admit", "release"}},
		{name: "the quota full, no such command", admit: taken(false, quotaFull), exec: helper(nil, info(running, first)),
			want: quotaRefused, ops: []string{"replay"}, controls: []string{"admit"}},
		{name: "the quota full, another command under the id", admit: taken(false, quotaFull), exec: refuses(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS),
			want: answer{codes.Aborted, "OPERATION_ID_REUSED", false}, ops: []string{"replay"}, controls: []string{"admit"}},
		{name: "the quota full, a helper that cannot replay only", admit: taken(false, quotaFull), exec: refuses(helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION),
			want: quotaRefused, ops: []string{"replay"}, controls: []string{"admit"}},
		{name: "the quota full, the executor not ready", admit: taken(false, quotaFull), exec: refuses(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE),
			want: quotaRefused, ops: []string{"replay"}, controls: []string{"admit"}},
		{name: "the quota full, the stream broke", admit: taken(false, quotaFull), exec: func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
			return nil, fmt.Errorf("%w: connection reset", podexec.ErrOutcomeUnknown) // a replay-only start began nothing
		}, want: quotaRefused, ops: []string{"replay"}, controls: []string{"admit"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, k, setup{exec: c.exec})
			w.control.admit = c.admit
			resp, err := w.h.StartCommand(callerCtx(t), &executionv1.StartCommandRequest{RunGrant: k.run(t, nil), Environment: testRef(),
				Command: argv("sleep", "300"), Detach: true, CommandId: "cmd-1"})
			expect(t, err, c.want, "")
			if err == nil && resp.GetCommand().GetState() != c.state {
				t.Errorf("answered %v, want %v", resp.GetCommand().GetState(), c.state)
			}
			var ops, controls []string
			for _, call := range w.exec.recorded() {
				switch d := call.Request.GetDurable(); {
				case d.GetStatus() != nil:
					ops = append(ops, "status")
				case d.GetStart().GetReplayOnly():
					ops = append(ops, "replay")
				case d.GetStart() != nil:
					ops = append(ops, "start")
				default:
					ops = append(ops, fmt.Sprint(d))
				}
			}
			for _, call := range w.control.recorded() {
				if call.Request.(*controlv1.AdmitCommandRequest).GetRelease() {
					controls = append(controls, "release")
				} else {
					controls = append(controls, "admit")
				}
			}
			if diff := cmp.Diff(c.ops, ops); diff != "" {
				t.Errorf("the helper's operations (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.controls, controls); diff != "" {
				t.Errorf("the leader's calls (-want +got):\n%s", diff)
			}
		})
	}
}

// taken answers AdmitCommand with a slot taken or not, or err.
func taken(t bool, err error) func(*controlv1.AdmitCommandRequest) (*controlv1.AdmitCommandResponse, error) {
	return func(in *controlv1.AdmitCommandRequest) (*controlv1.AdmitCommandResponse, error) {
		if in.GetRelease() {
			return &controlv1.AdmitCommandResponse{}, nil
		}
		if err != nil {
			return nil, err
		}
		return &controlv1.AdmitCommandResponse{Taken: &t}, nil
	}
}
