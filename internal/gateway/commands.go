package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Timing and bounds of durable commands at the gateway (docs/commands.md).
const (
	// followWait is each long poll's wait: a line printed reaches the caller at the
	// helper's next look (25 ms), and an idle command costs one round trip per wait.
	followWait = 2 * time.Second
	// attachTime is how long an attached command (RunCommand without detach) may go
	// unfollowed before its supervisor cancels it: several waits, so a slow round trip does
	// not end a live call's command, and a vanished gateway's commands end within seconds.
	attachTime = 10 * time.Second
	// followBytes bounds the output of one poll (one session response).
	followBytes = 1 << 20
	// cancelAfterCall bounds the cancel an attached command gets when its call ends first.
	cancelAfterCall = 5 * time.Second
	// defaultGrace and cancelSlack: a cancel's grace when unset, and what its call may take
	// beyond it (the kill, the reaping, the record).
	defaultGrace = 10 * time.Second
	cancelSlack  = 10 * time.Second
	// defaultListCommands is a listing's size when unset.
	defaultListCommands = 100
	// durableOverhead bounds what a durable answer carries beside its output: records of
	// about 2 KiB and chunk envelopes.
	durableOverhead = 256 << 10
	// recordBytes bounds one CommandInfo in a listing's answer.
	recordBytes = 8 << 10
)

// newCommandID is a fresh command id: time-ordered (so listings of ids read in start
// order) and random.
func newCommandID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "cmd-" + strconv.FormatInt(time.Now().UnixMilli(), 36) + "-" + hex.EncodeToString(b[:])
}

// durable sends one durable operation to the helper and checks its answer, which the
// executor produced and is not trusted.
func (h *Handler) durable(ctx context.Context, a *admitted, d *helperv1.Durable) (*helperv1.DurableResult, error) {
	if err := protocol.ValidateDurable(d, protocol.DurableLimitsOf(a.limits)); err != nil {
		return nil, podexec.HelperError(err)
	}
	keys, err := h.recordKeys(a.env)
	if err != nil {
		return nil, err
	}
	d.RecordKeys, d.GrantGeneration = keys, a.claims.GrantGeneration
	resp, err := h.execute(ctx, a, &helperv1.Request{Limits: a.limits, Operation: &helperv1.Request_Durable{Durable: d}}, durableCap(d))
	if err != nil {
		if d.GetStart() != nil && errors.Is(err, apierror.ErrAlreadyExists) {
			return nil, fmt.Errorf("%w: command %s exists with another command", apierror.ErrOperationIDReused, d.GetStart().GetCommandId())
		}
		return nil, err
	}
	res := resp.GetDurable()
	if res == nil {
		return nil, fmt.Errorf("%w: another kind of result than a durable command's", podexec.ErrProtocol)
	}
	if err := checkDurable(d, res); err != nil {
		return nil, fmt.Errorf("%w: %v", podexec.ErrProtocol, err)
	}
	if len(keys) == 0 {
		// No record keys in the security material: nothing was sealed or proved.
		for _, c := range res.GetCommands() {
			c.Unverified = true
		}
	}
	return res, nil
}

// recordKeys are the environment's record keys (docs/commands.md "Sealed records"): each key
// of the security material, derived over the environment's UID, the sealing key first. The
// material's own keys never reach an executor.
func (h *Handler) recordKeys(env *executionv1alpha1.ExecutionEnvironment) ([]*helperv1.RecordKey, error) {
	b, ok := h.b.Material()
	if !ok {
		return nil, fmt.Errorf("%w: no security material", apierror.ErrUnavailable)
	}
	if len(b.RecordKeys()) == 0 && h.warnedUnsealed.Swap(b.Generation()) != b.Generation() {
		h.log.Warn("the security material has no recordKeys: durable command records are not sealed, and every answer about a command says unverified (docs/commands.md \"Sealed records\")",
			logging.KeyGeneration, b.Generation())
	}
	var out []*helperv1.RecordKey
	for _, k := range b.RecordKeys() {
		out = append(out, &helperv1.RecordKey{Id: k.ID, Key: protocol.EnvironmentRecordKey(k.Secret, string(env.UID))})
	}
	return out, nil
}

// durableCap is the largest answer an operation may get.
func durableCap(d *helperv1.Durable) int {
	switch op := d.GetOp().(type) {
	case *helperv1.Durable_Status:
		return int(max(op.Status.GetMaxBytes(), protocol.DefaultStatusBytes)) + durableOverhead
	case *helperv1.Durable_Follow:
		return int(max(op.Follow.GetMaxBytes(), protocol.DefaultStatusBytes)) + durableOverhead
	case *helperv1.Durable_List:
		return int(op.List.GetMax())*recordBytes + durableOverhead
	}
	return durableOverhead
}

