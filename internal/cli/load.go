package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/execplane/execplane/internal/version"
)

// Config is what every binary's configuration provides.
type Config interface {
	RegisterFlags(fs *flag.FlagSet)
	Validate() error
}

// Load parses args into cfg (whose fields already hold the defaults) and validates it. It
// also serves two flags every binary has: --version prints the version, and --check-config
// validates the configuration and reports the result; in both cases done is true and the
// caller returns err at once.
func Load(name string, cfg Config, args []string, stdout, stderr io.Writer) (done bool, err error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	printVersion := fs.Bool("version", false, "print the version and exit")
	checkConfig := fs.Bool("check-config", false, "validate the configuration, report every problem and exit")
	cfg.RegisterFlags(fs)
	if err := ParseFlags(fs, args); err != nil {
		return true, err
	}
	if fs.NArg() > 0 {
		return true, Usagef("unexpected arguments: %q", fs.Args())
	}
	if *printVersion {
		fmt.Fprintf(stdout, "%s %s\n", name, version.Get())
		return true, nil
	}
	if err := cfg.Validate(); err != nil {
		return true, err
	}
	if *checkConfig {
		fmt.Fprintln(stdout, "configuration is valid")
		return true, nil
	}
	return false, nil
}
