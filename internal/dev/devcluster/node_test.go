package devcluster_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/precondition"
)

// realNodeStartTimeout bounds a cluster start with the real node, including a first build
// of the node's binaries (about 2 minutes warm from the control plane's build cache).
const realNodeStartTimeout = 15 * time.Minute

// realNodeOptions builds the stack's images for a cluster with the real node, or skips t
// where the machine cannot run one.
func realNodeOptions(t *testing.T) *devcluster.RealNodeOptions {
	t.Helper()
	clustertest.SkipShort(t)
	if err := devcluster.RealNodeAvailable(); err != nil {
		precondition.Missing(t, "%v", err)
	}
	if _, err := os.Stat(devimage.BusyboxPath); err != nil {
		precondition.Missing(t, "%s (make node-packages): %v", devimage.BusyboxPath, err)
	}
	node, err := clustertest.RealNodeImages(t.TempDir(), "../../..")
	if err != nil {
		t.Fatal(err)
	}
	return node
}

// keptDir is a state directory removed after a passing test and kept, with the node's logs,
// after a failing one.
func keptDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "execplane-real-node-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("state kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}

func startWithRealNode(t *testing.T, ctx context.Context, stateDir string, node *devcluster.RealNodeOptions) *devcluster.Cluster {
	t.Helper()
	c, err := devcluster.Start(ctx, devcluster.Options{StateDir: stateDir, RealNode: node, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// realExecutorPod is executorPod bound for the real node, running the example executor
// image's helper in pause mode.
func realExecutorPod(name, claim string) *corev1.Pod {
	pod := executorPod(name, claim)
	pod.Spec.NodeSelector = map[string]string{devcluster.RealNodeLabel: "true"}
	pod.Spec.Tolerations = []corev1.Toleration{{Key: devcluster.RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	pod.Spec.TerminationGracePeriodSeconds = new(int64(2))
	ctr := &pod.Spec.Containers[0]
	ctr.Image = devimage.ExecutorRef
	ctr.ImagePullPolicy = corev1.PullNever
	ctr.Command = []string{devimage.HelperPath, "--pause"}
	return pod
}

func lockRealNode(t *testing.T, ctx context.Context) *devcluster.RealNodeLock {
	t.Helper()
	lock, err := devcluster.LockRealNode(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(lock.Release)
	return lock
}

func snapshot(t *testing.T) devcluster.HostState {
	t.Helper()
	s, err := devcluster.SnapshotHost()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// startCompared starts a cluster with the real node under the machine's lock, held from a
// snapshot before the start to the comparison after stop: the returned stop stops the
// cluster and fails t unless the machine is as before. A test that ends early stops it too.
func startCompared(t *testing.T, ctx context.Context, node *devcluster.RealNodeOptions) (*devcluster.Cluster, func()) {
	t.Helper()
	// Held from before to after: no other real node (another test package's) runs while the
	// machine is compared.
	node.HeldLock = lockRealNode(t, ctx)
	before := snapshot(t)
	c := startWithRealNode(t, ctx, keptDir(t), node)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = c.Stop()
		}
	})
	return c, func() {
		t.Helper()
		stopped = true
		if err := c.Stop(); err != nil {
			t.Fatal(err)
		}
		requireUnchanged(t, before)
	}
}

func requireUnchanged(t *testing.T, before devcluster.HostState) {
	t.Helper()
	if d := snapshot(t).Diff(before); len(d) > 0 {
		t.Fatalf("the machine is not as before the real node:\n  %s", strings.Join(d, "\n  "))
	}
}

// The real node joins the cluster: the executor image, imported into containerd, runs as a
// Pod scheduled onto it in a namespace enforcing Pod Security "restricted", as the non-root
// user, with a read-only root; pods/exec reaches it through the API server and the
// kubelet. After Stop, the machine is as it was: kernel settings, addresses, links, mounts,
// cgroups, directories, processes and firewall rules.
func TestRealNodeRunsTheExecutorImageAndLeavesTheMachineAsItWas(t *testing.T) {
	node := realNodeOptions(t)
	ctx := clustertest.Context(t, realNodeStartTimeout)
	c, stop := startCompared(t, ctx, node)
	ns, err := c.CreateNamespace(ctx, "real")
	if err != nil {
		t.Fatal(err)
	}
	claim := createClaim(t, c, ns, "workspace")
	pod := runPod(t, c, ns, realExecutorPod("executor", claim.Name))
	if pod.Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("pod scheduled onto %q, not the real node", pod.Spec.NodeName)
	}
	if r := execIn(t, c, ns, pod.Name, websocket, "", "id"); r.err != nil || !strings.HasPrefix(r.stdout, "uid=65532(nonroot) gid=65532(nonroot)") {
		t.Fatalf("id: %+v (%v)", r, r.err)
	}
	if r := execIn(t, c, ns, pod.Name, websocket, "", "touch", "/etc/x"); r.exitCode == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Fatalf("touch /etc/x on the read-only root: %+v", r)
	}
	if r := execIn(t, c, ns, pod.Name, websocket, "", "sh", "-c", "echo kept > /workspace/f && cat /workspace/f"); r.err != nil || r.stdout != "kept\n" {
		t.Fatalf("write to the workspace: %+v", r)
	}
	stop()
}

// crashEnv makes the test binary a real node's owner that a test kills.
const crashEnv = "EXECPLANE_TEST_REAL_NODE_OWNER"

// realNodeOwner is the process TestRealNodeCrashIsCleanedUpByTheNextStart kills (the test
// binary, run with crashEnv set: TestMain runs this instead of the tests): it starts a cluster
// with the real node and a running Pod, says so, and waits to be killed. It runs under the
// lock its parent holds (descriptor 3, inherited).
func realNodeOwner(dir string) error {
	ctx := context.Background()
	lock, err := devcluster.RealNodeLockFrom(os.NewFile(3, "real-node-lock"))
	if err != nil {
		return err
	}
	c, err := devcluster.Start(ctx, devcluster.Options{StateDir: dir, RealNode: &devcluster.RealNodeOptions{
		Images: filepath.Join(dir, "..", "images.tar"), SandboxImage: devimage.PauseRef, HeldLock: lock}})
	if err != nil {
		return err
	}
	ns, err := c.CreateNamespace(ctx, "crash")
	if err != nil {
		return err
	}
	// No claim: the Pod's workspace volume is an emptyDir, which leaves as much behind.
	pod := realExecutorPod("executor", "")
	pod.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	if _, err := c.Kube().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := c.Kube().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning, nil
	}); err != nil {
		return fmt.Errorf("the owner's Pod is not Running after a minute: %w", err)
	}
	fmt.Println("REAL-NODE-RUNNING")
	select {}
}

