package helper

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/helper/fileops"
	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/helper/supervisor"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Run is the helper's entry point: one request from stdin, one response on stdout; or, with
// --session, many (session.go); or, with --terminal, a terminal (terminal.go).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig(os.Getenv)
	if done, err := cli.Load("helper", &cfg, args, stdout, stderr); done {
		return err
	}
	if cfg.Install != "" {
		return Install(cfg.Install)
	}
	if cfg.Pause {
		return Pause(ctx)
	}
	if cfg.Mirror != "" {
		return RunMirror(cfg, stdout)
	}
	if cfg.Quiesce != 0 {
		return RunQuiesce(cfg, os.Stdin, stdout)
	}
	// A broken output pipe must surface as a write error (and cancel a running command),
	// never kill the helper before it has reaped what it started. Caught, not ignored: an
	// ignored signal stays ignored across exec, and commands must start with SIGPIPE at its
	// default (`yes | head` must end quietly).
	caught := make(chan os.Signal, 1)
	signal.Notify(caught, syscall.SIGPIPE)
	// Likewise SIGHUP and SIGINT when the helper was started with them ignored (a container
	// runtime's exec may start it so): the Go runtime leaves those two ignored, an ignored
	// signal stays ignored across exec, and a command must get its ^C. Caught, they reach
	// commands at their default while the helper goes on ignoring them.
	for _, sig := range []os.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if signal.Ignored(sig) {
			signal.Notify(caught, sig)
		}
	}
	go func() {
		for range caught {
		}
	}()
	// Threads first, while the Pod's pid limit has room: a command that fills it must not
	// leave the helper unable to start the thread it needs to kill that command.
	process.ReserveThreads()
	// Before the helper stops being dumpable, which gives its /proc files to root.
	_ = process.OpenOOMScoreAdj()
	// Dumpable until now — its binary readable by its user, so the kernel did not make it
	// not dumpable at exec — a process of the workload (the same user) may have opened its
	// descriptors meanwhile: record keys, which come on them, are refused (docs/helper.md
	// "Execute-only"). Root's workload could read them anyway: its keys are taken.
	if d, err := unix.PrctlRetInt(unix.PR_GET_DUMPABLE, 0, 0, 0, 0); err == nil && d != 0 && os.Geteuid() != 0 {
		cfg.refuseKeys = true
	}
	// Not dumpable: a command (same user) cannot open /proc/<helper>/fd/1 to forge response
	// frames, nor ptrace the helper. Commands are exec'd, which makes them dumpable again.
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	if cfg.Supervise {
		return supervisor.Supervise(os.Environ())
	}
	if cfg.Session {
		return ServeSession(ctx, cfg, os.Stdin, stdout)
	}
	if cfg.Terminal {
		return ServeTerminal(ctx, cfg, os.Stdin, stdout)
	}
	return Serve(ctx, cfg, os.Stdin, stdout)
}

