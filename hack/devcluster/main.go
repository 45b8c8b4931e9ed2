// Command devcluster starts and stops the local Kubernetes cluster used by `make demo` and
// `make cluster-up` (see internal/devcluster and docs/development.md).
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/devcluster"
)

func main() { cli.Main(devcluster.RunCommand) }
