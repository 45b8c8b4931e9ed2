package podexec

import (
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Executors the tests reach.
const (
	realHelper = clustertest.HelperPath
	hostileDir = clustertest.HostileDir
)

func TestMain(m *testing.M) { os.Exit(clustertest.MainWithExecutors(m, "../..", nil)) }

// executorPod starts an executor Pod (built as the controller builds it) on a claim and
// waits until it runs.
func executorPod(t *testing.T) (ns string, pod PodRef) {
	t.Helper()
	c := clustertest.Cluster(t)
	ns = clustertest.Namespace(t)
	ctx := clustertest.Context(t, time.Minute)
	_, entry := profiletest.Registry(t, profiletest.YAML(10))
	env := &v1alpha1.ExecutionEnvironment{ObjectMeta: metav1.ObjectMeta{Name: "xenv-test", Namespace: ns, UID: types.UID("00000000-0000-4000-8000-000000000001")},
		Spec: v1alpha1.ExecutionEnvironmentSpec{Profile: "python", ProfileDigest: entry.Digest}}
	pvc, err := executor.PVC(env, entry)
	if err != nil {
		t.Fatal(err)
	}
	p, err := executor.Pod(env, entry, executor.PodOptions{ServiceAccount: "default"})
	if err != nil {
		t.Fatal(err)
	}
	p.OwnerReferences, p.Finalizers = nil, nil // no environment object exists to own it
	if _, err := c.Kube().CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	created, err := c.Kube().CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		got, err := c.Kube().CoreV1().Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
		if err == nil && got.Status.Phase == corev1.PodRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("executor Pod not running: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return ns, PodRef{Name: created.Name, UID: created.UID}
}

func fileRequest(id string, op *executionv1.FileOperation) *helperv1.Request {
	return &helperv1.Request{Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: id,
		Limits:    &helperv1.Limits{MaxFileBytes: 1 << 20, MaxCommandBytes: 64 << 10, MaxCommandMillis: 10_000},
		Operation: &helperv1.Request_File{File: op}}
}

// The real helper in an executor Pod, through pods/exec: a write, then a read of it, and a
// command that reads the file.
func TestExecuteRealHelper(t *testing.T) {
	ns, pod := executorPod(t)
	e, err := NewExec(ExecConfig{HelperPath: realHelper}, clustertest.Cluster(t).RESTConfig(), ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := clustertest.Context(t, time.Minute)
	write := fileRequest("w1", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte("hello.txt"), Content: []byte("hi there"), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}})
	resp, err := e.Execute(ctx, pod, write, 0)
	if err != nil || resp.GetFile().GetWrite() == nil {
		t.Fatalf("write: %v %v", resp, err)
	}
	read := fileRequest("r1", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("hello.txt")}}})
	resp, err = e.Execute(ctx, pod, read, 0)
	if err != nil || string(resp.GetFile().GetRead().GetContent()) != "hi there" {
		t.Fatalf("read: %v %v", resp, err)
	}
	cmd := &helperv1.Request{Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: "c1",
		Limits: &helperv1.Limits{MaxFileBytes: 1 << 20, MaxCommandBytes: 64 << 10, MaxCommandMillis: 10_000},
		Operation: &helperv1.Request_Command{Command: &executionv1.CommandSpec{
			Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"cat", "hello.txt"}}}}}}
	resp, err = e.Execute(ctx, pod, cmd, 0)
	if err != nil || string(resp.GetCommand().GetStdout().GetHead()) != "hi there" {
		t.Fatalf("command: %v %v", resp, err)
	}
}

// An exec the API server refuses (here: no such container in the Pod) never started
// anything: it is ErrExecutorUnreachable (retryable), never an unknown outcome.
func TestExecuteRefusedUpgradeRanNothing(t *testing.T) {
	ns, pod := executorPod(t)
	e, err := NewExec(ExecConfig{HelperPath: realHelper, Container: "no-such-container"}, clustertest.Cluster(t).RESTConfig(), ns)
	if err != nil {
		t.Fatal(err)
	}
	read := fileRequest("r1", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("x")}}})
	_, err = e.Execute(clustertest.Context(t, time.Minute), pod, read, 0)
	if !errors.Is(err, ErrExecutorUnreachable) || errors.Is(err, ErrOutcomeUnknown) {
		t.Fatalf("got %v", err)
	}
}

// A Pod that is not the one the environment records — absent, or of the same name with
// another UID (re-created behind the view) — is never exec'd into: ErrExecutorUnreachable,
// and the write it was sent did not happen.
func TestExecuteOnlyIntoTheRecordedPod(t *testing.T) {
	ns, pod := executorPod(t)
	e, err := NewExec(ExecConfig{HelperPath: realHelper}, clustertest.Cluster(t).RESTConfig(), ns)
	if err != nil {
		t.Fatal(err)
	}
	ctx := clustertest.Context(t, time.Minute)
	write := func(name string) *helperv1.Request {
		return fileRequest("w-"+name, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
			Path: []byte(name), Content: []byte("x"), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}}})
	}
	for name, ref := range map[string]PodRef{
		"another-uid": {Name: pod.Name, UID: types.UID("00000000-0000-4000-8000-0000000000ff")},
		"absent":      {Name: "no-such-pod", UID: pod.UID},
	} {
		if _, err := e.Execute(ctx, ref, write(name), 0); !errors.Is(err, ErrExecutorUnreachable) || errors.Is(err, ErrOutcomeUnknown) {
			t.Errorf("%s: got %v, want ErrExecutorUnreachable", name, err)
		}
		stat := fileRequest("s-"+name, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte(name)}}})
		resp, err := e.Execute(ctx, pod, stat, 0)
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetError().GetCode() != helperv1.ErrorCode_ERROR_CODE_NOT_FOUND {
			t.Errorf("%s: the refused write happened (stat answered %v)", name, resp)
		}
	}
}

// Hostile executors are refused as protocol violations, within the call's deadline and
// with bounded memory (a 4 GiB length prefix allocates nothing).
func TestExecuteHostileHelpers(t *testing.T) {
	ns, pod := executorPod(t)
	for name := range clustertest.Hostile {
		t.Run(name, func(t *testing.T) {
			e, err := NewExec(ExecConfig{HelperPath: hostileDir + name}, clustertest.Cluster(t).RESTConfig(), ns)
			if err != nil {
				t.Fatal(err)
			}
			ctx := clustertest.Context(t, 2*time.Second)
			var before runtime.MemStats
			runtime.ReadMemStats(&before)
			start := time.Now()
			_, err = e.Execute(ctx, pod, fileRequest("", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte(".")}}}), 64<<10)
			elapsed := time.Since(start)
			var after runtime.MemStats
			runtime.ReadMemStats(&after)
			if err == nil {
				t.Fatal("a hostile executor's answer was accepted")
			}
			if !errors.Is(err, ErrProtocol) && !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("error %v is neither a protocol violation nor an unknown outcome", err)
			}
			// Killed after it took the request: the operation may have run.
			if name == "killed" && !errors.Is(err, ErrOutcomeUnknown) {
				t.Fatalf("a helper killed before answering: %v, want an unknown outcome", err)
			}
			if elapsed > 2*time.Second+time.Second {
				t.Fatalf("took %s past a 2 s deadline", elapsed)
			}
			if grew := int64(after.TotalAlloc) - int64(before.TotalAlloc); grew > 64<<20 {
				t.Fatalf("allocated %d bytes", grew)
			}
			t.Logf("%s: %v after %s", name, err, elapsed.Round(time.Millisecond))
		})
	}
}
