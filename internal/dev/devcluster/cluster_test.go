package devcluster_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/util/exec"
	"k8s.io/streaming/pkg/httpstream"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(crashEnv); dir != "" {
		err := realNodeOwner(dir) // returns only on failure: it waits to be killed
		fmt.Fprintln(os.Stderr, "real node owner:", err)
		os.Exit(1)
	}
	os.Exit(clustertest.Main(m, clustertest.Options{}))
}

// A CRD with a status subresource: status is written through /status only, and a write with
// a stale resourceVersion is refused with 409 Conflict.
func TestCRDStatusSubresourceRefusesStaleWrites(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, time.Minute)
	if _, err := c.InstallCRDs(ctx, "testdata/crds"); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	widgets := dyn.Resource(schema.GroupVersionResource{Group: "smoke.execplane.dev", Version: "v1", Resource: "widgets"}).Namespace(ns)
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "smoke.execplane.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w1"},
		"spec":     map[string]any{"size": int64(1)},
		"status":   map[string]any{"observed": int64(99)},
	}}
	created, err := widgets.Create(ctx, w, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedInt64(created.Object, "status", "observed"); found {
		t.Fatal("status was accepted on create: the status subresource is not in effect")
	}
	stale := created.DeepCopy()
	_ = unstructured.SetNestedField(created.Object, int64(1), "status", "observed")
	updated, err := widgets.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("status update: %v", err)
	}
	if got, _, _ := unstructured.NestedInt64(updated.Object, "status", "observed"); got != 1 {
		t.Fatalf("status.observed = %d after update", got)
	}
	_ = unstructured.SetNestedField(stale.Object, int64(2), "status", "observed")
	_, err = widgets.UpdateStatus(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale status write: want 409 Conflict, got %v", err)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != 409 {
		t.Fatalf("want HTTP 409, got %v", err)
	}
}

// executorPod is a Pod that passes Pod Security "restricted", mounting claim at /workspace.
func executorPod(name, claim string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			RestartPolicy:                corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				RunAsUser:      ptr.To[int64](65532),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:  "executor",
				Image: "example.invalid/executor:test",
				Env: []corev1.EnvVar{
					{Name: "EXECPLANE_WORKSPACE_ROOT", Value: "/workspace"},
					{Name: "TMPDIR", Value: "/tmp"},
				},
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "workspace", MountPath: "/workspace"},
					{Name: "tmp", MountPath: "/tmp"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

func createClaim(t *testing.T, c *devcluster.Cluster, ns, name string) *corev1.PersistentVolumeClaim {
	t.Helper()
	ctx := clustertest.Context(t, 30*time.Second)
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: ptr.To(devcluster.StorageClassName),
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		},
	}
	if _, err := c.Kube().CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var bound *corev1.PersistentVolumeClaim
	waitFor(t, ctx, "claim Bound", func() bool {
		got, err := c.Kube().CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
		bound = got
		return err == nil && got.Status.Phase == corev1.ClaimBound && got.Spec.VolumeName != ""
	})
	return bound
}

func runPod(t *testing.T, c *devcluster.Cluster, ns string, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	if _, err := c.Kube().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod (Pod Security restricted enforced): %v", err)
	}
	var running *corev1.Pod
	waitFor(t, ctx, "pod Running", func() bool {
		got, err := c.Kube().CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
		running = got
		return err == nil && got.Status.Phase == corev1.PodRunning
	})
	return running
}

func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-tick.C:
		}
	}
}

type transport string

const (
	websocket transport = "websocket"
	spdy      transport = "spdy"
	fallback  transport = "fallback"
)

type execResult struct {
	stdout, stderr string
	exitCode       int
	err            error
}

