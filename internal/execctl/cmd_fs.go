package execctl

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
)

// maxLocalInput bounds what `fs put` and `exec --stdin` read locally: above any profile's
// maxFileBytes (24 MiB), so the gateway, not this client, says what is too large.
const maxLocalInput = 32 << 20

// underRun is a command acting under the run held on its first argument (ENV).
func underRun(register func(fs *flag.FlagSet) func(ctx context.Context, in *invocation, run *client.Run) error) func(*flag.FlagSet, *invocation) func() error {
	return func(fs *flag.FlagSet, in *invocation) func() error {
		do := register(fs)
		return func() error {
			run, store, err := in.resume(in.args[0])
			if err != nil {
				return err
			}
			in.store = store
			ctx, cancel := in.callContext()
			defer cancel()
			return do(ctx, in, run)
		}
	}
}

func (in *invocation) emitFile(f client.FileInfo) error {
	return in.emit(fileValue(f), fileHeaders, [][]string{fileRow(f)})
}

var fsGroup = &group{name: "fs", summary: "files in the workspace, under the run held on ENV (run acquire)", leaves: []*leaf{
	{
		name: "ls", args: "ENV [DIR]", nargs: -1, minArgs: 1, summary: "list a directory (DIR defaults to the workspace root)",
		example: "execctl fs ls xenv-…   # the workspace root\nexecctl fs ls xenv-… src -o json",
		setup: underRun(func(*flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				dir := client.WorkspaceRoot
				if len(in.args) > 1 {
					dir = in.args[1]
				}
				var rows [][]string
				values := []fileJSON{}
				for f, err := range run.List(ctx, dir) {
					if err != nil {
						return err
					}
					rows, values = append(rows, fileRow(f)), append(values, fileValue(f))
				}
				return in.emit(values, fileHeaders, rows)
			}
		}),
	},
	{
		name: "cat", args: "ENV PATH", nargs: 2, summary: "write a file's content to stdout (raw bytes, also with -o json)",
		example: "execctl fs cat xenv-… src/main.py",
		setup: underRun(func(*flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				_, err := run.ReadFileTo(ctx, in.args[1], in.out) // streamed: memory stays bounded
				return err
			}
		}),
	},
	{
		name: "get", args: "ENV PATH LOCAL", nargs: 3, summary: "copy a workspace file to a local file (\"-\" for stdout)",
		example: "execctl fs get xenv-… out/report.txt ./report.txt",
		setup: underRun(func(*flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				if in.args[2] == "-" {
					_, err := run.ReadFileTo(ctx, in.args[1], in.out)
					return err
				}
				// Into a temporary file beside the target, renamed once complete: a failed
				// copy never leaves a partial file under the target's name.
				f, err := os.CreateTemp(filepath.Dir(in.args[2]), "."+filepath.Base(in.args[2])+"-*")
				if err != nil {
					return err
				}
				defer os.Remove(f.Name())
				if _, err := run.ReadFileTo(ctx, in.args[1], f); err != nil {
					f.Close()
					return err
				}
				if err := f.Chmod(0o644); err != nil {
					f.Close()
					return err
				}
				if err := f.Close(); err != nil {
					return err
				}
				return os.Rename(f.Name(), in.args[2])
			}
		}),
	},
	{
		name: "put", args: "ENV LOCAL PATH", nargs: 3, summary: "write a local file (\"-\" for stdin) into the workspace, atomically",
		example: "execctl fs put xenv-… ./main.py src/main.py --parents\nexecctl fs put xenv-… - notes.txt --create-only < notes.txt\nexecctl fs put xenv-… ./main.py src/main.py --if-version v1-…   # compare-and-swap (exit 4 if changed)",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			createOnly := fs.Bool("create-only", false, "fail (exit 4) when the path exists")
			ifVersion := fs.String("if-version", "", "write only if the file's content version is still this one")
			parents := fs.Bool("parents", false, "create missing parent directories")
			mode := fs.String("mode", "", "permission bits of a created file (octal, e.g. 0644)")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				var opts []client.WriteOption
				if *createOnly && *ifVersion != "" {
					return cli.Usagef("--create-only and --if-version exclude each other")
				}
				if *createOnly {
					opts = append(opts, client.CreateOnly())
				}
				if *ifVersion != "" {
					opts = append(opts, client.IfVersion(*ifVersion))
				}
				if *parents {
					opts = append(opts, client.CreateParents())
				}
				if *mode != "" {
					m, err := strconv.ParseUint(*mode, 8, 32)
					if err != nil || m > 0o7777 {
						return cli.Usagef("--mode %q: want octal permission bits", *mode)
					}
					opts = append(opts, client.WithMode(fs0(m)))
				}
				data, err := readLocal(in.args[1])
				if err != nil {
					return err
				}
				f, err := run.WriteFile(ctx, in.args[2], data, opts...)
				if err != nil {
					return err
				}
				return in.emitFile(f)
			}
		}),
	},
	{
		name: "stat", args: "ENV PATH", nargs: 2, summary: "a path's type, size, mode, time and content version",
		example: "execctl fs stat xenv-… src/main.py -o json",
		setup: underRun(func(*flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				f, err := run.Stat(ctx, in.args[1])
				if err != nil {
					return err
				}
				return in.emitFile(f)
			}
		}),
	},
	{
		name: "mkdir", args: "ENV PATH", nargs: 2, summary: "create a directory",
		example: "execctl fs mkdir xenv-… build/out -p",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			parents := fs.Bool("p", false, "create missing parents; an existing directory is fine")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				mkdir := run.Mkdir
				if *parents {
					mkdir = run.MkdirAll
				}
				f, err := mkdir(ctx, in.args[1])
				if err != nil {
					return err
				}
				return in.emitFile(f)
			}
		}),
	},
	{
		name: "rm", args: "ENV PATH", nargs: 2, summary: "remove a file or an empty directory (-r: a tree, absent is fine)",
		example: "execctl fs rm xenv-… notes.txt\nexecctl fs rm xenv-… build -r",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			recursive := fs.Bool("r", false, "remove the tree beneath PATH; an absent PATH is not an error")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				if !*recursive {
					return run.Remove(ctx, in.args[1])
				}
				n, err := run.RemoveAll(ctx, in.args[1])
				if err != nil {
					return err
				}
				return in.emit(map[string]uint64{"removed": n}, []string{"REMOVED"}, [][]string{{strconv.FormatUint(n, 10)}})
			}
		}),
	},
	{
		name: "mv", args: "ENV FROM TO", nargs: 3, summary: "rename a path within the workspace",
		example: "execctl fs mv xenv-… draft.md final.md --overwrite",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			overwrite := fs.Bool("overwrite", false, "replace an existing destination")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				var opts []client.MoveOption
				if *overwrite {
					opts = append(opts, client.Overwrite())
				}
				f, err := run.Rename(ctx, in.args[1], in.args[2], opts...)
				if err != nil {
					return err
				}
				return in.emitFile(f)
			}
		}),
	},
	{
		name: "cp", args: "ENV FROM TO", nargs: 3, summary: "copy a file (-r: a tree) within the workspace",
		example: "execctl fs cp xenv-… src src.bak -r",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			overwrite := fs.Bool("overwrite", false, "replace an existing destination")
			recursive := fs.Bool("r", false, "copy a directory tree")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				var opts []client.MoveOption
				if *overwrite {
					opts = append(opts, client.Overwrite())
				}
				if *recursive {
					opts = append(opts, client.Recursive())
				}
				r, err := run.Copy(ctx, in.args[1], in.args[2], opts...)
				if err != nil {
					return err
				}
				return in.emit(map[string]any{"path": r.Info.Path, "bytes": r.Bytes, "entries": r.Entries},
					[]string{"PATH", "BYTES", "ENTRIES"}, [][]string{{escape(r.Info.Path), strconv.FormatUint(r.Bytes, 10), strconv.FormatUint(r.Entries, 10)}})
			}
		}),
	},
	{
		name: "glob", args: "ENV PATTERN", nargs: 2, summary: "paths matching a pattern ('*', '?', '[…]', '**')",
		example: "execctl fs glob xenv-… '**/*.py'\nexecctl fs glob xenv-… '*.txt' --base docs",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			base := fs.String("base", "", "the directory to match beneath")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				g, err := run.Glob(ctx, in.args[1], *base)
				if err != nil {
					return err
				}
				rows := make([][]string, len(g.Paths))
				for i, p := range g.Paths {
					rows[i] = []string{escape(p)}
				}
				if g.Truncated {
					fmt.Fprintln(in.stderr, "(truncated: more paths matched)")
				}
				return in.emit(map[string]any{"paths": nonNil(g.Paths), "truncated": g.Truncated}, []string{"PATH"}, rows)
			}
		}),
	},
	{
		name: "grep", args: "ENV PATTERN [PATH]", nargs: -1, minArgs: 2, summary: "lines matching an RE2 expression",
		example: "execctl fs grep xenv-… 'TODO|FIXME' src --include '*.go'\nexecctl fs grep xenv-… error -i -o json",
		setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
			ignoreCase := fs.Bool("i", false, "ignore case")
			include := fs.String("include", "", "only files whose name matches this pattern")
			maxMatches := fs.Uint("max", 0, "at most this many matches (1..10000; 1000 by default)")
			return func(ctx context.Context, in *invocation, run *client.Run) error {
				q := client.GrepRequest{Pattern: in.args[1], Include: *include, IgnoreCase: *ignoreCase, MaxMatches: uint32(*maxMatches)}
				if len(in.args) > 2 {
					q.Path = in.args[2]
				}
				g, err := run.Grep(ctx, q)
				if err != nil {
					return err
				}
				rows := make([][]string, len(g.Matches))
				for i, m := range g.Matches {
					rows[i] = []string{escape(m.Path), strconv.FormatUint(m.Line, 10), escape(m.Text)}
				}
				if g.Truncated {
					fmt.Fprintln(in.stderr, "(truncated: more lines matched)")
				}
				return in.emit(grepValue(g), []string{"PATH", "LINE", "TEXT"}, rows)
			}
		}),
	},
}}