// checkDurable validates an answer against its operation: one record of the id asked
// about, a state that exists, output only where asked for, within its bound, and
// contiguous from the cursor per stream (each chunk starting where the last ended, once
// its skip is counted).
func checkDurable(d *helperv1.Durable, res *helperv1.DurableResult) error {
	var id string
	var from *executionv1.OutputCursor
	limit := -1
	switch op := d.GetOp().(type) {
	case *helperv1.Durable_Start:
		id = op.Start.GetCommandId()
	case *helperv1.Durable_Cancel:
		id = op.Cancel.GetCommandId()
	case *helperv1.Durable_Status:
		id, from, limit = op.Status.GetCommandId(), op.Status.GetFrom(), int(cmp0(op.Status.GetMaxBytes(), protocol.DefaultStatusBytes))
	case *helperv1.Durable_Follow:
		id, from, limit = op.Follow.GetCommandId(), op.Follow.GetFrom(), int(cmp0(op.Follow.GetMaxBytes(), protocol.DefaultStatusBytes))
	case *helperv1.Durable_List:
		if uint32(len(res.GetCommands())) > op.List.GetMax() || len(res.GetOutput()) > 0 || res.GetComplete() {
			return errors.New("a listing longer than asked, or with output")
		}
		for _, c := range res.GetCommands() {
			if err := checkInfo(c); err != nil {
				return err
			}
		}
		return nil
	}
	if len(res.GetCommands()) != 1 || res.GetCommands()[0].GetCommandId() != id {
		return errors.New("an answer about another command")
	}
	if err := checkInfo(res.GetCommands()[0]); err != nil {
		return err
	}
	if res.GetMore() || (res.GetComplete() && d.GetFollow() == nil) {
		return errors.New("a listing's or a follow's flag on another answer")
	}
	info := res.GetCommands()[0]
	ended := info.GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING
	if res.GetComplete() && !ended {
		return errors.New("a follow complete on a command still running")
	}
	if limit < 0 {
		if len(res.GetOutput()) > 0 {
			return errors.New("output where none was asked for")
		}
		return nil
	}
	next := map[executionv1.OutputStream]uint64{}
	for _, s := range protocol.Streams {
		next[s] = protocol.CursorOf(from, s)
	}
	total := 0
	for _, c := range res.GetOutput() {
		at, ok := next[c.GetStream()]
		if !ok {
			return errors.New("output of no known stream")
		}
		if c.GetOffset() < c.GetSkipped() || c.GetOffset()-c.GetSkipped() != at || c.GetOffset()+uint64(len(c.GetData())) < c.GetOffset() {
			return errors.New("output that does not continue from the cursor")
		}
		total += len(c.GetData())
		next[c.GetStream()] = c.GetOffset() + uint64(len(c.GetData()))
		written := info.GetStdoutBytes()
		if c.GetStream() == executionv1.OutputStream_OUTPUT_STREAM_STDERR {
			written = info.GetStderrBytes()
		}
		if ended && next[c.GetStream()] > written {
			return errors.New("output past the total an ended command's record gives")
		}
	}
	if total > limit {
		return errors.New("more output than asked for")
	}
	return nil
}

func cmp0(v, dflt uint64) uint64 {
	if v == 0 {
		return dflt
	}
	return v
}

// checkInfo refuses a record no helper writes: an id that is not one, a state that does
// not exist, a running command with a result; and makes its message printable.
func checkInfo(c *executionv1.CommandInfo) error {
	if protocol.ValidateCommandID(c.GetCommandId()) != nil {
		return errors.New("a record with a malformed command id")
	}
	if _, ok := executionv1.CommandState_name[int32(c.GetState())]; !ok || c.GetState() == executionv1.CommandState_COMMAND_STATE_UNSPECIFIED {
		return errors.New("a record in no known state")
	}
	if (c.GetState() == executionv1.CommandState_COMMAND_STATE_RUNNING) != (c.GetResult() == nil) {
		return errors.New("a running command with a result, or an ended one without")
	}
	c.Message = podexec.Printable(c.GetMessage())
	return nil
}

// startDurable validates and starts a durable command.
func (h *Handler) startDurable(ctx context.Context, a *admitted, spec *executionv1.CommandSpec, id string, detach bool) (*executionv1.CommandInfo, error) {
	return h.startDurableAs(ctx, a, spec, id, detach, false)
}

