package realnode_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// pod returns the environment's executor Pod.
func (s *system) pod(t *testing.T, w *workspace) *corev1.Pod {
	t.Helper()
	if err := w.env.Refresh(ctx(t)); err != nil {
		t.Fatal(err)
	}
	uid := w.env.Status().GetPodUid()
	pods, err := s.cluster.Kube().CoreV1().Pods(s.ExecutorNamespace()).List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range pods.Items {
		if string(pods.Items[i].UID) == uid {
			return &pods.Items[i]
		}
	}
	t.Fatalf("no executor Pod with UID %q", uid)
	return nil
}

// The executor Pod a profile builds runs on the real node, in a namespace enforcing Pod
// Security "restricted", and what the spec asks for holds in the running container: the
// profile's non-root uid and gid, no capability, no privilege escalation, the runtime's
// seccomp filter, a read-only root file system, no service-account token, the workspace
// writable at /workspace — and none of the machine's files: a canary written on the host is
// not there, and the root holds the image's directories only.
func TestExecutorIsConfinedOnTheRealNode(t *testing.T) {
	s := startSystem(t)
	// Where the container has nothing of its own: were the machine's file system visible, the
	// file would be there (/tmp would not do, the container mounts its own).
	canary := filepath.Join("/root", fmt.Sprintf("execplane-canary-%d", time.Now().UnixNano()))
	if err := os.WriteFile(canary, []byte("the host's secret\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(canary) })

	w := s.ensure(t, "confined", profileExample)
	pod := s.pod(t, w)
	if pod.Spec.NodeName != devcluster.RealNodeName {
		t.Fatalf("executor Pod on %q, not the real node", pod.Spec.NodeName)
	}
	ns, err := s.cluster.Kube().CoreV1().Namespaces().Get(ctx(t), pod.Namespace, metav1.GetOptions{})
	if err != nil || ns.Labels[devcluster.PodSecurityEnforceLabel] != "restricted" {
		t.Fatalf("executor namespace %s does not enforce restricted: %v %v", pod.Namespace, ns.Labels, err)
	}
	if got := w.must(t, "id -u; id -g"); got != fmt.Sprintf("%d\n%d\n", executor.RunAsUser, executor.RunAsGroup) {
		t.Errorf("id: %q", got)
	}
	status := w.must(t, "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/self/status")
	for _, want := range []string{"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2"} {
		if !strings.Contains(status, want+"\n") {
			t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
		}
	}
	if res := w.sh(t, "touch /etc/x"); res.State != executionv1.CommandState_COMMAND_STATE_FAILED || !strings.Contains(res.Stderr.String(), "Read-only file system") {
		t.Errorf("touch /etc/x: %v %q", res.State, res.Stderr)
	}
	if res := w.sh(t, "ls /var/run/secrets/kubernetes.io/serviceaccount /run/secrets"); res.State != executionv1.CommandState_COMMAND_STATE_FAILED {
		t.Errorf("a service-account token directory exists: %v %q", res.State, res.Stdout)
	}
	if got := w.must(t, "echo kept > /workspace/f && cat /workspace/f && pwd"); got != "kept\n/workspace\n" {
		t.Errorf("workspace: %q", got)
	}
	if res := w.sh(t, "cat "+canary); res.State != executionv1.CommandState_COMMAND_STATE_FAILED || strings.Contains(res.Stdout.String(), "secret") {
		t.Errorf("the host's canary is visible: %v %q", res.State, res.Stdout)
	}
	root := strings.Fields(w.must(t, "ls -a /"))
	want := []string{".", "..", "bin", "dev", "etc", "execplane", "proc", "sys", "tmp", "workspace"}
	if !slices.Equal(root, want) {
		t.Errorf("the container's root holds %v, want the image's %v", root, want)
	}
	// PID 1 is the executor's own main process, not the machine's init.
	if got := w.must(t, "tr '\\0' ' ' < /proc/1/cmdline"); got != "/execplane/helper --pause " {
		t.Errorf("pid 1: %q", got)
	}
}

// /tmp is a tmpfs of the profile's tmpSizeLimit: a write past it fails at once with ENOSPC,
// the file holds at most the limit, and the next command (and /tmp) work.
func TestWritePastTmpSizeLimitFails(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "tmp", profileExample)
	if got := w.must(t, "grep ' /tmp ' /proc/self/mountinfo"); !strings.Contains(got, " - tmpfs ") || !strings.Contains(got, fmt.Sprintf("size=%dk", tmpSizeLimit>>10)) {
		t.Fatalf("/tmp is not a tmpfs of tmpSizeLimit: %q", got)
	}
	res := w.sh(t, fmt.Sprintf("dd if=/dev/zero of=/tmp/big bs=1048576 count=%d", 2*tmpSizeLimit>>20))
	if res.State != executionv1.CommandState_COMMAND_STATE_FAILED || !strings.Contains(res.Stderr.String(), "No space left on device") {
		t.Fatalf("a write of twice tmpSizeLimit: %v exit %d, stderr %q", res.State, res.ExitCode, res.Stderr)
	}
	if got := w.must(t, "stat -c %s /tmp/big"); got == "" || mustAtoi(t, got) > tmpSizeLimit {
		t.Errorf("/tmp/big holds %s bytes, more than tmpSizeLimit %d", strings.TrimSpace(got), tmpSizeLimit)
	}
	if got := w.must(t, "rm /tmp/big && echo small > /tmp/f && cat /tmp/f"); got != "small\n" {
		t.Errorf("after the refusal: %q", got)
	}
}

// A memory bomb past the profile's memory limit is killed by the kernel and reported as
// OUT_OF_MEMORY, not as a plain signal; the executor survives and the next command runs.
func TestMemoryBombIsReportedOutOfMemory(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "oom", profileExample)
	res := w.sh(t, `x=$(head -c 400000000 /dev/zero | tr '\0' a); echo ${#x}`)
	if res.State != executionv1.CommandState_COMMAND_STATE_OUT_OF_MEMORY || res.Signal != 9 {
		t.Fatalf("memory bomb: %v signal %d exit %d, stderr %q", res.State, res.Signal, res.ExitCode, res.Stderr)
	}
	if got := w.must(t, "echo alive"); got != "alive\n" {
		t.Errorf("after the bomb: %q", got)
	}
}

