package gateway

import (
	"context"
	"errors"
	"io"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/version"
)

// ErrNotServing is returned after a valid configuration was loaded: the API server itself is
// delivered by the gateway issue. It exists so that the binary, its flags and its
// configuration checks can be built and tested (and rendered by the chart) before then.
var ErrNotServing = errors.New("gateway: the API server is not implemented in this build")

// Run is the gateway's entry point.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg := DefaultConfig()
	if done, err := cli.Load("gateway", &cfg, args, stdout, stderr); done {
		return err
	}
	cfg.Log.Name = "gateway"
	cfg.Log.Output = stderr
	logger, err := logging.New(cfg.Log)
	if err != nil {
		return err
	}
	logging.RouteKlog(logger)
	logger.Info("starting", logging.KeyVersion, version.Get().Version, logging.KeyNamespace, cfg.Namespace)
	return ErrNotServing
}
