package execctl

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/version"
)

// groups are the API's nouns, in the order help shows them.
var groups = []*group{profilesGroup, envGroup, runGroup, fsGroup, execGroup, cmdGroup, mcpGroup, refsGroup, snapGroup, usageGroup, adminGroup}

// Run is execctl's entry point: global flags, then a command and its arguments.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return run(ctx, args, stdout, stderr, os.Getenv)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	cfg := DefaultConfig(getenv)
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
	name, rest := fs.Arg(0), fs.Args()[1:]
	switch name {
	case "help":
		usage(fs, stdout)
		return nil
	case "version":
		return runVersion(cfg, rest, stdout)
	case "dev":
		// Scripts written for an earlier execctl learn where the command went.
		return cli.Usagef("the development stack's commands moved to their own binary: execplane-dev %s (make build)", strings.Join(rest, " "))
	}
	for _, g := range groups {
		if g.name != name {
			continue
		}
		if len(g.leaves) == 1 && g.leaves[0].name == "" {
			return classify(runLeaf(ctx, cfg, g, g.leaves[0], rest, stdout, stderr, getenv))
		}
		if len(rest) == 0 || rest[0] == "help" || rest[0] == "-h" || rest[0] == "--help" {
			groupUsage(g, stdout)
			if len(rest) == 0 {
				return cli.Usagef("execctl %s: no command given", name)
			}
			return nil
		}
		for _, l := range g.leaves {
			if l.name == rest[0] {
				return classify(runLeaf(ctx, cfg, g, l, rest[1:], stdout, stderr, getenv))
			}
		}
		groupUsage(g, stderr)
		return cli.Usagef("execctl %s: unknown command %q", name, rest[0])
	}
	return cli.Usagef("unknown command %q (run 'execctl help')", name)
}

func usage(fs *flag.FlagSet, w io.Writer) {
	var b strings.Builder
	b.WriteString(`execctl: the execplane command-line client

Usage: execctl [global flags] <command> [arguments] [flags]

Commands:
`)
	for _, g := range groups {
		fmt.Fprintf(&b, "  %-10s %s\n", g.name, g.summary)
	}
	b.WriteString(`  version    print the client's version
  help       show this help

A session by hand (after 'make demo': source .state/dev/caller.env):
  execctl env ensure conv-1 --owner alice --issuer https://idp.example --profile sandbox
  execctl run acquire conv-1 ENV --revision REV --owner alice --issuer https://idp.example --run-id turn-1
  execctl fs put ENV ./main.sh main.sh
  execctl exec ENV -- sh main.sh
  execctl run release ENV

Exit codes: 0 ok, 1 failure, 2 usage or invalid argument (nothing was done), 3 not found,
4 conflict (stale epoch, version mismatch, claim held, exists), 5 failed precondition (fenced,
not ready), 6 try again later (unavailable, limits, deadline), 7 denied, 8 outcome unknown
(a command may have run), 130 interrupted. 'exec' exits with the remote command's status.

Environment: EXECPLANE_ADDRESS, EXECPLANE_CA, EXECPLANE_CERT, EXECPLANE_KEY,
EXECPLANE_SERVER_NAME (the connection); EXECPLANE_ISSUER, EXECPLANE_OWNER (the owner);
EXECPLANE_STATE_DIR (where held runs are kept, default ~/.local/state/execctl).

Global flags:
`)
	fmt.Fprint(w, b.String())
	fs.SetOutput(w)
	fs.PrintDefaults()
}

func runVersion(cfg Config, args []string, stdout io.Writer) error {
	if len(args) > 0 {
		return cli.Usagef("version takes no arguments")
	}
	info := version.Get()
	if cfg.Output == OutputJSON {
		return json.NewEncoder(stdout).Encode(info)
	}
	_, err := fmt.Fprintf(stdout, "execctl %s\n", info)
	return err
}
