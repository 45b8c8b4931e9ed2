// Command execctl is the command-line client for execplane callers and operators. See
// internal/execctl.
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/execctl"
)

func main() { cli.Main(execctl.Run) }
