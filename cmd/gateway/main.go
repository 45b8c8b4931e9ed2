// Command gateway serves the public execplane API. See internal/gateway.
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/gateway"
)

func main() { cli.Main(gateway.Run) }
