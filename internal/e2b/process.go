package e2b

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"iter"
	"maps"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"

	"github.com/execplane/execplane/pkg/client"
	process "github.com/execplane/execplane/proto/envd/process"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Processes are durable commands (docs/commands.md): a pid is a random 31-bit number and the
// command's id is "e2b-<pid>", so any replica finds it again — after the SDK's stream broke,
// from another SDK instance, after a restart — and its output is kept on the workspace.
const (
	commandPrefix = "e2b-"
	// startAttempts bounds the pids tried when a random one is taken.
	startAttempts = 3
	// defaultKeepalive is envd's interval between keepalive events on a quiet stream, when
	// the SDK names none; the SDK asks for 50 s. Bounded so that a caller cannot make the
	// front end write every millisecond.
	defaultKeepalive = 90 * time.Second
	minKeepalive     = time.Second
	// killGrace is the grace of a SIGKILL: the helper sends SIGTERM first, always.
	killGrace = time.Millisecond
	// termGrace is the grace of a SIGTERM before the helper's SIGKILL.
	termGrace = 10 * time.Second
	// listLimit bounds the commands List looks through (newest first).
	listLimit = 200
)

func newPID() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint32(b[:])&0x7fffffff | 1
}

func commandID(pid uint32) string { return commandPrefix + strconv.FormatUint(uint64(pid), 10) }

func pidOf(id string) (uint32, bool) {
	s, ok := strings.CutPrefix(id, commandPrefix)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 31)
	return uint32(n), err == nil && n > 0
}

// processService is envd's process.Process over durable commands.
type processService struct{ f *frontEnd }

// Start runs the command as a durable command and streams start{pid} first, its output as it
// comes, then end, then closes — as envd does. The SDK's stream deadline (Connect-Timeout-Ms)
// is the command's timeout, as envd's; a stream that breaks before leaves the command
// running (the SDK's disconnect, a dropped connection), to be found by Connect and List.
func (p processService) Start(ctx context.Context, req *connect.Request[process.StartRequest], stream *connect.ServerStream[process.StartResponse]) error {
	cl := callerOf(ctx)
	in := req.Msg
	if in.Pty != nil {
		return connectError(unsupported("terminals (pty) are not served by the E2B front end: use execplane's Terminal RPC (docs/e2b.md)"))
	}
	user, err := basicUser(req.Header().Get("Authorization"))
	if err == nil {
		err = checkUser(user)
	}
	if err != nil {
		return connectError(err)
	}
	cmd, err := p.f.command(ctx, cl.sandbox, in.GetProcess())
	if err != nil {
		return connectError(err)
	}
	keepalive := keepaliveOf(req.Header().Get("Keepalive-Ping-Interval"))
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.StartResponse{Event: ev}) }
	retried := false
	for range startAttempts + 1 {
		run, err := cl.sandbox.runFor(ctx)
		if err != nil {
			return connectError(err)
		}
		pid := newPID()
		events := run.Stream(ctx, cmd, client.StreamOptions{StartOptions: client.StartOptions{ID: commandID(pid)}, Detach: true})
		started, err := relay(ctx, pid, events, keepalive, false, send)
		switch {
		case !started && errors.Is(err, client.ErrOperationIDReused):
			continue // the pid is another command's: draw again (nothing was started)
		case !started && !retried && runLost(run, err):
			cl.sandbox.lost(run) // nothing was started: again under a fresh run
			retried = true
			continue
		}
		return connectError(err)
	}
	return connectError(errors.New("no free pid"))
}

