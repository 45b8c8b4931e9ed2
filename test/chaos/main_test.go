// Package chaos_test drives the deployed system — two controller replicas, two gateways,
// the local cluster — with concurrent clients while a seeded scheduler injects faults, then
// checks what the clients heard against models (internal/dev/history) and sweeps the
// cluster for what must hold after any fault: docs/chaos.md.
//
// make test runs a short budget; make chaos a long one (EXECPLANE_CHAOS_DURATION), and
// EXECPLANE_CHAOS_SEED replays a run's schedule and choices.
package chaos_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/failpoint"
)

var controllerBin, gatewayBin string

// brokenHelperDir holds, inside executor images, the stand-ins that run a failpoint build
// of the helper asked to break one guarantee: brokenHelperDir + the guarantee's name (one
// of helperBreaks), for a gateway's --helper-path. The helper runs in the executor Pod, so
// it takes its environment from the Pod and from no test: the stand-in sets it.
const brokenHelperDir = "/execplane/broken/"

// helperBreaks are the guarantees a stand-in under brokenHelperDir breaks (the constants
// beside their call sites in internal/helper).
var helperBreaks = []string{"helper-ignores-cas", "helper-leaks-process"}

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run()) // nothing runs without the cluster: no binaries to build
	}
	dir, err := os.MkdirTemp("", "chaos-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := mainIn(m, dir)
	os.RemoveAll(dir)
	os.Exit(code)
}

// mainIn builds the binaries into dir and runs the tests on the package's cluster.
func mainIn(m *testing.M, dir string) int {
	controllerBin, gatewayBin = filepath.Join(dir, "controller"), filepath.Join(dir, "gateway")
	brokenHelper := filepath.Join(dir, "helper-failpoint")
	// The controller and the gateway are failpoint builds: unarmed they behave as any, and
	// the tests that prove the checks can fail ask them to break a guarantee
	// (EXECPLANE_BREAK). Executors run the helper make test checks, and a failpoint build of
	// it behind the stand-ins of brokenHelperDir.
	for out, args := range map[string][]string{
		controllerBin: {"-race", "-tags", "failpoint", "./cmd/controller"},
		gatewayBin:    {"-race", "-tags", "failpoint", "./cmd/gateway"},
		brokenHelper:  {"-tags", "failpoint", "./cmd/helper"},
	} {
		if err := clustertest.GoBuild("../..", out, args[len(args)-1], args[:len(args)-1]...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	files, err := clustertest.ExecutorFiles(dir, "../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, name := range helperBreaks {
		standIn := filepath.Join(dir, "broken-"+name)
		script := fmt.Sprintf("#!/bin/sh\nexport %s=%s\nexec '%s' \"$@\"\n", failpoint.BreakEnv, name, brokenHelper)
		if err := os.WriteFile(standIn, []byte(script), 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		files[brokenHelperDir+name] = standIn
	}
	return clustertest.Main(m, clustertest.Options{ImageFiles: files})
}
