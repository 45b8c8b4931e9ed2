package execctl

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"strconv"
	"time"

	"github.com/execplane/execplane/pkg/client"
)

var commandHeaders = []string{"ID", "STATE", "EXIT", "STARTED", "STDOUT", "STDERR", "RUN", "DETACHED"}

func commandRow(c *client.CommandInfo) []string {
	exit := "-"
	if c.Result != nil {
		exit = strconv.Itoa(commandExit(c.Result))
	}
	return []string{c.ID, stateName(c.State.String()), exit, c.StartedAt.UTC().Format(time.RFC3339),
		strconv.FormatUint(c.StdoutBytes, 10), strconv.FormatUint(c.StderrBytes, 10), c.RunID, strconv.FormatBool(c.Detached)}
}

// stateName is a state without its enum prefix.
func stateName(s string) string {
	const prefix = "COMMAND_STATE_"
	if len(s) > len(prefix) && s[:len(prefix)] == prefix {
		return s[len(prefix):]
	}
	return s
}

func durableJSON(c *client.CommandInfo) map[string]any {
	v := map[string]any{"id": c.ID, "state": stateName(c.State.String()), "runId": c.RunID, "epoch": c.Epoch,
		"startedAt": c.StartedAt.UTC().Format(time.RFC3339Nano), "detached": c.Detached,
		"stdoutBytes": c.StdoutBytes, "stderrBytes": c.StderrBytes}
	if c.Result != nil {
		v["exitCode"], v["signal"], v["duration"] = c.Result.ExitCode, c.Result.Signal, c.Result.Duration.String()
		v["receipt"] = c.Result.Receipt
	}
	if c.Message != "" {
		v["message"] = c.Message
	}
	return v
}

// emitCommands shows durable commands as a table or JSON.
func (in *invocation) emitCommands(list []*client.CommandInfo) error {
	var rows [][]string
	values := make([]map[string]any, 0, len(list))
	for _, c := range list {
		rows = append(rows, commandRow(c))
		values = append(values, durableJSON(c))
	}
	var v any = values
	if len(list) == 1 {
		v = values[0]
	}
	return in.emit(v, commandHeaders, rows)
}

// stream writes a command's output as it comes — stdout to stdout, stderr to stderr — and
// exits with the command's status once it ended.
func (in *invocation) stream(_ context.Context, events iter.Seq2[client.Event, error]) error {
	for e, err := range events {
		if err != nil {
			return err
		}
		if o := e.Output; o != nil {
			w := in.out
			if o.Stream == client.Stderr {
				w = in.stderr
			}
			if o.Skipped > 0 {
				fmt.Fprintf(in.stderr, "execctl: [%d bytes of %s no longer kept]\n", o.Skipped, streamName(o.Stream))
			}
			if _, err := w.Write(o.Data); err != nil {
				return err
			}
		}
		if e.Ended != nil {
			return endedExit(in, e.Ended)
		}
	}
	return fmt.Errorf("the command's stream ended without its end")
}

// endedExit maps an ended command to execctl's exit status.
func endedExit(in *invocation, c *client.CommandInfo) error {
	if c.Result == nil {
		return fmt.Errorf("command %s has no result", c.ID)
	}
	return resultExit(in, c.Result)
}

// resultExit maps a command's result to execctl's exit status, saying why a command could
// not start.
func resultExit(in *invocation, res *client.CommandResult) error {
	if code := commandExit(res); code != 0 {
		if res.Message != "" {
			fmt.Fprintln(in.stderr, "execctl:", res.Message)
		}
		return &exitError{code: code, quiet: true}
	}
	return nil
}

func streamName(s client.Stream) string {
	if s == client.Stderr {
		return "stderr"
	}
	return "stdout"
}

// longCall is a call that lasts as long as a command: not bounded by --timeout, ended by
// Ctrl-C, with the run renewed meanwhile.
func (in *invocation) longCall(ctx context.Context, run *client.Run) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(in.ctx, cancel)
	stopRenew := in.keepAlive(ctx, run)
	return ctx, func() { stopRenew(); stopAfter(); cancel() }
}

var cmdGroup = &group{name: "cmd", summary: "durable commands (exec --detach): list, follow, wait for, cancel", leaves: []*leaf{
	{
		name: "ls", args: "ENV", nargs: 1, summary: "the environment's durable commands, newest first",
		example: "execctl cmd ls xenv-…\nexecctl cmd ls xenv-… -o json",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			limit := fs.Int("max", 100, "at most this many (1..1000)")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				list, more, err := run.Commands(ctx, *limit)
				if err != nil {
					return err
				}
				if more {
					fmt.Fprintln(in.stderr, "execctl: more commands than shown (--max)")
				}
				return in.emitCommands(list)
			}
		}),
	},
	{
		name: "status", args: "ENV ID", nargs: 2, summary: "one durable command's record",
		example: "execctl cmd status xenv-… dev-server -o json",
		setup: underRun(func(*flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				info, _, err := run.Status(ctx, in.args[1], client.Cursor{}, 1)
				if err != nil {
					return err
				}
				return in.emitCommands([]*client.CommandInfo{info})
			}
		}),
	},
	{
		name: "logs", args: "ENV ID", nargs: 2, summary: "a durable command's output from offsets; with -f, followed until it ends (reattaching if the call breaks)",
		example: "execctl cmd logs xenv-… dev-server\nexecctl cmd logs xenv-… dev-server -f --from-stdout 1048576",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			follow := fs.Bool("f", false, "follow until the command ends, then exit with its status")
			fromOut := fs.Uint64("from-stdout", 0, "stdout offset to start from")
			fromErr := fs.Uint64("from-stderr", 0, "stderr offset to start from")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				from := client.Cursor{Stdout: *fromOut, Stderr: *fromErr}
				if *follow {
					ctx, done := in.longCall(ctx, run)
					defer done()
					return in.stream(ctx, run.Output(ctx, in.args[1], from))
				}
				for {
					info, chunks, err := run.Status(ctx, in.args[1], from, 0)
					if err != nil {
						return err
					}
					for _, c := range chunks {
						w := in.out
						if c.Stream == client.Stderr {
							w = in.stderr
						}
						if _, err := w.Write(c.Data); err != nil {
							return err
						}
						from.Advance(c)
					}
					if len(chunks) == 0 || (from.Stdout >= info.StdoutBytes && from.Stderr >= info.StderrBytes) {
						return nil
					}
				}
			}
		}),
	},
	{
		name: "wait", args: "ENV ID", nargs: 2, summary: "wait until a durable command ends; exits with its status",
		example: "execctl cmd wait xenv-… build-42",
		setup: underRun(func(*flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				ctx, done := in.longCall(ctx, run)
				defer done()
				info, err := run.Wait(ctx, in.args[1])
				if err != nil {
					return err
				}
				if err := in.emitCommands([]*client.CommandInfo{info}); err != nil {
					return err
				}
				return endedExit(in, info)
			}
		}),
	},
	{
		name: "cancel", args: "ENV ID", nargs: 2, summary: "stop a durable command: SIGTERM to its group, the grace, then SIGKILL to all it started",
		example: "execctl cmd cancel xenv-… dev-server --grace 30s",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			grace := fs.Duration("grace", 10*time.Second, "between SIGTERM and SIGKILL (at most 1m)")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *grace+15*time.Second)
				defer cancel()
				info, err := run.Cancel(ctx, in.args[1], *grace)
				if err != nil {
					return err
				}
				return in.emitCommands([]*client.CommandInfo{info})
			}
		}),
	},
}}
