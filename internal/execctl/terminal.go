package execctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"

	"github.com/execplane/execplane/pkg/client"
)

// terminal runs c on a pseudo-terminal in the workspace (`execctl exec -it`): this process's
// terminal in raw mode, so that every key — ^C included — reaches the remote terminal, whose
// line discipline does what a local one would; its size followed (SIGWINCH). Without a
// local terminal (stdin redirected) the input is passed on as it comes.
func (in *invocation) terminal(ctx context.Context, run *client.Run, c client.Command) error {
	stdin := os.Stdin
	local := term.IsTerminal(int(stdin.Fd()))
	opts := client.TerminalOptions{}
	if local {
		if cols, rows, err := term.GetSize(int(stdin.Fd())); err == nil {
			opts.Rows, opts.Columns = rows, cols
		}
	}
	if _, ok := c.Env["TERM"]; !ok {
		if v := in.getenv("TERM"); v != "" {
			env := map[string]string{"TERM": v}
			for k, v := range c.Env {
				env[k] = v
			}
			c.Env = env
		}
	}
	res, err := in.attach(ctx, run, c, opts, stdin, local)
	if err != nil {
		return err
	}
	return resultExit(in, res)
}

// attach runs the terminal with this process's terminal, in raw mode while it lasts, and
// returns how its command ended.
func (in *invocation) attach(ctx context.Context, run *client.Run, c client.Command, opts client.TerminalOptions, stdin *os.File, local bool) (*client.CommandResult, error) {
	t, err := run.Terminal(ctx, c, opts)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	if local {
		state, err := term.MakeRaw(int(stdin.Fd()))
		if err != nil {
			return nil, fmt.Errorf("the local terminal: %w", err)
		}
		defer term.Restore(int(stdin.Fd()), state) //nolint:errcheck // best effort on the way out
		winch := make(chan os.Signal, 1)
		signal.Notify(winch, syscall.SIGWINCH)
		defer signal.Stop(winch)
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case <-winch:
					if cols, rows, err := term.GetSize(int(stdin.Fd())); err == nil {
						_ = t.Resize(rows, cols)
					}
				}
			}
		}()
	}
	go func() {
		// Ends with the process (a read of a terminal cannot be interrupted portably).
		if _, err := io.Copy(t, stdin); err == nil {
			_ = t.CloseInput()
		}
	}()
	if _, err := io.Copy(in.out, t); err != nil {
		return nil, err
	}
	return t.Wait()
}

// errTerminalFlags: a terminal takes its input from the terminal, and shows its output.
var errTerminalFlags = errors.New("-it goes with neither --detach, --id, --stdin nor -o json")
