package controller

import (
	"context"
	"errors"
	"io"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/version"
)

// ErrNotServing is returned after a valid configuration was loaded: the reconciler is
// delivered by the controller issue. It exists so that the binary, its flags and its
// configuration checks can be built and tested (and rendered by the chart) before then.
var ErrNotServing = errors.New("controller: reconciliation is not implemented in this build")

// Run is the controller's entry point.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	if done, err := cli.Load("controller", &cfg, args, stdout, stderr); done {
		return err
	}
	cfg.Log.Name = "controller"
	cfg.Log.Output = stderr
	logger, err := logging.New(cfg.Log)
	if err != nil {
		return err
	}
	logging.RouteKlog(logger)
	logger.Info("starting", logging.KeyVersion, version.Get().Version, logging.KeyNamespace, cfg.Namespace)
	return ErrNotServing
}
