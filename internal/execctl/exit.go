package execctl

import (
	"context"
	"errors"
	"fmt"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Exit codes beyond cli's (0 ok, 1 failure, 2 usage, 130 interrupted), so that scripts can
// branch on what happened without parsing messages. `execctl exec` instead exits with the
// remote command's status (see commandExit).
const (
	ExitNotFound     = 3 // NOT_FOUND: absent or not yours
	ExitConflict     = 4 // ABORTED or ALREADY_EXISTS: a conflict, stale epoch, version mismatch, claim held
	ExitPrecondition = 5 // FAILED_PRECONDITION: fenced, not ready, wrong type
	ExitRetryLater   = 6 // UNAVAILABLE, RESOURCE_EXHAUSTED, DEADLINE_EXCEEDED: try again later
	ExitDenied       = 7 // UNAUTHENTICATED, PERMISSION_DENIED
	ExitUnknown      = 8 // UNKNOWN/OUTCOME_UNKNOWN: a command may have run
)

// exitError carries an exit code.
type exitError struct {
	code  int
	err   error
	quiet bool // the message was already shown (a remote command's own output)
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}
func (e *exitError) Unwrap() error { return e.err }
func (e *exitError) ExitCode() int { return e.code }
func (e *exitError) Quiet() bool   { return e.quiet }

// classify gives an API error its exit code; other errors keep theirs.
func classify(err error) error {
	var e *client.Error
	if err == nil {
		return nil
	}
	if !errors.As(err, &e) {
		if errors.Is(err, context.DeadlineExceeded) { // e.g. waiting until Ready
			return &exitError{code: ExitRetryLater, err: err}
		}
		return err
	}
	code := cli.ExitFailure
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown): // before the deadline: a cut write or command
		code = ExitUnknown
	case errors.Is(err, client.ErrInvalidArgument):
		code = cli.ExitUsage
	case errors.Is(err, client.ErrNotFound):
		code = ExitNotFound
	case errors.Is(err, client.ErrConflict), errors.Is(err, client.ErrAlreadyExists):
		code = ExitConflict
	case errors.Is(err, client.ErrFenced), errors.Is(err, client.ErrNotReady), errors.Is(err, client.ErrWrongType), errors.Is(err, client.ErrPreconditionFailed):
		code = ExitPrecondition
	case errors.Is(err, client.ErrUnavailable), errors.Is(err, client.ErrExhausted), errors.Is(err, errDeadline):
		code = ExitRetryLater
	case errors.Is(err, client.ErrUnauthenticated), errors.Is(err, client.ErrPermissionDenied):
		code = ExitDenied
	}
	return &exitError{code: code, err: err}
}

// errDeadline matches a DEADLINE_EXCEEDED answer (client.Error matches the context error).
var errDeadline = context.DeadlineExceeded

// commandExit is the exit status of `execctl exec`: the remote command's, as a shell reports
// it — its exit code; 128 + the signal when killed; 124 on timeout (as timeout(1)); 127 when
// it could not start.
func commandExit(r *client.CommandResult) int {
	switch r.State {
	case executionv1.CommandState_COMMAND_STATE_SUCCEEDED:
		return 0
	case executionv1.CommandState_COMMAND_STATE_FAILED:
		return r.ExitCode
	case executionv1.CommandState_COMMAND_STATE_TIMED_OUT:
		return 124
	case executionv1.CommandState_COMMAND_STATE_START_FAILED:
		return 127
	default:
		return 128 + r.Signal
	}
}