// startDurableAs is startDurable, or with replayOnly the helper's answer from the record of
// a start made before, never a new command (DurableStart.replay_only).
func (h *Handler) startDurableAs(ctx context.Context, a *admitted, spec *executionv1.CommandSpec, id string, detach, replayOnly bool) (*executionv1.CommandInfo, error) {
	if id == "" {
		id = newCommandID()
	} else if err := protocol.ValidateCommandID(id); err != nil {
		return nil, podexec.HelperError(err)
	}
	st := &helperv1.DurableStart{CommandId: id, Command: spec, RunId: a.claims.RunID, Epoch: a.claims.Epoch, Detached: detach,
		ReplayOnly: replayOnly}
	if !detach {
		st.AttachMillis = uint64(attachTime / time.Millisecond)
	}
	res, err := h.durable(ctx, a, &helperv1.Durable{Op: &helperv1.Durable_Start{Start: st}})
	if err != nil {
		return nil, err
	}
	return res.GetCommands()[0], nil
}

// startDetached serves StartCommand with detach.
func (h *Handler) startDetached(ctx context.Context, in *executionv1.StartCommandRequest) (*executionv1.StartCommandResponse, error) {
	if in.GetCommand() == nil {
		return nil, fmt.Errorf("%w: command: required", apierror.ErrInvalidArgument)
	}
	if !in.GetDetach() {
		return nil, fmt.Errorf("%w: command_id: only with detach (or RunCommand)", apierror.ErrInvalidArgument)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	info, _, err := h.startDetachedCounted(ctx, a, in.GetRunGrant(), in.GetEnvironment(), in.GetCommand(), in.GetCommandId())
	if err != nil {
		return nil, err
	}
	return &executionv1.StartCommandResponse{Command: info}, nil
}

// startDetachedCounted starts a detached command counted against its environment's
// quotas, and returns it with the admission it started under. A start replayed by
// command_id answers the first start's command even when the quota is full now, and the
// replay of a command that has ended keeps no slot.
func (h *Handler) startDetachedCounted(ctx context.Context, a *admitted, g *executionv1.Grant, ref *executionv1.EnvironmentRef,
	spec *executionv1.CommandSpec, id string) (*executionv1.CommandInfo, *admitted, error) {
	given := id != ""
	if !given {
		id = newCommandID()
	}
	taken, err := h.quotaCommand(ctx, a, id, false)
	if err != nil {
		if given && apierror.Reason(err) == apierror.ReasonName(apierror.ErrQuotaExceeded.Reason()) {
			return h.replayRefused(ctx, g, ref, spec, id, err)
		}
		return nil, nil, err
	}
	// A slot this admission did not take is a start's before it (the same id): never
	// given back for this call's failure.
	giveBack := func(a *admitted) {
		if taken {
			h.releaseCommand(ctx, a, id)
		}
	}
	// Admitted again after the leader's answer, which may have taken a while: the grant,
	// the epoch and the environment as they are now, not before (a command must not start
	// in an executor being deleted meanwhile).
	again, err := h.admit(ctx, g, ref)
	if err != nil {
		giveBack(a)
		return nil, nil, err
	}
	info, err := h.startDurable(ctx, again, spec, id, true)
	if err != nil {
		giveBack(again)
		return nil, nil, err
	}
	if info.GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING {
		// A replay of a command that has ended: the slot just taken goes back now (the
		// gateway's memory of give-backs may hold the command already), its first start's
		// as any seen ended.
		if taken {
			h.releaseCommand(ctx, again, id)
		} else {
			h.releaseEnded(ctx, again, info)
		}
	}
	return info, again, nil
}

// replayRefused answers a detached start refused for a quota: a replay of a command the
// helper has answers that command (it started before, counted then or before the quota),
// anything else the refusal. The helper is asked to replay only: with no record of the id
// it begins nothing (NOT_FOUND), so no command can start uncounted — also when it retires
// the record meanwhile. A helper that cannot replay only (a session before version 4, or
// one exec of a helper that refuses the field) is answered the refusal too.
func (h *Handler) replayRefused(ctx context.Context, g *executionv1.Grant, ref *executionv1.EnvironmentRef,
	spec *executionv1.CommandSpec, id string, refusal error) (*executionv1.CommandInfo, *admitted, error) {
	a, err := h.admit(ctx, g, ref) // as now: the leader's answer may have taken a while
	if err != nil {
		return nil, nil, err
	}
	info, err := h.startDurableAs(ctx, a, spec, id, true, true)
	switch {
	case errors.Is(err, apierror.ErrOperationIDReused):
		return nil, nil, err // the id is another command's or another run's
	case err != nil:
		// A replay-only start begins nothing: whatever else it met — no record, a helper
		// that cannot replay only, the executor unreachable, the claim ended meanwhile —
		// nothing ran, and the quota's refusal is the answer.
		return nil, nil, refusal
	}
	h.releaseEnded(ctx, a, info)
	return info, a, nil
}

// quotaCommand counts a detached command against its environment's quotas before it
// starts (or gives its slot back): the leader decides, atomically across gateways. taken
// reports whether the start's failure gives the admission's slots back.
func (h *Handler) quotaCommand(ctx context.Context, a *admitted, id string, release bool) (taken bool, err error) {
	cl, err := client(ctx)
	if err != nil {
		return false, err
	}
	r, err := h.b.Control.AdmitCommand(ctx, &controlv1.AdmitCommandRequest{
		Caller:      &controlv1.Caller{ClientUri: string(cl.Identity), RequestId: RequestID(ctx)},
		Environment: a.env.Name, Revision: string(a.env.UID), CommandId: id, Release: release,
	})
	if err != nil {
		return false, err
	}
	// A controller before the field does not say: its admission is taken, as it was.
	return r.Taken == nil || r.GetTaken(), nil
}

// releaseEnded gives back the slot of a detached command seen ended (followed to its end,
// its status read, cancelled), once per command on this gateway: the others see it too,
// and the slot's expiry and the controller's sync are the backstop.
func (h *Handler) releaseEnded(ctx context.Context, a *admitted, c *executionv1.CommandInfo) {
	if !c.GetDetached() || c.GetState() == executionv1.CommandState_COMMAND_STATE_RUNNING {
		return
	}
	if h.released.add(string(a.env.UID) + "/" + c.GetCommandId()) {
		h.releaseCommand(ctx, a, c.GetCommandId())
	}
}

// releaseCommand gives a detached command's slot back, best effort: the slot expires at
// the profile's longest duration anyway.
func (h *Handler) releaseCommand(ctx context.Context, a *admitted, id string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cancelAfterCall)
	defer cancel()
	_, _ = h.quotaCommand(ctx, a, id, true)
}

