package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/backlog"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds of the data plane.
const (
	// commandSlack is how much longer than its timeout a command call may take: the helper's
	// kill, reaping and response, plus the exec round trip.
	commandSlack = 10 * time.Second
)

// Files implements ExecutionProviderService: the run grant is verified against this
// gateway's view, and the helper performs the operation in the executor Pod.
func (h *Handler) Files(ctx context.Context, in *executionv1.FilesRequest) (*executionv1.FilesResponse, error) {
	op := in.GetOperation()
	file, err := protocol.DescribeFile(op)
	if err == nil {
		err = file.Validate()
	}
	if err != nil {
		return nil, podexec.HelperError(err)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	if err := file.WithinLimits(a.limits); err != nil {
		return nil, podexec.HelperError(err)
	}
	var resp *helperv1.Response
	if w := op.GetWrite(); len(w.GetContent()) > protocol.DefaultChunkBytes {
		resp, err = h.writeAsBody(ctx, a, w, file.ResponseCap(a.limits))
	} else {
		resp, err = h.execute(ctx, a, &helperv1.Request{Limits: a.limits, Operation: &helperv1.Request_File{File: op}}, file.ResponseCap(a.limits))
	}
	if err != nil {
		return nil, err
	}
	res := resp.GetFile()
	if !file.Matches(res) {
		return nil, fmt.Errorf("%w: a result of another kind than the operation", podexec.ErrProtocol)
	}
	return &executionv1.FilesResponse{Result: res}, nil
}

// writeAsBody sends a large write's content as a body, as WriteFileStream does: the
// helper writes it as it arrives instead of assembling and decoding one large request.
func (h *Handler) writeAsBody(ctx context.Context, a *admitted, w *executionv1.WriteFile, responseCap int) (*helperv1.Response, error) {
	content := w.GetContent()
	w.Content = nil // the request is this call's: cleared for the copy, then given back
	bare := proto.CloneOf(w)
	w.Content = content
	op := &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: bare}}
	rest := content
	next := func() ([]byte, error) {
		if len(rest) == 0 {
			return nil, io.EOF
		}
		piece := rest[:min(len(rest), protocol.DefaultChunkBytes)]
		rest = rest[len(piece):]
		return piece, nil
	}
	req := &helperv1.Request{Limits: a.limits, Operation: &helperv1.Request_File{File: op}, BodyBytes: uint64(len(content))}
	return h.stream(ctx, a, req, responseCap, podexec.Transfer{Upload: next})
}

