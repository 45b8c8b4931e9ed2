// Command controller reconciles ExecutionEnvironments and serves the internal control API
// while it holds the leader Lease. See internal/controller.
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/controller"
)

func main() { cli.Main(controller.Run) }
