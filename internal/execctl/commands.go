package execctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
)

// leaf is one command: `execctl <group> <name> [flags] <args>`.
type leaf struct {
	name string
	// args names the positional arguments for the usage line; nargs is their exact count
	// (-1: at least minArgs).
	args           string
	nargs, minArgs int
	summary        string
	// details, when set, is what the command's help says beyond the summary (paragraphs).
	details string
	// example teaches by showing: one or more command lines.
	example string
	// setup registers the command's flags and returns what runs once they are parsed.
	setup func(fs *flag.FlagSet, in *invocation) func() error
}

// group is a noun with its commands (`fs`, `env`, ...). A group with a single unnamed
// leaf (exec) runs it directly.
type group struct {
	name, summary string
	leaves        []*leaf
}

// invocation is one command's run: its context, configuration, output and client.
type invocation struct {
	ctx    context.Context
	cfg    Config
	out    io.Writer
	stderr io.Writer
	args   []string
	getenv func(string) string
	client *client.Client
	// store holds the run a command acts under (set by underRun).
	store runStore
}

// dial connects to the gateway of the global flags (once).
func (in *invocation) dial() (*client.Client, error) {
	if in.client != nil {
		return in.client, nil
	}
	if err := in.cfg.ValidateConnection(); err != nil {
		return nil, err
	}
	c, err := client.Dial(client.Config{Address: in.cfg.Address, CAFile: in.cfg.CAFile, CertFile: in.cfg.CertFile, KeyFile: in.cfg.KeyFile, ServerName: in.cfg.ServerName})
	if err != nil {
		return nil, err
	}
	in.client = c
	return c, nil
}

func (in *invocation) close() {
	if in.client != nil {
		in.client.Close()
	}
}

// callContext bounds one call by --timeout.
func (in *invocation) callContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(in.ctx, in.cfg.Timeout)
}

// runLeaf parses a leaf's flags and arguments and runs it.
func runLeaf(ctx context.Context, cfg Config, g *group, l *leaf, args []string, stdout, stderr io.Writer, getenv func(string) string) error {
	name := "execctl " + g.name
	if l.name != "" {
		name += " " + l.name
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := &invocation{ctx: ctx, cfg: cfg, out: stdout, stderr: stderr, getenv: getenv}
	defer in.close()
	run := l.setup(fs, in)
	// -o may also follow the command, where scripts tend to put it.
	fs.StringVar(&in.cfg.Output, "o", in.cfg.Output, "output format: table or json")
	fs.Usage = func() { leafUsage(fs, name, l, stderr) }
	if err := cli.ParseFlags(fs, cli.Interspersed(fs, args)); err != nil {
		return err
	}
	if err := in.cfg.Validate(); err != nil {
		return err
	}
	in.args = fs.Args()
	if l.nargs >= 0 && len(in.args) != l.nargs || l.nargs < 0 && len(in.args) < l.minArgs {
		fs.Usage()
		return cli.Usagef("%s: want arguments %s, got %d", name, l.args, len(in.args))
	}
	return run()
}

func leafUsage(fs *flag.FlagSet, name string, l *leaf, w io.Writer) {
	fmt.Fprintf(w, "%s — %s\n\nUsage: %s [flags] %s\n", name, l.summary, name, l.args)
	if l.details != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(l.details))
	}
	if l.example != "" {
		fmt.Fprintf(w, "\nExamples:\n")
		for line := range strings.SplitSeq(strings.TrimSpace(l.example), "\n") {
			fmt.Fprintf(w, "  %s\n", line)
		}
	}
	has := false
	fs.VisitAll(func(*flag.Flag) { has = true })
	if has {
		fmt.Fprintf(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	fmt.Fprintf(w, "\nGlobal flags (before the command) and EXECPLANE_* variables: execctl help\n")
}

func groupUsage(g *group, w io.Writer) {
	fmt.Fprintf(w, "execctl %s — %s\n\nCommands:\n", g.name, g.summary)
	for _, l := range g.leaves {
		fmt.Fprintf(w, "  %-16s %s\n", l.name, l.summary)
	}
	fmt.Fprintf(w, "\nRun 'execctl %s <command> -h' for a command's flags and examples.\n", g.name)
}
