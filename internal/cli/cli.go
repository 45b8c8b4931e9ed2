package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitInterrupted = 130
)

// RunFunc is a binary's entry point: it owns flag parsing and returns when done or when ctx
// is cancelled.
type RunFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// ErrUsage marks errors that mean the invocation was wrong and nothing was done.
var ErrUsage = errors.New("usage error")

// Usagef returns an error that maps to ExitUsage.
func Usagef(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUsage, fmt.Sprintf(format, args...))
}

// Main runs run with the process arguments and a context cancelled on SIGINT or SIGTERM, and
// exits with the matching code. It is the whole body of every main function.
func Main(run RunFunc) {
	os.Exit(Execute(run, os.Args[1:], os.Stdout, os.Stderr))
}

// Execute is Main without the process: it returns the exit code instead of exiting.
func Execute(run RunFunc, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, args, stdout, stderr)
	code := ExitCode(err)
	var quiet interface{ Quiet() bool }
	if err != nil && code != ExitOK && !(errors.As(err, &quiet) && quiet.Quiet()) {
		fmt.Fprintln(stderr, "error:", err)
	}
	if code == ExitFailure && ctx.Err() != nil {
		code = ExitInterrupted
	}
	return code
}

// ExitCode maps an error from a RunFunc to the process exit code: an error with an
// ExitCode() method (anywhere in its chain) chooses its own.
func ExitCode(err error) int {
	var coded interface{ ExitCode() int }
	switch {
	case errors.As(err, &coded):
		return coded.ExitCode()
	case err == nil, errors.Is(err, flag.ErrHelp):
		return ExitOK
	case errors.Is(err, ErrUsage), errors.Is(err, ErrInvalidConfig):
		return ExitUsage
	default:
		return ExitFailure
	}
}

// ParseFlags parses args into fs, turning flag errors into usage errors. fs must use
// flag.ContinueOnError.
func ParseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	return nil
}