// RunCommand implements ExecutionProviderService: a durable command, streamed.
func (h *Handler) RunCommand(in *executionv1.RunCommandRequest, stream grpc.ServerStreamingServer[executionv1.CommandEvent]) error {
	ctx := stream.Context()
	if in.GetCommand() == nil {
		return fmt.Errorf("%w: command: required", apierror.ErrInvalidArgument)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return err
	}
	var info *executionv1.CommandInfo
	if in.GetDetach() {
		info, a, err = h.startDetachedCounted(ctx, a, in.GetRunGrant(), in.GetEnvironment(), in.GetCommand(), in.GetCommandId())
	} else {
		info, err = h.startDurable(ctx, a, in.GetCommand(), in.GetCommandId(), false)
	}
	if err != nil {
		return err
	}
	if err := stream.Send(&executionv1.CommandEvent{Event: &executionv1.CommandEvent_Started{Started: info}}); err != nil {
		h.cancelAttached(a, info)
		return err
	}
	err = h.follow(ctx, a, info.GetCommandId(), nil, stream)
	if err != nil {
		h.cancelAttached(a, info)
	}
	return err
}

// cancelAttached cancels an attached command whose call ended first, as a foreground
// command's end does (its lease would end it within attachTime anyway). What the record
// says decides, never the request: a detached command is never cancelled by a call's end.
func (h *Handler) cancelAttached(a *admitted, info *executionv1.CommandInfo) {
	if info.GetDetached() || info.GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cancelAfterCall)
	defer cancel()
	_, _ = h.durable(ctx, a, &helperv1.Durable{Op: &helperv1.Durable_Cancel{Cancel: &helperv1.DurableCancel{CommandId: info.GetCommandId()}}})
}

// WatchCommand implements ExecutionProviderService: follow a durable command from a cursor.
func (h *Handler) WatchCommand(in *executionv1.WatchCommandRequest, stream grpc.ServerStreamingServer[executionv1.CommandEvent]) error {
	ctx := stream.Context()
	if err := protocol.ValidateCommandID(in.GetCommandId()); err != nil {
		return podexec.HelperError(err)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return err
	}
	return h.follow(ctx, a, in.GetCommandId(), in.GetFrom(), stream)
}

