package gateway

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// TerminalExecutor is an Executor that also opens terminals: one exec each, the helper in
// terminal mode, req (a TerminalOpen) sent.
type TerminalExecutor interface {
	Terminal(ctx context.Context, t podexec.Target, req *helperv1.Request) (*podexec.Terminal, error)
}

// Terminal implements ExecutionProviderService: a command on a pseudo-terminal, the caller's
// input and window size carried in, what the terminal shows carried out, then its result.
// It is admitted like StartCommand, counts as one of the environment's calls while it
// lives, and ends with its run claim (the exec stream closes and the helper kills what it
// runs), its timeout, or the call.
func (h *Handler) Terminal(stream grpc.BidiStreamingServer[executionv1.TerminalRequest, executionv1.TerminalResponse]) error {
	ctx := stream.Context()
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	start := first.GetStart()
	if start == nil {
		return fmt.Errorf("%w: the first message of a terminal is its start", apierror.ErrInvalidArgument)
	}
	open := &helperv1.TerminalOpen{Command: start.GetCommand(), Size: start.GetSize()}
	if open.Command == nil {
		return fmt.Errorf("%w: command: required", apierror.ErrInvalidArgument)
	}
	if err := protocol.ValidateWorkingDirectory(open.Command.GetWorkingDirectory()); err != nil {
		return podexec.HelperError(err)
	}
	a, err := h.admit(ctx, start.GetRunGrant(), start.GetEnvironment())
	if err != nil {
		return err
	}
	lim := protocol.CommandLimitsOf(a.limits)
	if err := protocol.ValidateTerminal(open, lim); err != nil {
		return podexec.HelperError(err)
	}
	_, timeout, _ := protocol.ValidateCommand(open.Command, lim)
	te, ok := h.b.Executor.(TerminalExecutor)
	if !ok {
		return podexec.ErrNoTerminals
	}
	release, err := h.calls.acquire(a.env.UID)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, timeout+commandSlack)
	defer cancel()
	ctx, stop := h.fenced(ctx, a.env, a.claims)
	defer stop()
	req := &helperv1.Request{
		Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: RequestID(ctx),
		Limits: a.limits, Operation: &helperv1.Request_Terminal{Terminal: open},
	}
	conn, err := te.Terminal(ctx, podexec.TargetOf(a.env), req)
	if err != nil {
		return h.terminalError(ctx, a, req.RequestId, err)
	}
	defer conn.Close()
	// The caller's side: input and resizes, checked, then forwarded in order. Its end (the
	// caller closed its side) ends the input only; a bad message ends the terminal.
	refused := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			in, err := terminalInput(m)
			if err != nil {
				refused <- err
				conn.Close()
				return
			}
			if conn.Send(in) != nil {
				return // the terminal ended: Next says how
			}
		}
	}()
	for {
		ev, resp, err := conn.Next()
		if err != nil {
			select {
			case bad := <-refused:
				return bad
			default:
			}
			return h.terminalError(ctx, a, req.RequestId, err)
		}
		if resp != nil {
			if err := podexec.Refused(resp); err != nil {
				h.cfg.Metrics.executor(outcomeRefused)
				return err
			}
			h.cfg.Metrics.executor(outcomeOK)
			return stream.Send(&executionv1.TerminalResponse{Event: &executionv1.TerminalResponse_Result{Result: resp.GetCommand()}})
		}
		var out *executionv1.TerminalResponse
		if s := ev.GetStarted(); s != nil {
			out = &executionv1.TerminalResponse{Event: &executionv1.TerminalResponse_Started{Started: s}}
		} else {
			out = &executionv1.TerminalResponse{Event: &executionv1.TerminalResponse_Output{Output: ev.GetOutput()}}
		}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// terminalError reports why a terminal ended without a result, as run does for a call.
func (h *Handler) terminalError(ctx context.Context, a *admitted, id string, err error) error {
	switch {
	case errors.Is(context.Cause(ctx), errAuthorityLost):
		h.cfg.Metrics.executor(outcomeUnknown)
		return errAuthorityLost
	case errors.Is(err, podexec.ErrProtocol):
		h.cfg.Metrics.executor(outcomeProtocol)
		h.log.Error("executor protocol violation", logging.KeyRequestID, id, logging.KeyEnvironment, a.env.Name, logging.KeyPod, a.env.Status.Pod.Name, logging.KeyError, err)
	case errors.Is(err, podexec.ErrOutcomeUnknown):
		h.cfg.Metrics.executor(outcomeUnknown)
		if ctx.Err() == nil {
			h.log.Warn("executor stream broke", logging.KeyRequestID, id, logging.KeyEnvironment, a.env.Name, logging.KeyError, err)
		}
	default:
		h.cfg.Metrics.executor(outcomeError)
	}
	if ctx.Err() != nil && errors.Is(err, podexec.ErrOutcomeUnknown) {
		// The call ended (the caller went away, or the timeout): the helper killed the
		// command, as the call's end asks.
		return ctx.Err()
	}
	return err
}

// terminalInput is a message of the caller's past its start, checked, as the helper takes
// it.
func terminalInput(m *executionv1.TerminalRequest) (*helperv1.TerminalInput, error) {
	var in *helperv1.TerminalInput
	switch x := m.GetFrame().(type) {
	case *executionv1.TerminalRequest_Input:
		in = &helperv1.TerminalInput{Input: &helperv1.TerminalInput_Data{Data: x.Input}}
	case *executionv1.TerminalRequest_Resize:
		in = &helperv1.TerminalInput{Input: &helperv1.TerminalInput_Resize{Resize: x.Resize}}
	default:
		return nil, fmt.Errorf("%w: after its start, a terminal takes input and resizes", apierror.ErrInvalidArgument)
	}
	if err := protocol.ValidateTerminalInput(in); err != nil {
		return nil, podexec.HelperError(err)
	}
	return in, nil
}