func execIn(t *testing.T, c *devcluster.Cluster, ns, pod string, tr transport, stdin string, argv ...string) execResult {
	t.Helper()
	ctx := clustertest.Context(t, 30*time.Second)
	opts := &corev1.PodExecOptions{Container: "executor", Command: argv, Stdin: stdin != "", Stdout: true, Stderr: true}
	req := c.Kube().CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("exec").
		VersionedParams(opts, scheme.ParameterCodec)
	cfg := c.RESTConfig()
	var ex remotecommand.Executor
	ws, err := remotecommand.NewWebSocketExecutor(cfg, "GET", req.URL().String())
	if err != nil {
		t.Fatal(err)
	}
	sp, err := remotecommand.NewSPDYExecutor(cfg, "POST", req.URL())
	if err != nil {
		t.Fatal(err)
	}
	switch tr {
	case websocket:
		ex = ws
	case spdy:
		ex = sp
	case fallback:
		// Fall back only when the upgrade itself failed: a predicate that always answers true
		// would run the command a second time over SPDY after any WebSocket error.
		ex, err = remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	so := remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr}
	if stdin != "" {
		so.Stdin = strings.NewReader(stdin)
	}
	err = ex.StreamWithContext(ctx, so)
	res := execResult{stdout: stdout.String(), stderr: stderr.String(), err: err}
	var code exec.CodeExitError
	if errors.As(err, &code) {
		res.exitCode = code.Code
		res.err = nil
	}
	return res
}