// StartCommand implements ExecutionProviderService: one foreground command, answered when it
// ended. Cancelling the call closes the exec stream; the helper then kills the command.
func (h *Handler) StartCommand(ctx context.Context, in *executionv1.StartCommandRequest) (*executionv1.StartCommandResponse, error) {
	if in.GetDetach() || in.GetCommandId() != "" {
		return h.startDetached(ctx, in)
	}
	spec := in.GetCommand()
	if spec == nil {
		return nil, fmt.Errorf("%w: command: required", apierror.ErrInvalidArgument)
	}
	if err := protocol.ValidateWorkingDirectory(spec.GetWorkingDirectory()); err != nil {
		return nil, podexec.HelperError(err)
	}
	a, err := h.admit(ctx, in.GetRunGrant(), in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	_, timeout, err := protocol.ValidateCommand(spec, protocol.CommandLimitsOf(a.limits))
	if err != nil {
		return nil, podexec.HelperError(err)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+commandSlack)
	defer cancel()
	resp, err := h.execute(ctx, a, &helperv1.Request{Limits: a.limits, Operation: &helperv1.Request_Command{Command: spec}}, protocol.CommandResponseCap(a.limits))
	if err != nil {
		return nil, err
	}
	res := resp.GetCommand()
	if res == nil {
		return nil, fmt.Errorf("%w: a file result for a command", podexec.ErrProtocol)
	}
	return &executionv1.StartCommandResponse{Result: res}, nil
}

// CommandStatus implements ExecutionProviderService: a durable command's record and its
// output from a cursor (docs/commands.md). A foreground command has no id: NOT_FOUND.
func (h *Handler) CommandStatus(ctx context.Context, in *executionv1.CommandStatusRequest) (*executionv1.CommandStatusResponse, error) {
	a, err := h.admitCommandID(ctx, in.GetRunGrant(), in.GetEnvironment(), in.GetCommandId())
	if err != nil {
		return nil, err
	}
	if in.GetMaxOutputBytes() > protocol.MaxStatusOutputBytes {
		return nil, fmt.Errorf("%w: max_output_bytes: at most %d", apierror.ErrInvalidArgument, protocol.MaxStatusOutputBytes)
	}
	return h.durableStatus(ctx, a, in)
}

// CancelCommand implements ExecutionProviderService: a durable command is stopped (SIGTERM
// to its group, the grace, SIGKILL to everything it started) and answered once recorded.
// A foreground command is cancelled by ending its call.
func (h *Handler) CancelCommand(ctx context.Context, in *executionv1.CancelCommandRequest) (*executionv1.CancelCommandResponse, error) {
	a, err := h.admitCommandID(ctx, in.GetRunGrant(), in.GetEnvironment(), in.GetCommandId())
	if err != nil {
		return nil, err
	}
	return h.durableCancel(ctx, a, in)
}

// admitCommandID refuses a malformed command id before anything else, then admits.
func (h *Handler) admitCommandID(ctx context.Context, g *executionv1.Grant, ref *executionv1.EnvironmentRef, id string) (*admitted, error) {
	if !ident.IsIdentifier(id) || protocol.ValidateCommandID(id) != nil {
		return nil, fmt.Errorf("%w: command_id: 1..%d bytes of [A-Za-z0-9._-]", apierror.ErrInvalidArgument, protocol.MaxCommandIDBytes)
	}
	return h.admit(ctx, g, ref)
}

// admit authorises a data operation: the caller's run grant verified against this gateway's
// view of the environment, the environment usable and the claim current and unexpired. It
// returns the environment and the helper limits from its profile. Nothing is written.
func (h *Handler) admit(ctx context.Context, g *executionv1.Grant, r *executionv1.EnvironmentRef) (*admitted, error) {
	cl, err := client(ctx)
	if err != nil {
		return nil, err
	}
	token, err := checkToken("run_grant", g)
	if err != nil {
		return nil, err
	}
	ref, err := checkRef("environment", r)
	if err != nil {
		return nil, err
	}
	env, v, err := h.verifyRunGrant(ctx, cl, token, ref)
	if err != nil {
		return nil, err
	}
	claims := claimsOf(v)
	if err := authority.Usable(env); err != nil {
		return nil, err
	}
	if err := authority.ValidateRunClaim(env, claims, h.cfg.Now()); err != nil {
		return nil, err
	}
	if env.Status.Pod == nil {
		return nil, fmt.Errorf("%w: the environment has no executor", apierror.ErrNotReady)
	}
	p, ok := h.b.Profiles.Profile(env.Spec.Profile)
	if !ok {
		return nil, fmt.Errorf("%w: the environment's profile was withdrawn", apierror.ErrNotReady)
	}
	return &admitted{env: env, claims: claims, limits: limitsOf(p)}, nil
}

// admitted is a data call that passed admit.
type admitted struct {
	env    *executionv1alpha1.ExecutionEnvironment
	claims authority.GrantClaims
	limits *helperv1.Limits
}

// limitsOf is what the helper enforces: the profile's current limits (the operator's present
// intent, even when the executor was built from an earlier digest of the profile).
func limitsOf(p profile.Profile) *helperv1.Limits {
	return &helperv1.Limits{
		MaxFileBytes: uint64(p.MaxFileBytes), MaxCommandBytes: uint64(p.MaxCommandBytes),
		MaxCommandMillis: uint64(p.MaxCommandDuration / time.Millisecond),
		MaxSpoolBytes:    uint64(p.Commands.SpoolBytes), MaxDetached: uint32(p.Commands.MaxDetached),
		MaxDetachedMillis: uint64(p.Commands.MaxDuration / time.Millisecond),
		RetainRecords:     uint32(p.Commands.RetainRecords), RetainMillis: uint64(p.Commands.RetainFor / time.Millisecond),
	}
}

// errAuthorityLost: the claim a data call was admitted under ended while it ran.
var errAuthorityLost = fmt.Errorf("%w: the run claim ended during the call (revoked, superseded, released or administered)", apierror.ErrOutcomeUnknown)

// fenced returns ctx cancelled as soon as this gateway's view shows that the claim the call
// was admitted under is no longer current (grants revoked, the epoch moved, the claim
// released or taken over, the environment fenced, administered or deleted) or once the
// claim's expiry passes unrenewed — no event marks that one, so the watch looks again at it:
// the exec stream closes and the helper kills what it runs, so no older grant keeps acting
// once the change is observed, and no terminal or follow outlives its claim. stop ends the
// watch.
func (h *Handler) fenced(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, claims authority.GrantClaims) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	go func() {
		ends := claimEnd(env)
		for {
			wait := MaxRPCDeadline
			if !ends.IsZero() {
				wait = min(wait, max(ends.Sub(h.cfg.Now())+claimEndSlack, claimEndSlack))
			}
			err := h.b.Environments.Await(ctx, env.Name, wait, func(cur *executionv1alpha1.ExecutionEnvironment) error {
				if cur == nil || cur.UID != env.UID || authority.Usable(cur) != nil || authority.ValidateRunClaim(cur, claims, h.cfg.Now()) != nil {
					return nil
				}
				ends = claimEnd(cur)        // a renewal moves it
				return grant.ErrNotObserved // still current: keep watching
			})
			switch {
			case err == nil:
				cancel(errAuthorityLost)
				return
			case !errors.Is(err, grant.ErrNotObserved):
				return // the call ended, or the view cannot say
			}
		}
	}()
	return ctx, func() { cancel(nil) }
}