// Connect follows a process from the start of its kept output: start{pid}, the output, end.
// Unlike envd, a process that has ended is found too (its output and end are kept).
func (p processService) Connect(ctx context.Context, req *connect.Request[process.ConnectRequest], stream *connect.ServerStream[process.ConnectResponse]) error {
	pid, err := selected(req.Msg.GetProcess())
	if err != nil {
		return connectError(err)
	}
	var run *client.Run
	if err := p.f.withRun(ctx, func(r *client.Run) error {
		run = r
		_, _, err := r.Status(ctx, commandID(pid), client.Cursor{}, 1)
		return err
	}); err != nil {
		return connectError(err)
	}
	send := func(ev *process.ProcessEvent) error { return stream.Send(&process.ConnectResponse{Event: ev}) }
	if err := send(startEvent(pid)); err != nil {
		return err
	}
	_, err = relay(ctx, pid, run.Output(ctx, commandID(pid), client.Cursor{}), keepaliveOf(req.Header().Get("Keepalive-Ping-Interval")), true, send)
	return connectError(err)
}

// relay sends a durable command's events as envd's: start{pid} on Started (unless started
// already), data, keepalives while quiet, and end — then returns, which closes the stream.
// It reports whether start was sent, and the error as it came (the caller converts it).
func relay(ctx context.Context, pid uint32, events iter.Seq2[client.Event, error], keepalive time.Duration, started bool, send func(*process.ProcessEvent) error) (bool, error) {
	type item struct {
		ev  client.Event
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ch := make(chan item)
	go func() {
		defer close(ch)
		for ev, err := range events {
			select {
			case ch <- item{ev, err}:
			case <-ctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	tick := time.NewTicker(keepalive)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return started, ctx.Err()
		case <-tick.C:
			if started {
				if err := send(&process.ProcessEvent{Event: &process.ProcessEvent_Keepalive{Keepalive: &process.ProcessEvent_KeepAlive{}}}); err != nil {
					return started, err
				}
			}
		case it, ok := <-ch:
			switch {
			case !ok:
				return started, errors.New("the command's events ended without its end")
			case it.err != nil:
				return started, it.err
			case it.ev.Started != nil && !started:
				started = true
				if err := send(startEvent(pid)); err != nil {
					return started, err
				}
			case it.ev.Output != nil:
				if err := send(dataEvent(it.ev.Output)); err != nil {
					return started, err
				}
			case it.ev.Ended != nil:
				return started, send(endEvent(it.ev.Ended))
			}
			tick.Reset(keepalive)
		}
	}
}

func startEvent(pid uint32) *process.ProcessEvent {
	return &process.ProcessEvent{Event: &process.ProcessEvent_Start{Start: &process.ProcessEvent_StartEvent{Pid: pid}}}
}

func dataEvent(o *client.OutputChunk) *process.ProcessEvent {
	d := &process.ProcessEvent_DataEvent{}
	if o.Stream == client.Stderr {
		d.Output = &process.ProcessEvent_DataEvent_Stderr{Stderr: o.Data}
	} else {
		d.Output = &process.ProcessEvent_DataEvent_Stdout{Stdout: o.Data}
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_Data{Data: d}}
}

// endEvent is envd's end of a process: Go's exec.ExitError text in status and error ("exit
// status 3", "signal: killed"), exit code -1 for a process a signal ended.
func endEvent(info *client.CommandInfo) *process.ProcessEvent {
	end := &process.ProcessEvent_EndEvent{ExitCode: -1}
	res := info.Result
	text := ""
	switch state := info.State; {
	case res != nil && (state == executionv1.CommandState_COMMAND_STATE_SUCCEEDED || state == executionv1.CommandState_COMMAND_STATE_FAILED):
		end.ExitCode, end.Exited = int32(res.ExitCode), true
		end.Status = fmt.Sprintf("exit status %d", res.ExitCode)
		if res.ExitCode != 0 {
			text = end.Status
		}
	case state == executionv1.CommandState_COMMAND_STATE_START_FAILED:
		end.ExitCode, end.Exited = 127, true
		end.Status = "exit status 127"
		text = "the command could not start"
		if res != nil && res.Message != "" {
			text += ": " + res.Message
		}
	case state == executionv1.CommandState_COMMAND_STATE_ABANDONED:
		end.Status, text = "abandoned", "the command's executor stopped before it ended"
	case state == executionv1.CommandState_COMMAND_STATE_TIMED_OUT:
		end.Status, text = "signal: killed", "signal: killed (the command's timeout)"
	case state == executionv1.CommandState_COMMAND_STATE_CANCELLED:
		end.Status, text = "signal: killed", "signal: killed"
	case state == executionv1.CommandState_COMMAND_STATE_OUT_OF_MEMORY:
		end.Status, text = "signal: killed", "signal: killed (out of memory)"
	default:
		sig := 9
		if res != nil && res.Signal > 0 {
			sig = res.Signal
		}
		end.Status = "signal: " + signalName(sig)
		text = end.Status
	}
	if info.Message != "" && text != "" && end.ExitCode == -1 {
		text += ": " + info.Message
	}
	if text != "" {
		end.Error = &text
	}
	return &process.ProcessEvent{Event: &process.ProcessEvent_End{End: end}}
}

// signalName is Go's text for the signals a command commonly dies of.
func signalName(sig int) string {
	switch sig {
	case 9:
		return "killed"
	case 15:
		return "terminated"
	case 2:
		return "interrupt"
	case 1:
		return "hangup"
	case 6:
		return "aborted"
	case 11:
		return "segmentation fault"
	}
	return "signal " + strconv.Itoa(sig)
}

// List answers the sandbox's running processes (its running durable commands of this front
// end), with their programs as recorded.
func (p processService) List(ctx context.Context, _ *connect.Request[process.ListRequest]) (*connect.Response[process.ListResponse], error) {
	var cmds []*client.CommandInfo
	if err := p.f.withRun(ctx, func(run *client.Run) error {
		var err error
		cmds, _, err = run.Commands(ctx, listLimit)
		return err
	}); err != nil {
		return nil, connectError(err)
	}
	out := &process.ListResponse{}
	for _, c := range cmds {
		pid, ok := pidOf(c.ID)
		if !ok || !c.Running() {
			continue
		}
		cfg := &process.ProcessConfig{Envs: map[string]string{}}
		if prog := c.Program; prog != nil {
			if args := prog.GetArgv(); len(args) > 0 {
				cfg.Cmd, cfg.Args = args[0], args[1:]
			}
			cwd := e2bPath(string(prog.GetWorkingDirectory()))
			cfg.Cwd = &cwd
		}
		out.Processes = append(out.Processes, &process.ProcessInfo{Config: cfg, Pid: pid})
	}
	return connect.NewResponse(out), nil
}

// SendSignal cancels the durable command: SIGKILL at once, SIGTERM with the helper's grace.
// An unknown pid is not found, which the SDK reads as "not killed".
func (p processService) SendSignal(ctx context.Context, req *connect.Request[process.SendSignalRequest]) (*connect.Response[process.SendSignalResponse], error) {
	pid, err := selected(req.Msg.GetProcess())
	if err != nil {
		return nil, connectError(err)
	}
	grace := termGrace
	switch req.Msg.GetSignal() {
	case process.Signal_SIGNAL_SIGKILL:
		grace = killGrace
	case process.Signal_SIGNAL_SIGTERM:
	default:
		return nil, connectError(badRequest("signal must be SIGKILL or SIGTERM"))
	}
	if err := p.f.withRun(ctx, func(run *client.Run) error {
		_, err := run.Cancel(ctx, commandID(pid), grace)
		return err
	}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.SendSignalResponse{}), nil
}

// SendInput: a durable command's stdin is given at its start (and is empty for E2B's, which
// the SDK starts with stdin false); input cannot reach it later, from whichever replica.
func (p processService) SendInput(context.Context, *connect.Request[process.SendInputRequest]) (*connect.Response[process.SendInputResponse], error) {
	return nil, connectError(unsupported("sendStdin is not supported: execplane commands read their stdin at start, and E2B's start with none (docs/e2b.md \"stdin\")"))
}

// StreamInput: as SendInput.
func (p processService) StreamInput(context.Context, *connect.ClientStream[process.StreamInputRequest]) (*connect.Response[process.StreamInputResponse], error) {
	return nil, connectError(unsupported("streamed stdin is not supported (docs/e2b.md \"stdin\")"))
}

// CloseStdin: a command's stdin is closed from its start already.
func (p processService) CloseStdin(ctx context.Context, req *connect.Request[process.CloseStdinRequest]) (*connect.Response[process.CloseStdinResponse], error) {
	pid, err := selected(req.Msg.GetProcess())
	if err != nil {
		return nil, connectError(err)
	}
	if err := p.f.withRun(ctx, func(run *client.Run) error {
		_, _, err := run.Status(ctx, commandID(pid), client.Cursor{}, 1)
		return err
	}); err != nil {
		return nil, connectError(err)
	}
	return connect.NewResponse(&process.CloseStdinResponse{}), nil
}

// Update resizes a terminal: there are none here.
func (p processService) Update(context.Context, *connect.Request[process.UpdateRequest]) (*connect.Response[process.UpdateResponse], error) {
	return nil, connectError(unsupported("terminals (pty) are not served by the E2B front end (docs/e2b.md)"))
}

// selected is the pid a selector names; tags are not kept.
func selected(s *process.ProcessSelector) (uint32, error) {
	switch {
	case s.GetPid() != 0:
		return s.GetPid(), nil
	case s.GetTag() != "":
		return 0, &problem{404, connect.CodeNotFound, "processes are found by pid; tags are not kept (docs/e2b.md)"}
	}
	return 0, badRequest("a process pid is required")
}

// checkUser refuses a user the executor cannot be: commands run as its one unprivileged
// user, which E2B calls "user".
func checkUser(user string) error {
	if user != "" && user != "user" {
		return &problem{403, connect.CodePermissionDenied, fmt.Sprintf("user '%s' is not available: commands run as the executor's unprivileged user (docs/e2b.md)", user)}
	}
	return nil
}

// basicUser is the user of envd's "Authorization: Basic base64(user:)" ("" without one).
func basicUser(header string) (string, error) {
	if header == "" {
		return "", nil
	}
	enc, ok := strings.CutPrefix(header, "Basic ")
	raw, err := base64.StdEncoding.DecodeString(enc)
	user, _, found := strings.Cut(string(raw), ":")
	if !ok || err != nil || !found {
		return "", badRequest("the Authorization header must be Basic with a user name")
	}
	return user, nil
}

func keepaliveOf(header string) time.Duration {
	s, err := strconv.Atoi(header)
	if err != nil || s <= 0 {
		return defaultKeepalive
	}
	return min(max(time.Duration(s)*time.Second, minKeepalive), defaultKeepalive)
}

// command maps envd's process config onto a durable command: bash -l -c as the SDK sends
// it, the working directory in the workspace, the sandbox's environment variables (create's
// envVars) under the request's, and the stream's deadline as the timeout.
func (f *frontEnd) command(ctx context.Context, sb *sandbox, cfg *process.ProcessConfig) (client.Command, error) {
	if cfg.GetCmd() == "" {
		return client.Command{}, badRequest("process.cmd is required")
	}
	cmd := client.Command{Args: append([]string{cfg.GetCmd()}, cfg.GetArgs()...), Env: sandboxEnv(sb.env.Status().GetMetadata())}
	maps.Copy(cmd.Env, cfg.GetEnvs())
	if cfg.Cwd != nil {
		dir, err := workspacePath(cfg.GetCwd())
		if err != nil {
			return client.Command{}, err
		}
		if dir != "." {
			cmd.Dir = dir
		}
	}
	if deadline, ok := ctx.Deadline(); ok {
		// Whole seconds, at least the API's one; beyond the profile's maximum, the
		// maximum (a timeout of 0 says it).
		d := max(time.Until(deadline).Round(time.Second), time.Second)
		if limit := f.maxCommandDuration(ctx, sb.env.Status().GetProfile()); limit == 0 || d < limit {
			cmd.Timeout = d
		}
	}
	return cmd, nil
}