// A Pod with a claim is scheduled by kube-scheduler onto a KWOK node and runs; pods/exec
// over WebSocket, SPDY and fallback returns stdout, stderr, stdin EOF and the exit code
// exactly; a file written into /workspace is read back by a second Pod on the same claim
// after the first is deleted.
func TestExecAndWorkspaceSurvivesPodReplacement(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	claim := createClaim(t, c, ns, "workspace")
	first := runPod(t, c, ns, executorPod("executor-1", claim.Name))
	if !strings.HasPrefix(first.Spec.NodeName, "devcluster-node-") {
		t.Fatalf("pod scheduled onto %q, not a KWOK node", first.Spec.NodeName)
	}

	for _, tr := range []transport{websocket, spdy, fallback} {
		t.Run(string(tr), func(t *testing.T) {
			// cat only ends when its stdin reaches EOF: the call returning proves EOF arrived.
			got := execIn(t, c, ns, first.Name, tr, "line one\nline two\n",
				"sh", "-c", "cat; echo to-stderr >&2; exit 3")
			if got.err != nil {
				t.Fatalf("exec: %v", got.err)
			}
			if got.stdout != "line one\nline two\n" || got.stderr != "to-stderr\n" || got.exitCode != 3 {
				t.Fatalf("got stdout=%q stderr=%q exit=%d", got.stdout, got.stderr, got.exitCode)
			}
			ok := execIn(t, c, ns, first.Name, tr, "", "true")
			if ok.err != nil || ok.exitCode != 0 {
				t.Fatalf("true: exit=%d err=%v", ok.exitCode, ok.err)
			}
		})
	}

	signaled := execIn(t, c, ns, first.Name, websocket, "", "sh", "-c", "kill -9 $$")
	if signaled.err != nil || signaled.exitCode != 128+int(syscall.SIGKILL) {
		t.Fatalf("killed by SIGKILL: exit=%d err=%v, want 137", signaled.exitCode, signaled.err)
	}
	missing := execIn(t, c, ns, first.Name, websocket, "", "/no/such/binary")
	if missing.exitCode != 127 {
		t.Fatalf("missing binary: exit=%d err=%v, want 127", missing.exitCode, missing.err)
	}

	write := execIn(t, c, ns, first.Name, spdy, "", "sh", "-c",
		`test "$EXECPLANE_WORKSPACE_ROOT" != /workspace && echo durable > "$EXECPLANE_WORKSPACE_ROOT/greeting" && echo scratch > "$TMPDIR/x" && echo ok`)
	if write.err != nil || write.exitCode != 0 || write.stdout != "ok\n" {
		t.Fatalf("write: %+v", write)
	}

	ctx := clustertest.Context(t, time.Minute)
	if err := c.Kube().CoreV1().Pods(ns).Delete(ctx, first.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "first pod gone", func() bool {
		_, err := c.Kube().CoreV1().Pods(ns).Get(ctx, first.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	second := runPod(t, c, ns, executorPod("executor-2", claim.Name))
	read := execIn(t, c, ns, second.Name, websocket, "", "sh", "-c", `cat "$EXECPLANE_WORKSPACE_ROOT/greeting"`)
	if read.err != nil || read.exitCode != 0 || read.stdout != "durable\n" {
		t.Fatalf("second pod read %+v, want the file the first pod wrote", read)
	}
	// /tmp is an emptyDir: per Pod, not carried over.
	tmp := execIn(t, c, ns, second.Name, websocket, "", "sh", "-c", `test -d "$TMPDIR" && test ! -e "$TMPDIR/x"`)
	if tmp.err != nil || tmp.exitCode != 0 {
		t.Fatalf("second pod sees the first pod's /tmp: %+v", tmp)
	}
}

// The endpoint refuses Pods on nodes it does not serve.
func TestNodeExecRefusesPodsOnOtherNodes(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, 30*time.Second)
	pod := executorPod("elsewhere", "none")
	pod.Spec.NodeName = "not-a-devcluster-node"
	if _, err := c.Kube().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := c.PKI()
	ne, err := devcluster.NewNodeExec(devcluster.NodeExecConfig{
		Kube: c.Kube(), Root: t.TempDir(), Nodes: c.NodeNames(),
		CertFile: p.KubeletCert, KeyFile: p.KubeletKey, ClientCAFile: p.CACert,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ne.Close()
	var out, errOut bytes.Buffer
	err = ne.ExecInContainer(ctx, ns+"/elsewhere", "", "executor", []string{"true"}, nil, nopCloser{&out}, nopCloser{&errOut}, false, nil, 0)
	if !errors.Is(err, devcluster.ErrPodNotServed) {
		t.Fatalf("want ErrPodNotServed, got %v", err)
	}
}

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// Leader election on a coordination.k8s.io Lease hands over when the leader releases it.
func TestLeaseLeaderElectionHandsOver(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	elected := make(chan string, 4)
	run := func(ctx context.Context, id string) (*leaderelection.LeaderElector, error) {
		lock := &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Name: "smoke-leader", Namespace: ns},
			Client:     c.Kube().CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: id},
		}
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock: lock, LeaseDuration: 4 * time.Second, RenewDeadline: 3 * time.Second, RetryPeriod: 250 * time.Millisecond,
			ReleaseOnCancel: true,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(context.Context) { elected <- id },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			return nil, err
		}
		go le.Run(ctx)
		return le, nil
	}
	ctxA, cancelA := context.WithCancel(t.Context())
	defer cancelA()
	if _, err := run(ctxA, "replica-a"); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-elected:
		if id != "replica-a" {
			t.Fatalf("first leader %s", id)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("replica-a never became leader")
	}
	ctxB, cancelB := context.WithCancel(t.Context())
	defer cancelB()
	if _, err := run(ctxB, "replica-b"); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	cancelA()
	select {
	case id := <-elected:
		if id != "replica-b" {
			t.Fatalf("second leader %s", id)
		}
		t.Logf("handover after %s", time.Since(released).Round(time.Millisecond))
	case <-time.After(20 * time.Second):
		t.Fatal("replica-b never took over after replica-a released the lease")
	}
	lease, err := c.Kube().CoordinationV1().Leases(ns).Get(t.Context(), "smoke-leader", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "replica-b" {
		t.Fatalf("lease holder %q", holder)
	}
	if ptr.Deref(lease.Spec.LeaseTransitions, 0) < 1 {
		t.Fatalf("lease transitions %d", ptr.Deref(lease.Spec.LeaseTransitions, 0))
	}
}

// Stop kills every process Start started, by PID, and a warm start is fast.
func TestStartStopLeavesNothingRunning(t *testing.T) {
	c := clustertest.Cluster(t)
	dir := t.TempDir()
	ctx := clustertest.Context(t, 2*time.Minute)
	second, err := devcluster.Start(ctx, devcluster.Options{StateDir: dir, BinDir: c.BinDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warm start: %s", second.StartupTime.Round(10*time.Millisecond))
	pids := readPIDs(t, dir)
	if len(pids) != 5 {
		t.Fatalf("want 5 processes (etcd, apiserver, controller-manager, scheduler, kwok), got %v", pids)
	}
	if err := second.Stop(); err != nil {
		t.Fatal(err)
	}
	for name, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("%s (pid %d) still exists after Stop: %v", name, pid, err)
		}
	}
	if err := second.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

func readPIDs(t *testing.T, dir string) map[string]int {
	t.Helper()
	pids := map[string]int{}
	for _, name := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"} {
		data, err := os.ReadFile(dir + "/" + name + ".pid")
		if err != nil {
			continue
		}
		var pid int
		for _, ch := range strings.TrimSpace(string(data)) {
			pid = pid*10 + int(ch-'0')
		}
		pids[name] = pid
	}
	return pids
}
