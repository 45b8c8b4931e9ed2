// Package clustertest is the harness integration tests use: one local cluster per test
// package (started in TestMain, stopped after the last test, also on failure or interrupt)
// and a fresh namespace per test.
//
//	func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }
//
//	func TestSomething(t *testing.T) {
//		c := clustertest.Cluster(t)   // skips under -short
//		ns := clustertest.Namespace(t)
//		...
//	}
package clustertest

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/devcluster"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KeepEnv keeps the cluster's state directory (logs, etcd data) after the tests when set
// to 1; it is always kept when a test failed.
const KeepEnv = "EXECPLANE_KEEP_CLUSTER"

// startTimeout bounds cluster start-up, including a cold build of the binaries (~7 min on 2
// cores) the first time on a new machine.
const startTimeout = 20 * time.Minute

// Options configure the package's cluster.
type Options struct {
	// Nodes is the number of fake nodes (default 1).
	Nodes int
	// ImageFiles maps paths inside executor images to local files.
	ImageFiles map[string]string
}

var (
	shared   *devcluster.Cluster
	startErr error
)

// Main starts the package's cluster, runs the tests and stops the cluster. Under -short it
// starts nothing and Cluster skips the tests that need one.
func Main(m *testing.M, opts Options) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	stateDir, err := os.MkdirTemp("", "execplane-cluster-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	shared, startErr = devcluster.Start(ctx, devcluster.Options{
		StateDir:   stateDir,
		Nodes:      opts.Nodes,
		ImageFiles: opts.ImageFiles,
		Logf:       func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	})
	cancel()
	if startErr != nil {
		fmt.Fprintf(os.Stderr, "clustertest: %v\n(state kept in %s)\n", startErr, stateDir)
		return 1
	}
	// Stop the cluster when the test binary is interrupted; children also get SIGKILL when
	// this process dies (Pdeathsig), so a timeout panic cannot leak them either.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			_ = shared.Stop()
			os.Exit(130)
		}
	}()
	code := m.Run()
	signal.Stop(sigs)
	close(sigs)
	if err := shared.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, "clustertest: stop:", err)
	}
	if code != 0 || os.Getenv(KeepEnv) == "1" {
		fmt.Fprintf(os.Stderr, "clustertest: cluster state kept in %s\n", stateDir)
	} else {
		_ = os.RemoveAll(stateDir)
	}
	return code
}

// Cluster returns the package's cluster, skipping the test under -short.
func Cluster(t testing.TB) *devcluster.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs the local cluster (run without -short)")
	}
	if shared == nil {
		t.Fatal("clustertest: no cluster; call clustertest.Main from TestMain")
	}
	if err := shared.Healthy(); err != nil {
		t.Fatalf("clustertest: the cluster is broken: %v", err)
	}
	return shared
}

// Namespace creates a namespace for the test (Pod Security "restricted" enforced) and
// deletes it when the test ends.
func Namespace(t testing.TB) string {
	t.Helper()
	c := Cluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := c.CreateNamespace(ctx, "test")
	if err != nil {
		t.Fatalf("clustertest: namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = c.Kube().CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
	})
	return ns
}

// Context returns a context that ends with the test or after timeout.
func Context(t testing.TB, timeout time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}
