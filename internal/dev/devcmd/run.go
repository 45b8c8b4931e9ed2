package devcmd

import (
	"context"
	"io"

	"github.com/execplane/execplane/internal/dev/devstack"
)

// stackCommands are the commands devstack runs: it wants its flags before the command.
var stackCommands = map[string]bool{"up": true, "down": true, "status": true, "serve": true}

// Run is execplane-dev's entry point: `execplane-dev <command> [flags]` (or, as the detached
// daemon re-runs itself, `execplane-dev [flags] serve`).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "help" {
		args = []string{"-h"}
	}
	switch args[0] {
	case "demo":
		return runDemo(ctx, args[1:], stdout)
	case "bundle":
		return runBundle(args[1:], stdout, stderr)
	case "host":
		return runHost(ctx, args[1:], stdout, stderr)
	case "images":
		return runImages(ctx, args[1:], stdout, stderr)
	}
	if stackCommands[args[0]] {
		args = append(args[1:len(args):len(args)], args[0])
	}
	return devstack.RunCommand(ctx, args, stdout, stderr)
}