// claimEndSlack is how long after a claim's expiry the watch looks again: the clock's
// granularity, and a renewal written at the last moment.
const claimEndSlack = 50 * time.Millisecond

// claimEnd is when the environment's run claim expires; zero without one.
func claimEnd(env *executionv1alpha1.ExecutionEnvironment) time.Time {
	if env.Status.ActiveRun == nil {
		return time.Time{}
	}
	return env.Status.ActiveRun.ExpiresAt.Time
}

// execute runs req in the environment's executor Pod, for as long as the claim stays current.
func (h *Handler) execute(ctx context.Context, a *admitted, req *helperv1.Request, responseCap int) (*helperv1.Response, error) {
	return h.run(ctx, a, req, responseCap, h.b.Executor.Execute)
}

// run is execute through run: the Executor's Execute, or a call with a body.
func (h *Handler) run(ctx context.Context, a *admitted, req *helperv1.Request, responseCap int, run podexec.ExecuteFunc) (*helperv1.Response, error) {
	env := a.env
	// Room in the client's backlog is taken before anything is asked, and before an
	// environment slot: a client that does not read its answers waits here (briefly),
	// holding nothing. A file operation's answer arrives at once, so its fetch reserves its
	// largest answer; a command's arrives when it ends (or, for a follow, when there is
	// output) and is counted then.
	reserve := 0
	if req.GetFile() != nil {
		reserve = responseCap
	}
	if err := backlog.Reserve(ctx, int64(reserve)); err != nil {
		if errors.Is(err, backlog.ErrFull) {
			err = fmt.Errorf("%w: %w", apierror.ErrBusy, err)
		}
		return nil, err
	}
	release, err := h.calls.acquire(env.UID)
	if err != nil {
		return nil, err
	}
	defer release()
	req.Version = helperv1.ProtocolVersion_PROTOCOL_VERSION_1
	req.RequestId = RequestID(ctx)
	ctx, stop := h.fenced(ctx, env, a.claims)
	defer stop()
	resp, err := run(ctx, podexec.TargetOf(env), req, responseCap)
	backlog.Settle(ctx, int64(proto.Size(resp))) // the answer in hand, nothing more
	if err != nil && errors.Is(context.Cause(ctx), errAuthorityLost) {
		h.cfg.Metrics.executor(outcomeUnknown)
		return nil, errAuthorityLost
	}
	switch {
	case errors.Is(err, podexec.ErrOutcomeUnknown):
		h.cfg.Metrics.executor(outcomeUnknown)
		h.log.Warn("executor stream broke", logging.KeyRequestID, req.RequestId, logging.KeyEnvironment, env.Name, logging.KeyError, err)
		return nil, err
	case errors.Is(err, podexec.ErrProtocol):
		h.cfg.Metrics.executor(outcomeProtocol)
		h.log.Error("executor protocol violation", logging.KeyRequestID, req.RequestId, logging.KeyEnvironment, env.Name, logging.KeyPod, env.Status.Pod.Name, logging.KeyError, err)
		return nil, err
	case err != nil:
		h.cfg.Metrics.executor(outcomeError)
		return nil, err
	}
	if err := podexec.Refused(resp); err != nil {
		h.cfg.Metrics.executor(outcomeRefused)
		return nil, err
	}
	h.cfg.Metrics.executor(outcomeOK)
	return resp, nil
}