// A fork bomb is held by the Pod's pid limit (forks fail, the machine is untouched), ended
// at its timeout with every descendant, and the next command works.
func TestForkBombIsHeldByThePodPidLimit(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "forks", profileExample)
	start := time.Now()
	// The timeout leaves the bomb time to reach the limit on a loaded machine, where its
	// Pod's share of two cores makes it slow (it has not in 5 s).
	const timeout = 15 * time.Second
	// The shell execs its sleep: a fork for it could fail once the bomb holds the pid limit,
	// and the command would end FAILED on its own, before its timeout.
	res, err := w.run.Run(ctx(t), client.Command{Shell: "f() { f | f & }; f; exec sleep 600", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	if res.State != executionv1.CommandState_COMMAND_STATE_TIMED_OUT {
		t.Fatalf("fork bomb: %v, stderr %.200q", res.State, res.Stderr)
	}
	if !strings.Contains(res.Stderr.String(), "can't fork") {
		t.Errorf("no fork was refused, the pid limit was not reached: %.200q", res.Stderr)
	}
	if d := time.Since(start); d > timeout+10*time.Second {
		t.Errorf("the call took %s", d)
	}
	// Only the executor's main process, the session's helper, this command's helper and its
	// shell remain, once the last of the bomb's processes has been reaped.
	w.onlyItself(t, 10*time.Second, "the bomb's processes gone")
}

// The session's helper killed mid-command by SIGKILL — here by the workload itself, as the
// OOM killer would — in a real container: the call's outcome is unknown (never a result, never
// retried), and the next call opens a new session on the same Pod and works.
func TestSessionHelperKilledMidCommand(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "killed-helper", profileExample)
	before := w.must(t, "echo $PPID; cut -d' ' -f4 /proc/$PPID/stat") // the command's helper, and the session's
	// $PPID is the command's helper; its parent, field 4 of its stat, the session's.
	_, err := w.run.Run(ctx(t), client.Command{Shell: "kill -KILL $(cut -d' ' -f4 /proc/$PPID/stat); sleep 30", Timeout: time.Minute})
	if !errors.Is(err, client.ErrOutcomeUnknown) {
		t.Fatalf("a command whose session helper was killed: %v, want an unknown outcome", err)
	}
	after := w.must(t, "echo $PPID; cut -d' ' -f4 /proc/$PPID/stat")
	if strings.Fields(before)[1] == strings.Fields(after)[1] {
		t.Fatalf("the next call ran under the same session helper (%s)", strings.Fields(after)[1])
	}
	if opened, err := s.Gateways[0].Metric(t.Context(), "execplane_gateway_sessions_opened_total"); err != nil || opened != 2 {
		t.Fatalf("sessions opened: %v %v, want 2", opened, err)
	}
}

