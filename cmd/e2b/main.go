// Command e2b serves E2B's control API and envd protocol over execplane, so that the
// unmodified E2B SDK runs against it. See internal/e2b and docs/e2b.md.
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/e2b"
)

func main() { cli.Main(e2b.Run) }
