package devcmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/debroot"
	"github.com/execplane/execplane/internal/dev/devimage"
)

// runImages runs `execplane-dev images` (make images, make images-push): the product images
// built in Go (internal/dev/devimage) from static programs already built, one OCI image
// layout each under --out, a line per image (name, platforms, digest); with --push, pushed
// by digest and tagged with the version.
func runImages(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("execplane-dev images", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("out", "bin/images", "the directory of the images' OCI layouts, one per image (DIR/gateway, …)")
	binDir := fs.String("bin", "bin", "the static programs: DIR/<os>_<arch>/{gateway,controller,helper,e2b}")
	platforms := fs.String("platforms", "linux/"+runtime.GOARCH, "comma-separated linux/ARCH platforms; several give image indexes")
	version := fs.String("version", "", "the images' version, their tag (required; make: VERSION)")
	commit := fs.String("commit", "", "the commit they are built from (required; make: COMMIT)")
	created := fs.String("created", os.Getenv("SOURCE_DATE_EPOCH"), "the commit's time in Unix seconds, every timestamp in the images (default $SOURCE_DATE_EPOCH; make: git log -1 --format=%ct)")
	userland := fs.String("userland", "debian", "the executor image's userland: debian (bash, coreutils, python3, git: the packages --executor-debs-lock pins, its architecture only) or busybox (--busybox, this machine's platform only)")
	lock := fs.String("executor-debs-lock", debroot.LockPath, "with --userland debian: the lock of its packages (make executor-debs fetches them)")
	busybox := fs.String("busybox", devimage.BusyboxPath, "with --userland busybox: the static busybox")
	push := fs.String("push", "", "then push them to `REGISTRY` (HOST[:PORT][/PREFIX]) by digest and tag them with the version")
	insecure := fs.Bool("insecure", false, "reach the registry over plain HTTP (localhost, loopback and private addresses always are)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: execplane-dev images --version V --commit C [--created UNIX] [flags]\n\nBuilds the gateway, controller, helper, executor and e2b images from static\nprograms (CGO_ENABLED=0) under --bin, reproducibly: the same commit gives the same\ndigests. Writes one OCI image layout per image under --out and prints its name,\nplatforms and digest; with --push, pushes each by digest and tags it with the version.\n\nExample:\n  make images                             # builds the programs, then runs this\n  make images-push REGISTRY=127.0.0.1:5000/execplane\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := cli.ParseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return cli.Usagef("no arguments")
	}
	var problems cli.Problems
	ps, err := devimage.ParsePlatforms(*platforms)
	if err != nil {
		problems.Addf("platforms", "%v", err)
	}
	secs, err := strconv.ParseInt(*created, 10, 64)
	if err != nil {
		problems.Addf("created", "%q is not Unix seconds (nor is SOURCE_DATE_EPOCH set)", *created)
	}
	rel := devimage.Release{Version: *version, Commit: *commit, Created: time.Unix(secs, 0), Platforms: ps, BinDir: *binDir}
	switch *userland {
	case "debian":
		rel.Userland = devimage.DebianUserland(*lock)
	case "busybox":
		rel.Userland = devimage.BusyboxUserland(*busybox)
	default:
		problems.Addf("userland", "%q: want debian or busybox", *userland)
	}
	if err := problems.Err(); err != nil {
		return cli.Usagef("%v", err)
	}
	if err := rel.Validate(); err != nil {
		return cli.Usagef("%v", err)
	}
	built, err := devimage.BuildRelease(rel)
	if err != nil {
		return err
	}
	if err := devimage.WriteLayouts(*out, built); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	for _, b := range built {
		d, err := b.Digest()
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", b.Name, b.PlatformList(), d)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if *push == "" {
		return nil
	}
	pushed, err := devimage.Push(ctx, devimage.PushOptions{Registry: *push, Insecure: *insecure}, built)
	for _, p := range pushed {
		fmt.Fprintln(stdout, "pushed", p)
	}
	return err
}
