package helper

import (
	"context"
	"errors"
	"io"
	"os"

	"github.com/execplane/execplane/internal/cli"
)

// ErrNotServing is returned after a valid configuration was loaded: the framed protocol is
// delivered by the helper issue.
var ErrNotServing = errors.New("helper: the request protocol is not implemented in this build")

// Run is the helper's entry point.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig(os.Getenv)
	if done, err := cli.Load("helper", &cfg, args, stdout, stderr); done {
		return err
	}
	return ErrNotServing
}
