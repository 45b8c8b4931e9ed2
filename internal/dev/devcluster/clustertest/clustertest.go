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
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/precondition"
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
	// RealNode, when set, joins the real node (RealNodeImages builds its images).
	RealNode *devcluster.RealNodeOptions
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
		RealNode:   opts.RealNode,
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
		// The real node's stop fails when the machine is left changed: so do the tests.
		fmt.Fprintln(os.Stderr, "clustertest: stop:", err)
		if code == 0 {
			code = 1
		}
	}
	if code != 0 || os.Getenv(KeepEnv) == "1" {
		fmt.Fprintf(os.Stderr, "clustertest: cluster state kept in %s\n", stateDir)
	} else {
		_ = os.RemoveAll(stateDir)
	}
	return code
}

// SkipShort skips t under -short (make test-unit): it needs a local cluster, its own or the
// package's. Like every missing precondition (internal/dev/precondition), it fails instead
// under CI=true: CI runs the cluster tests, and a -short run there would prove nothing.
func SkipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		precondition.Missing(t, "integration test: needs the local cluster (run without -short)")
	}
}

// Cluster returns the package's cluster, skipping the test under -short.
func Cluster(t testing.TB) *devcluster.Cluster {
	t.Helper()
	SkipShort(t)
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

// Paths inside executor images that ExecutorFiles provides: the real helper, and hostile
// stand-ins that answer outside the helper protocol (a replaced or compromised helper).
const (
	HelperPath = "/execplane/helper"
	HostileDir = "/execplane/hostile/"
)

// Hostile are the hostile executors' shell scripts, by name (HostileDir + name).
var Hostile = map[string]string{
	// A length prefix of 4 GiB.
	"oversize": `printf '\377\377\377\377'; cat >/dev/null`,
	// A frame whose payload is not a message.
	"garbage": `printf '\000\000\000\005\377\377\377\377\377'; cat >/dev/null`,
	// Never answers.
	"silent": `exec sleep 3600`,
	// A valid empty response, then more bytes.
	"trailing": `printf '\000\000\000\002\022\000x'`,
	// A valid empty response, then a failing exit.
	"exitcode": `printf '\000\000\000\002\022\000'; exit 3`,
	// A valid empty response, then never exits.
	"lingers": `printf '\000\000\000\002\022\000'; exec sleep 3600`,
	// Takes the request, then dies by SIGKILL before answering (as the OOM killer kills).
	"killed": `head -c 4 >/dev/null; kill -KILL $$`,
}

// ExecutorFiles returns Options.ImageFiles with the helper ($EXECPLANE_HELPER_BIN, or built
// from modRoot's cmd/helper into dir) at HelperPath, the hostile scripts (Hostile,
// HostileSessions), written into dir, under HostileDir, and the pre-session helper's
// stand-in at OldHelperPath.
func ExecutorFiles(dir, modRoot string) (map[string]string, error) {
	files := map[string]string{}
	helper := os.Getenv("EXECPLANE_HELPER_BIN")
	if helper == "" {
		helper = filepath.Join(dir, "helper")
		cmd := exec.Command("go", "build", "-o", helper, "./cmd/helper")
		cmd.Dir = modRoot
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("building the helper: %v\n%s", err, out)
		}
	}
	files[HelperPath] = helper
	scripts := map[string]string{OldHelperPath: oldHelper(helper)}
	for name, script := range Hostile {
		scripts[HostileDir+name] = script
	}
	for name, script := range HostileSessions {
		scripts[HostileDir+name] = script
	}
	for at, script := range scripts {
		path := filepath.Join(dir, "stand-in-"+filepath.Base(at))
		if err := os.WriteFile(path, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			return nil, err
		}
		files[at] = path
	}
	return files, nil
}

// GoBuild builds pkg into out with `go build flags...`, run in modRoot, for the binaries a
// test package runs as processes.
func GoBuild(modRoot, out, pkg string, flags ...string) error {
	cmd := exec.Command("go", append(append([]string{"build"}, flags...), "-o", out, pkg)...)
	cmd.Dir = modRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// RealNodeImages builds the real node's images into dir/images.tar: the helper
// ($EXECPLANE_HELPER_BIN, which must be static, or built from modRoot's cmd/helper), the
// sandbox process (internal/dev/pause) and the machine's static busybox.
func RealNodeImages(dir, modRoot string) (*devcluster.RealNodeOptions, error) {
	helper := os.Getenv("EXECPLANE_HELPER_BIN")
	if helper == "" {
		helper = filepath.Join(dir, "helper")
		if err := StaticBuild(modRoot, helper, "./cmd/helper"); err != nil {
			return nil, err
		}
	}
	pause := filepath.Join(dir, "pause")
	if err := StaticBuild(modRoot, pause, "./internal/dev/pause"); err != nil {
		return nil, err
	}
	archive := filepath.Join(dir, "images.tar")
	if err := devimage.WriteStack(archive, devimage.Binaries{Helper: helper, Pause: pause, Busybox: devimage.BusyboxPath}); err != nil {
		return nil, err
	}
	return &devcluster.RealNodeOptions{Images: archive, SandboxImage: devimage.PauseRef}, nil
}

// StaticBuild builds pkg, in modRoot, as a static binary (as make build builds the helper):
// the real node's images hold no C library.
func StaticBuild(modRoot, out, pkg string) error {
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, pkg)
	cmd.Dir = modRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
	}
	return nil
}

// LocalHelper is the helper binary executors run, once MainWithExecutors has prepared it.
var LocalHelper string

// MainWithExecutors is Main with ExecutorFiles (the real helper at HelperPath, the hostile
// stand-ins under HostileDir) in a temporary directory removed afterwards, and the real node
// when realNode is set (RealNodeImages). modRoot is the module root, relative to the test
// package.
func MainWithExecutors(m *testing.M, modRoot string, realNode *devcluster.RealNodeOptions) int {
	dir, err := os.MkdirTemp("", "executor-files-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	files, err := ExecutorFiles(dir, modRoot)
	if err != nil {
		fmt.Fprintln(os.Stderr, "clustertest:", err)
		return 1
	}
	LocalHelper = files[HelperPath]
	return Main(m, Options{ImageFiles: files, RealNode: realNode})
}

// Eventually polls cond every 50 ms until it holds, failing the test after d.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Poll reports whether cond held within d, checking it every 50 ms (Eventually, for a
// caller that says itself what it saw when it did not).
func Poll(d time.Duration, cond func() bool) bool {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(d)
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			return cond()
		}
	}
	return true
}

// FreeAddrs returns n distinct free loopback addresses, for the processes a test starts.
func FreeAddrs(t testing.TB, n int) []string {
	t.Helper()
	addrs, err := devcluster.FreeAddrs(n)
	if err != nil {
		t.Fatal(err)
	}
	return addrs
}

// SyncBuffer is a log buffer a child process writes while the test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Contains reports whether sub was written.
func (s *SyncBuffer) Contains(sub string) bool { return strings.Contains(s.String(), sub) }

// ProxiedKubeconfig writes a copy of kubeconfig whose server is reached through proxy.
func ProxiedKubeconfig(t testing.TB, kubeconfig string, proxy func(target string) string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range cfg.Clusters {
		u, err := url.Parse(cluster.Server)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = proxy(u.Host)
		cluster.Server = u.String()
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
