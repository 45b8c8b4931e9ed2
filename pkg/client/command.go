package client

import (
	"context"
	"time"

	"google.golang.org/grpc"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// commandGrace is how much longer than the command's timeout Run lets its call take when ctx
// has no earlier deadline (the gateway allows the timeout plus 10 s).
const commandGrace = 15 * time.Second

// Command is one foreground command. Exactly one of Args and Shell is set.
type Command struct {
	// Args is the argv (Args[0] looked up in PATH when it has no '/').
	Args []string
	// Shell is a script for "/bin/sh -c".
	Shell string
	// Dir is the working directory relative to the workspace root ("" for the root).
	Dir string
	// Env adds environment variables (names validated by the helper).
	Env map[string]string
	// Stdin is written to the command's stdin, then EOF (at most the profile's
	// maxCommandBytes).
	Stdin []byte
	// Timeout is 1s..the profile's maxCommandDuration; 0 means the maximum.
	Timeout time.Duration
}

// Output is one captured stream: its head and, when it overflowed the profile's cap, its
// tail.
type Output struct {
	Head, Tail []byte
	// Total counts every byte written, kept or not.
	Total     uint64
	Truncated bool
}

// String returns the kept bytes, with a marker where bytes were dropped.
func (o Output) String() string {
	if !o.Truncated {
		return string(o.Head) + string(o.Tail)
	}
	return string(o.Head) + "\n[... output truncated ...]\n" + string(o.Tail)
}

// CommandResult is how a command ended.
type CommandResult struct {
	State executionv1.CommandState
	// ExitCode for SUCCEEDED and FAILED; -1 otherwise. Signal for the signalled states.
	ExitCode, Signal int
	Stdout, Stderr   Output
	StartedAt        time.Time
	Duration         time.Duration
	// Message says why a command could not start.
	Message string
	// Receipt is the helper's digest over the result (docs/api.md).
	Receipt string
}

// Succeeded reports exit code 0.
func (r *CommandResult) Succeeded() bool {
	return r.State == executionv1.CommandState_COMMAND_STATE_SUCCEEDED
}

// Run runs a command in the workspace and returns when it ended. Cancelling ctx kills it. A
// command is never retried once it may have started: an ErrOutcomeUnknown answer means it
// may have run.
func (r *Run) Run(ctx context.Context, c Command) (*CommandResult, error) {
	g, err := r.runGrant()
	if err != nil {
		return nil, err
	}
	spec := specOf(c)
	if c.Timeout > 0 {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, c.Timeout+commandGrace)
			defer cancel()
		}
	}
	req := &executionv1.StartCommandRequest{RunGrant: g, Environment: r.env.Ref(), Command: spec}
	resp, err := call(ctx, r.env.c, serverSaysSo, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.StartCommandResponse, error) {
		return r.env.c.api.StartCommand(ctx, req, opts...)
	})
	if err != nil {
		return nil, err
	}
	return resultOf(resp.GetResult()), nil
}

func resultOf(res *executionv1.CommandResult) *CommandResult {
	output := func(o *executionv1.CapturedOutput) Output {
		return Output{Head: o.GetHead(), Tail: o.GetTail(), Total: o.GetTotalBytes(), Truncated: o.GetTruncated()}
	}
	return &CommandResult{State: res.GetState(), ExitCode: int(res.GetExitCode()), Signal: int(res.GetSignal()),
		Stdout: output(res.GetStdout()), Stderr: output(res.GetStderr()), StartedAt: res.GetStartedAt().AsTime(),
		Duration: res.GetDuration().AsDuration(), Message: res.GetMessage(), Receipt: res.GetReceipt()}
}