// With a helperImage, the init container installs the helper into an image that has none
// (UserlandRef holds no /execplane: internal/dev/devimage's tests), read-only, and commands
// run through it as in the example image.
func TestHelperImageInstallsTheHelper(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "installed", profileHelperImage)
	pod := s.pod(t, w)
	if len(pod.Spec.InitContainers) != 1 || len(pod.Status.InitContainerStatuses) != 1 {
		t.Fatalf("init containers: %+v", pod.Status.InitContainerStatuses)
	}
	if term := pod.Status.InitContainerStatuses[0].State.Terminated; term == nil || term.ExitCode != 0 {
		t.Fatalf("the install-helper container: %+v", pod.Status.InitContainerStatuses[0].State)
	}
	if got := w.must(t, "id -u && cat /proc/self/mountinfo | grep ' /execplane ' | grep -c ' ro,'"); got != "65532\n1\n" {
		t.Errorf("the helper's mount: %q", got)
	}
	if res := w.sh(t, "touch /execplane/x"); res.State != executionv1.CommandState_COMMAND_STATE_FAILED {
		t.Errorf("the workload wrote into the helper's directory: %v", res.State)
	}
}

// onlyItself waits until the executor holds no process but its main one, the session's
// helper, the probe's helper and the probe's shell, and names what else it saw when it gives
// up. The probe forks nothing: the glob and read are the shell's own.
func (w *workspace) onlyItself(t *testing.T, d time.Duration, what string) {
	t.Helper()
	const probe = `set -- /proc/[0-9]*; echo $#; for p; do read -r s < $p/stat && echo "$s"; done 2>/dev/null`
	var last string
	ok := func() bool {
		last = w.must(t, probe)
		n, _, _ := strings.Cut(last, "\n")
		return mustAtoi(t, n) <= 4
	}
	if !clustertest.Poll(d, ok) {
		t.Fatalf("timed out after %s waiting for: %s; the executor's processes (pid (comm) state ppid ...):\n%s", d, what, last)
	}
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscanf(strings.TrimSpace(s), "%d", &n); err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// A fork bomb inside a detached command is held by the Pod's pid limit too; cancelled, it
// leaves no survivor within the grace and a second, and the next command works.
func TestDetachedForkBombIsHeldAndCancelled(t *testing.T) {
	s := startSystem(t)
	w := s.ensure(t, "detached-forks", profileExample)
	c := ctx(t)
	// exec: the shell's own sleep needs no fork the bomb could have used up (see above).
	info, err := w.run.Start(c, client.Command{Shell: "f() { f | f & }; f; exec sleep 600"}, client.StartOptions{ID: "bomb"})
	if err != nil || !info.Running() {
		t.Fatalf("start: %+v %v", info, err)
	}
	clustertest.Eventually(t, 30*time.Second, "the bomb reached the pid limit", func() bool {
		_, chunks, err := w.run.Status(c, "bomb", client.Cursor{}, 1<<20)
		for _, ch := range chunks {
			if ch.Stream == client.Stderr && strings.Contains(string(ch.Data), "can't fork") {
				return true
			}
		}
		return err != nil
	})
	const grace = time.Second
	began := time.Now()
	end, err := w.run.Cancel(c, "bomb", grace)
	took := time.Since(began)
	if err != nil || end.State != executionv1.CommandState_COMMAND_STATE_CANCELLED {
		t.Fatalf("cancel: %+v %v", end, err)
	}
	// The supervisor records the end only once every descendant was reaped; a message would
	// say that some outlived its bound.
	if end.Result == nil || end.Result.Message != "" {
		t.Fatalf("the cancelled bomb's result: %+v", end.Result)
	}
	// grace + 1 s for the kill and the reaping, and the round trip of one call on this node.
	if took > grace+time.Second+500*time.Millisecond {
		t.Errorf("the cancel took %s", took)
	}
	// The bomb was reaped before its end was recorded; what may still be exiting is its
	// supervisor. Then: the executor's main process, the session's helper, this command's
	// helper and its shell (a probe through the real node's exec takes a while on a loaded
	// machine, hence the bound).
	w.onlyItself(t, 10*time.Second, "nothing of the bomb left")
}
