package devcmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/devcluster"
)

// runHost runs `execplane-dev host`: the machine's state as the local cluster's real node
// changes it (kernel settings, addresses, links, mounts, cgroups, directories, node processes,
// firewall rules), read while no real node runs; with --against, the differences from a
// state saved earlier.
func runHost(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("execplane-dev host", flag.ContinueOnError)
	fs.SetOutput(stderr)
	against := fs.String("against", "", "a state saved earlier by execplane-dev host: print what differs, and fail when anything does")
	wait := fs.Duration("wait", 0, "how long to wait for a running real node (make demo's, a test's) to stop; 0 fails at once")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: execplane-dev host [--against FILE] [--wait D]\n\nPrints, as JSON, what of this machine the local cluster's real node changes, read under\nthe machine's real-node lock (so while no real node runs; what a crashed one left is\nundone first). With --against, compares with a state saved earlier and fails when the\nmachine differs.\n\nExample:\n  execplane-dev host > before.json && make test && execplane-dev host --against before.json\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return cli.Usagef("no arguments")
	}
	if err := devcluster.RealNodeAvailable(); err != nil {
		return err
	}
	// A moment at least: the lock is polled.
	lockCtx, cancel := context.WithTimeout(ctx, max(*wait, time.Second))
	defer cancel()
	lock, err := devcluster.LockRealNode(lockCtx, nil)
	if err != nil {
		return fmt.Errorf("a real node runs on this machine (stop it, or --wait): %w", err)
	}
	state, err := devcluster.SnapshotHost()
	lock.Release()
	if err != nil {
		return err
	}
	if *against == "" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(state)
	}
	data, err := os.ReadFile(*against)
	if err != nil {
		return err
	}
	var before devcluster.HostState
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&before); err != nil {
		return fmt.Errorf("%s: %w", *against, err)
	}
	if d := state.Diff(before); len(d) > 0 {
		for _, line := range d {
			fmt.Fprintln(stdout, line)
		}
		return errors.New("the machine differs from " + *against)
	}
	fmt.Fprintln(stdout, "the machine is as in", *against)
	return nil
}