// Serve handles exactly one request. It returns an error only when no response could be
// written; every refusal is a typed error response.
func Serve(_ context.Context, cfg Config, stdin io.Reader, stdout io.Writer) error {
	out := &frameWriter{w: stdout}
	var req helperv1.Request
	if err := protocol.ReadFrame(stdin, &req, protocol.MaxRequestBytes); err != nil {
		return out.error("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "bad request frame: "+err.Error())
	}
	id := req.GetRequestId()
	if len(id) > protocol.MaxRequestIDBytes {
		return out.error("", helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "request_id too long")
	}
	if req.GetVersion() != helperv1.ProtocolVersion_PROTOCOL_VERSION_1 {
		return out.error(id, helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION, "unsupported protocol version")
	}
	if err := held(&req); err != nil {
		return out.fail(id, err)
	}
	root, err := fileops.OpenRoot(cfg.Root)
	if err != nil {
		return out.fail(id, err)
	}
	defer root.Close()
	lim := req.GetLimits()
	switch op := req.GetOperation().(type) {
	case *helperv1.Request_File:
		res, err := root.Do(op.File, fileops.Limits{MaxFileBytes: lim.GetMaxFileBytes()})
		if err != nil {
			return out.fail(id, err)
		}
		return out.response(&helperv1.Response{RequestId: id, Outcome: &helperv1.Response_File{File: res}})
	case *helperv1.Request_Command:
		res, err := runCommand(root, op.Command, lim, cfg.HeartbeatInterval, stdin, out)
		if err != nil {
			return out.fail(id, err)
		}
		return out.response(&helperv1.Response{RequestId: id, Outcome: &helperv1.Response_Command{Command: res}})
	case *helperv1.Request_Durable:
		res, err := durable(cfg, &req, stdin)
		if err != nil {
			return out.fail(id, err)
		}
		return out.response(&helperv1.Response{RequestId: id, Outcome: &helperv1.Response_Durable{Durable: res}})
	default:
		return out.error(id, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "no operation")
	}
}

// durable serves a durable operation alone; anything on stdin (EOF when the call ends)
// answers a follow at once.
func durable(cfg Config, req *helperv1.Request, stdin io.Reader) (*helperv1.DurableResult, error) {
	cancel := make(chan struct{})
	go func() {
		var b [1]byte
		_, _ = stdin.Read(b[:])
		close(cancel)
	}()
	return supervisor.Do(supervisor.Config{Root: cfg.Root, Self: selfExe, RefuseKeys: cfg.refuseKeys}, req, cancel)
}

func runCommand(root *fileops.Root, spec *executionv1.CommandSpec, lim *helperv1.Limits, heartbeat time.Duration, stdin io.Reader, out *frameWriter) (*executionv1.CommandResult, error) {
	if err := enterWorkDir(root, spec.GetWorkingDirectory()); err != nil {
		return nil, err
	}
	var once sync.Once
	cancel := make(chan struct{})
	stop := func() { once.Do(func() { close(cancel) }) }
	// Anything arriving on stdin after the request — EOF when the gateway's call ends, or
	// stray bytes — cancels the command.
	go func() {
		var b [1]byte
		_, _ = stdin.Read(b[:])
		stop()
	}()
	done := make(chan struct{})
	defer close(done)
	go heartbeats(out, heartbeat, time.Now(), done, stop)
	return process.Run(spec, process.Options{
		Limits:  protocol.CommandLimitsOf(lim),
		Environ: os.Environ(),
		Cancel:  cancel,
	})
}

// enterWorkDir moves the helper into the command's working directory, resolved beneath the
// root, and makes it the subreaper of what the command starts. One request per process: the
// command inherits the directory, and no path string is resolved again.
func enterWorkDir(root *fileops.Root, wd []byte) error {
	dir, err := root.OpenDir(wd)
	if err != nil {
		return err
	}
	err = unix.Fchdir(dir)
	unix.Close(dir)
	if err != nil {
		return fmt.Errorf("working directory: %w", err)
	}
	if err := process.EnableSubreaper(); err != nil {
		return fmt.Errorf("subreaper: %w", err)
	}
	return nil
}

// heartbeats writes a heartbeat every interval until done. They come from their own
// goroutine so that a reader that stopped reading cannot delay the timeout; a failed write
// means the call is gone: stop.
func heartbeats(out *frameWriter, interval time.Duration, started time.Time, done <-chan struct{}, stop func()) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
			hb := &helperv1.Frame{Frame: &helperv1.Frame_Heartbeat{Heartbeat: &helperv1.Heartbeat{ElapsedMillis: uint64(time.Since(started) / time.Millisecond)}}}
			if err := out.frame(hb); err != nil {
				stop()
				return
			}
		}
	}
}

// frameWriter serialises frames on stdout (heartbeats come from another goroutine).
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) frame(fr *helperv1.Frame) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return protocol.WriteFrame(f.w, fr, protocol.MaxResponseBytes)
}

func (f *frameWriter) response(r *helperv1.Response) error {
	return f.frame(&helperv1.Frame{Frame: &helperv1.Frame_Response{Response: r}})
}

// coded is implemented by the typed errors of fileops and process.
type coded interface{ HelperCode() helperv1.ErrorCode }

func (f *frameWriter) fail(id string, err error) error {
	return f.response(failure(id, err))
}

func (f *frameWriter) error(id string, code helperv1.ErrorCode, msg string) error {
	err := f.response(errorResponse(id, code, msg))
	if err != nil && !errors.Is(err, syscall.EPIPE) {
		// The message could not be encoded: answer with the code alone rather than nothing.
		err = f.response(errorResponse(id, code, ""))
	}
	return err
}

// maxErrorMessageBytes bounds error messages (the protocol documents 1024).
const maxErrorMessageBytes = 1024

// failure is the error response for err: its typed code, or INTERNAL.
func failure(id string, err error) *helperv1.Response {
	code := helperv1.ErrorCode_ERROR_CODE_INTERNAL
	var c coded
	if errors.As(err, &c) {
		code = c.HelperCode()
	}
	return errorResponse(id, code, err.Error())
}

// errorResponse is a refusal, its message cut to the protocol's bound and made valid UTF-8
// (an invalid string could not be encoded at all).
func errorResponse(id string, code helperv1.ErrorCode, msg string) *helperv1.Response {
	return &helperv1.Response{
		RequestId: process.TruncateUTF8(id, protocol.MaxRequestIDBytes),
		Outcome:   &helperv1.Response_Error{Error: &helperv1.Error{Code: code, Message: process.TruncateUTF8(msg, maxErrorMessageBytes)}},
	}
}
