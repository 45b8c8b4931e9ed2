package execctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/devstack"
	"github.com/execplane/execplane/internal/version"
)

// command is one execctl subcommand.
type command struct {
	summary string
	run     func(ctx context.Context, cfg Config, args []string, stdout io.Writer) error
}

// commands lists the subcommands. Later issues add the API commands here.
var commands = map[string]command{
	"version": {summary: "print the client's version", run: runVersion},
	"dev":     {summary: "the local development stack: up, down, status, demo ('execctl dev help')", run: runDev},
}

// devCommands are execctl dev's subcommands run by devstack.
var devCommands = map[string]bool{"up": true, "down": true, "status": true, "serve": true}

// runDev runs `execctl dev <command> [flags]` (or, as the detached daemon re-runs itself,
// `execctl dev [flags] serve`).
func runDev(ctx context.Context, cfg Config, args []string, stdout io.Writer) error {
	if len(args) == 0 || args[0] == "help" {
		args = []string{"-h"}
	}
	if args[0] == "demo" {
		return runDemo(ctx, cfg, args[1:], stdout)
	}
	if len(args) > 0 && devCommands[args[0]] {
		args = append(args[1:len(args):len(args)], args[0])
	}
	return devstack.RunCommand(ctx, []string{"dev"}, args, stdout, os.Stderr)
}

// Run is execctl's entry point: global flags, then a subcommand and its arguments.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig(os.Getenv)
	fs := flag.NewFlagSet("execctl", flag.ContinueOnError)
	fs.SetOutput(stderr)
	cfg.RegisterFlags(fs)
	fs.Usage = func() { usage(fs, stderr) }
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		usage(fs, stderr)
		return cli.Usagef("no command given")
	}
	name := fs.Arg(0)
	if name == "help" {
		usage(fs, stdout)
		return nil
	}
	cmd, ok := commands[name]
	if !ok {
		return cli.Usagef("unknown command %q (run 'execctl help')", name)
	}
	return cmd.run(ctx, cfg, fs.Args()[1:], stdout)
}

func usage(fs *flag.FlagSet, w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("execctl: the execplane command-line client\n\nUsage: execctl [global flags] <command> [arguments]\n\nCommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-10s %s\n", n, commands[n].summary)
	}
	b.WriteString("  help       show this help\n\nGlobal flags:\n")
	fmt.Fprint(w, b.String())
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runVersion(_ context.Context, cfg Config, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return cli.Usagef("version takes no arguments")
	}
	info := version.Get()
	if cfg.Output == OutputJSON {
		enc := json.NewEncoder(stdout)
		return enc.Encode(info)
	}
	_, err := fmt.Fprintf(stdout, "execctl %s\n", info)
	return err
}
