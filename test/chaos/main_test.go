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
)

var controllerBin, gatewayBin string

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
	controllerBin, gatewayBin = filepath.Join(dir, "controller"), filepath.Join(dir, "gateway")
	// The controller is a failpoint build: unarmed it behaves as any, and the test that
	// proves the checker can fail asks it to break a guarantee (EXECPLANE_BREAK).
	for out, args := range map[string][]string{
		controllerBin: {"-race", "-tags", "failpoint", "./cmd/controller"},
		gatewayBin:    {"-race", "./cmd/gateway"},
	} {
		if err := clustertest.GoBuild("../..", out, args[len(args)-1], args[:len(args)-1]...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := clustertest.MainWithExecutors(m, "../..", nil)
	os.RemoveAll(dir)
	os.Exit(code)
}
