// Command execplane-dev runs the local development stack of make demo and its tools: the
// stack's up, down and status, the demo walkthrough, development security bundles, the
// real node's host check and the product images (make images). See internal/dev/devcmd.
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/dev/devcmd"
)

func main() { cli.Main(devcmd.Run) }