var execGroup = &group{name: "exec", summary: "run a command in the workspace, under the run held on ENV", leaves: []*leaf{{
	args: "ENV -- ARGV... | ENV --shell SCRIPT", nargs: -1, minArgs: 1,
	summary: "run a command, its output streamed as it is written; exits with its status (124 timed out, 127 not started, 128+n killed by signal n)",
	example: "execctl exec xenv-… -- python3 main.py\nexecctl exec xenv-… --shell 'make test' --dir src --timeout 5m\nexecctl exec xenv-… --env LANG=C.UTF-8 --stdin input.txt -- wc -l\nexecctl exec xenv-… --detach --id dev-server -- npm run dev   # prints its id; see execctl cmd\nexecctl exec xenv-… -o json -- ls   # the whole result at the end, exit 0 unless execctl failed\nexecctl exec -it xenv-… -- sh   # an interactive shell on a terminal",
	setup: underRun(func(fs *flag.FlagSet) func(context.Context, *invocation, *client.Run) error {
		tty := fs.Bool("it", false, "interactive, on a terminal: this terminal's keys, size and screen are the command's (raw mode while it runs)")
		fs.BoolVar(tty, "t", false, "the same as -it")
		detach := fs.Bool("detach", false, "start a durable command that outlives this call and print its id (follow it with execctl cmd logs -f)")
		id := fs.String("id", "", "with --detach: the command's id (1..64 of [A-Za-z0-9._-]); a retry with the same id and command does not run it twice")
		shell := fs.String("shell", "", "a script for /bin/sh -c instead of ARGV")
		dir := fs.String("dir", "", "working directory, relative to the workspace root")
		stdin := fs.String("stdin", "", "a local file (\"-\" for this process's stdin) written to the command's stdin")
		timeout := fs.Duration("timeout", 0, "the command's wall-clock limit (the profile's maximum when 0)")
		env := map[string]string{}
		fs.Func("env", "NAME=VALUE for the command's environment (repeatable)", func(s string) error {
			k, v, ok := strings.Cut(s, "=")
			if !ok || k == "" {
				return fmt.Errorf("want NAME=VALUE, got %q", s)
			}
			env[k] = v
			return nil
		})
		return func(ctx context.Context, in *invocation, run *client.Run) error {
			argv := in.args[1:]
			if (*shell == "") == (len(argv) == 0) {
				return cli.Usagef("give either ARGV after -- or --shell")
			}
			c := client.Command{Args: argv, Shell: *shell, Dir: *dir, Env: env, Timeout: *timeout}
			if *stdin != "" {
				data, err := readLocal(*stdin)
				if err != nil {
					return err
				}
				c.Stdin = data
			}
			// The command's own deadline, not --timeout's (which bounds the calls around it);
			// Ctrl-C ends the call, and the helper kills the command.
			ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
			defer cancel()
			defer context.AfterFunc(in.ctx, cancel)()
			if *tty {
				if *detach || *id != "" || *stdin != "" || in.cfg.Output == OutputJSON {
					return cli.Usagef("%v", errTerminalFlags)
				}
				defer in.keepAlive(ctx, run)()
				return in.terminal(ctx, run, c)
			}
			if *detach {
				info, err := run.Start(ctx, c, client.StartOptions{ID: *id})
				if err != nil {
					return err
				}
				return in.emitCommands([]*client.CommandInfo{info})
			}
			if *id != "" {
				return cli.Usagef("--id goes with --detach")
			}
			// The claim must outlive the command: renew it while the command runs.
			defer in.keepAlive(ctx, run)()
			if in.cfg.Output != OutputJSON {
				return in.stream(ctx, run.Stream(ctx, c, client.StreamOptions{}))
			}
			res, err := run.Run(ctx, c)
			if err != nil {
				return err
			}
			if in.cfg.Output == OutputJSON {
				return in.json(commandValue(res))
			}
			if _, err := io.WriteString(in.out, res.Stdout.String()); err != nil {
				return err
			}
			if _, err := io.WriteString(in.stderr, res.Stderr.String()); err != nil {
				return err
			}
			return resultExit(in, res)
		}
	}),
}}}

// keepAlive renews the run every third of its TTL until stop, saving each new grant.
func (in *invocation) keepAlive(ctx context.Context, run *client.Run) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(client.DefaultRunTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if err := run.Renew(ctx); err != nil {
				fmt.Fprintln(in.stderr, "execctl: renewing the run:", err)
				if run.Err() != nil {
					return
				}
				continue
			}
			if err := in.store.save(run.State()); err != nil {
				fmt.Fprintln(in.stderr, "execctl: saving the renewed run:", err)
			}
		}
	}()
	return func() { cancel(); <-done }
}

func readLocal(name string) ([]byte, error) {
	var r io.Reader = os.Stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxLocalInput+1))
	if err == nil && len(data) > maxLocalInput {
		err = fmt.Errorf("%s: larger than %d bytes", name, maxLocalInput)
	}
	return data, err
}

func fs0(m uint64) fs.FileMode { return fs.FileMode(m) }

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
