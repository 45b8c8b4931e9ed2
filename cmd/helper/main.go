// Command helper performs one bounded file operation or command inside an executor's
// workspace per invocation. It is built static (CGO_ENABLED=0). See internal/helper.
package main

import (
	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/helper"
)

func main() { cli.Main(helper.Run) }