// A run killed with its real node up leaves containers, mounts, the address, the bridge and
// the changed kernel settings behind; the next taker of the machine's lock (a start, a
// test's "before", execplane-dev host) finds its ledger and undoes all of it, so the machine
// is as before the killed run at once, and the next node's stop leaves it so again. The test
// holds the lock while the owner runs (the killed owner ran under it).
func TestRealNodeCrashIsCleanedUpByTheNextStart(t *testing.T) {
	node := realNodeOptions(t)
	ctx := clustertest.Context(t, realNodeStartTimeout)
	node.HeldLock = lockRealNode(t, ctx)
	before := snapshot(t)
	parent := t.TempDir()
	if err := os.Rename(node.Images, filepath.Join(parent, "images.tar")); err != nil {
		t.Fatal(err)
	}
	node.Images = filepath.Join(parent, "images.tar")
	state := filepath.Join(parent, "state")
	owner := exec.CommandContext(ctx, os.Args[0], "-test.timeout=0")
	owner.Env = append(os.Environ(), crashEnv+"="+state)
	owner.ExtraFiles = []*os.File{node.HeldLock.File()}
	owner.Stderr = os.Stderr
	out, err := owner.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	running := false
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == "REAL-NODE-RUNNING" {
			running = true
			break
		}
	}
	if !running {
		_ = owner.Wait()
		t.Fatal("the owner process ended before its real node ran a Pod")
	}
	_ = owner.Process.Signal(syscall.SIGKILL)
	_ = owner.Wait()
	left := snapshot(t).Diff(before)
	if !strings.Contains(strings.Join(left, "\n"), "address added: lo 172.31.255.1/32") {
		t.Fatalf("the killed run left nothing to clean up (the test proves nothing): %v", left)
	}
	t.Logf("left by the killed run:\n  %s", strings.Join(left, "\n  "))
	node.HeldLock.Release()
	node.HeldLock = lockRealNode(t, ctx)
	requireUnchanged(t, before)
	c := startWithRealNode(t, ctx, keptDir(t), node)
	if n, err := c.Kube().CoreV1().Nodes().Get(ctx, devcluster.RealNodeName, metav1.GetOptions{}); err != nil || n.Name == "" {
		t.Fatalf("real node after the cleanup: %v", err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	requireUnchanged(t, before)
}
