package csidriver_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/csidriver"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/precondition"
)

// The driver passes the CSI community's conformance suite (csi-sanity, built from the Go
// module proxy with the sidecars): identity, controller (volumes, snapshots, listing,
// idempotency, error codes) and node (bind mounts, which need root).
func TestSanity(t *testing.T) {
	clustertest.SkipShort(t) // csi-sanity is built with the sidecars (~8 minutes cold)
	if os.Geteuid() != 0 {
		precondition.Missing(t, "root, for the node service's bind mounts")
	}
	bin, err := devcluster.FindCSIBinaries(t.Context())
	if err != nil {
		precondition.Missing(t, "csi-sanity: %v", err)
	}
	// A short directory: a Unix socket's path is limited to 108 bytes.
	dir, err := os.MkdirTemp("", "csi-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	d, err := csidriver.New(csidriver.Options{NodeID: "sanity-node", StateDir: filepath.Join(dir, "state"), Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "csi.sock")
	served := make(chan error, 1)
	go func() { served <- d.Serve(t.Context(), socket) }()
	tick, deadline := time.NewTicker(10*time.Millisecond), time.After(10*time.Second)
	defer tick.Stop()
	for _, err := os.Stat(socket); err != nil; _, err = os.Stat(socket) {
		select {
		case <-tick.C:
		case err := <-served:
			t.Fatalf("the driver stopped: %v", err)
		case <-deadline:
			t.Fatal("the driver's socket never appeared")
		}
	}
	cmd := exec.CommandContext(t.Context(), filepath.Join(bin, "csi-sanity"), "--csi.endpoint="+socket,
		"--csi.mountdir="+filepath.Join(dir, "mnt"), "--csi.stagingdir="+filepath.Join(dir, "stage"),
		"--ginkgo.no-color", "--ginkgo.timeout=5m")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("csi-sanity: %v\n%s", err, out)
	}
	t.Logf("csi-sanity:\n%s", tail(out, 2000))
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