// follow polls the command's output from the cursor and forwards it until the command's
// end: one bounded answer at a time, so a slow caller holds the output in the spool.
func (h *Handler) follow(ctx context.Context, a *admitted, id string, from *executionv1.OutputCursor, stream grpc.ServerStreamingServer[executionv1.CommandEvent]) error {
	cursor := &executionv1.OutputCursor{Stdout: from.GetStdout(), Stderr: from.GetStderr()}
	for {
		asked := time.Now()
		res, err := h.durable(ctx, a, &helperv1.Durable{Op: &helperv1.Durable_Follow{Follow: &helperv1.DurableFollow{
			CommandId: id, From: proto.CloneOf(cursor), MaxBytes: followBytes, WaitMillis: uint64(followWait / time.Millisecond),
		}}})
		if err != nil {
			return err
		}
		for _, c := range res.GetOutput() {
			if err := stream.Send(&executionv1.CommandEvent{Event: &executionv1.CommandEvent_Output{Output: c}}); err != nil {
				return err
			}
			end := c.GetOffset() + uint64(len(c.GetData()))
			if c.GetStream() == executionv1.OutputStream_OUTPUT_STREAM_STDERR {
				cursor.Stderr = end
			} else {
				cursor.Stdout = end
			}
		}
		if res.GetComplete() {
			h.releaseEnded(ctx, a, res.GetCommands()[0])
			return stream.Send(&executionv1.CommandEvent{Event: &executionv1.CommandEvent_Ended{Ended: res.GetCommands()[0]}})
		}
		if len(res.GetOutput()) == 0 && time.Since(asked) < minEmptyPoll {
			// An empty answer long before its wait: a helper that does not wait. Not a hot
			// loop of execs on its account.
			t := time.NewTimer(minEmptyPoll)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// minEmptyPoll is the least time between two follows when the first came back empty.
const minEmptyPoll = 100 * time.Millisecond

// durableStatus serves CommandStatus.
func (h *Handler) durableStatus(ctx context.Context, a *admitted, in *executionv1.CommandStatusRequest) (*executionv1.CommandStatusResponse, error) {
	res, err := h.durable(ctx, a, &helperv1.Durable{Op: &helperv1.Durable_Status{Status: &helperv1.DurableStatus{
		CommandId: in.GetCommandId(), From: in.GetFrom(), MaxBytes: uint64(in.GetMaxOutputBytes()),
	}}})
	if err != nil {
		return nil, err
	}
	info := res.GetCommands()[0]
	h.releaseEnded(ctx, a, info)
	return &executionv1.CommandStatusResponse{Command: info, Result: info.GetResult(), Output: res.GetOutput()}, nil
}

// durableCancel serves CancelCommand.
func (h *Handler) durableCancel(ctx context.Context, a *admitted, in *executionv1.CancelCommandRequest) (*executionv1.CancelCommandResponse, error) {
	grace := defaultGrace
	if g := in.GetGrace(); g != nil {
		if err := g.CheckValid(); err != nil || g.AsDuration() < 0 || g.AsDuration() > protocol.MaxGrace {
			return nil, fmt.Errorf("%w: grace: 0..%s", apierror.ErrInvalidArgument, protocol.MaxGrace)
		}
		grace = g.AsDuration()
	}
	ctx, cancel := context.WithTimeout(ctx, grace+cancelSlack)
	defer cancel()
	res, err := h.durable(ctx, a, &helperv1.Durable{Op: &helperv1.Durable_Cancel{Cancel: &helperv1.DurableCancel{
		CommandId: in.GetCommandId(), GraceMillis: uint64(grace / time.Millisecond),
	}}})
	if err != nil {
		return nil, err
	}
	h.releaseEnded(ctx, a, res.GetCommands()[0])
	return &executionv1.CancelCommandResponse{Command: res.GetCommands()[0]}, nil
}

// ListCommands implements ExecutionProviderService.
func (h *Handler) ListCommands(ctx context.Context, in *executionv1.ListCommandsRequest) (*executionv1.ListCommandsResponse, error) {
	n := in.GetMaxCommands()
	switch {
	case n == 0:
		n = defaultListCommands
	case n > protocol.MaxListCommands:
		return nil, fmt.Errorf("%w: max_commands: 1..%d", apierror.ErrInvalidArgument, protocol.MaxListCommands)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	res, err := h.durable(ctx, a, &helperv1.Durable{Op: &helperv1.Durable_List{List: &helperv1.DurableList{Max: n}}})
	if err != nil {
		return nil, err
	}
	return &executionv1.ListCommandsResponse{Commands: res.GetCommands(), More: res.GetMore()}, nil
}
