package controller_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security/highwater"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

var controllerBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "controller-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controllerBin = filepath.Join(dir, "controller")
	// Built with failpoints (internal/failpoint): inert unless a test arms one.
	if out, err := exec.Command("go", "build", "-race", "-tags", "failpoint", "-o", controllerBin, "../../cmd/controller").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the controller: %v\n%s", err, out)
		os.Exit(1)
	}
	code := clustertest.Main(m, clustertest.Options{})
	os.RemoveAll(dir)
	os.Exit(code)
}

type replica struct {
	id     string
	cmd    *exec.Cmd
	diag   string
	listen string
	log    *clustertest.SyncBuffer
	done   chan error
}

// Lease timings of the replicas: fastLease for the tests that hand leadership over (a
// stopped leader loses it within seconds), steadyLease for those that load one replica and
// must not lose it to a renewal starved by the load (TestThousandEnsuresThroughTheControlAPI
// lost it in CI with a 1.5 s renew deadline, under the parallel tiers and the race detector).
var (
	fastLease   = []string{"--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "200ms"}
	steadyLease = []string{"--lease-duration", "30s", "--renew-deadline", "20s", "--retry-period", "2s"}
)

func startReplica(t *testing.T, kubeconfig, ns, id string, env ...string) *replica {
	t.Helper()
	return startReplicaWith(t, kubeconfig, ns, id, fastLease, env...)
}

// startReplicaWith starts a controller replica with the given lease flags and extra
// environment.
func startReplicaWith(t *testing.T, kubeconfig, ns, id string, lease []string, env ...string) *replica {
	t.Helper()
	return startReplicaProfiles(t, kubeconfig, ns, id, lease, profilesYAML, env...)
}

// startReplicaProfiles starts a controller replica with the given lease flags, profiles
// file and extra environment.
func startReplicaProfiles(t *testing.T, kubeconfig, ns, id string, lease []string, profilesFile string, env ...string) *replica {
	t.Helper()
	profiles := filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(profiles, []byte(profilesFile), 0o600); err != nil {
		t.Fatal(err)
	}
	material := securityMaterial(t, kubeconfig, ns)
	addrs := clustertest.FreeAddrs(t, 2)
	r := &replica{id: id, diag: addrs[0], log: &clustertest.SyncBuffer{}, done: make(chan error, 1), listen: addrs[1]}
	args := append([]string{
		"--namespace", ns, "--kubeconfig", kubeconfig, "--identity", id, "--profiles", profiles,
		"--security-manifest", material.Manifest, "--gateway-identity", material.Gateway.Identity,
		"--executor-service-account", "default"}, lease...)
	r.cmd = exec.Command(controllerBin, append(args,
		"--listen-address", r.listen, "--diagnostics-address", r.diag, "--log-format", "text", "--log-level", "debug")...)
	r.cmd.Env = append(os.Environ(), env...)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.done <- r.cmd.Wait() }()
	t.Cleanup(func() {
		_ = r.cmd.Process.Signal(syscall.SIGCONT)
		_ = r.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", id, r.log.String())
		}
	})
	return r
}

// materials holds one development security bundle per namespace: replicas of one
// namespace share it, as pods of one Deployment mount the same Secret.
var materials sync.Map

// securityMaterial returns the namespace's bundle, generating it and the initial high-water
// mark on first use.
func securityMaterial(t *testing.T, kubeconfig, ns string) *devbundle.Result {
	t.Helper()
	if m, ok := materials.Load(ns); ok {
		return m.(*devbundle.Result)
	}
	res, err := devbundle.Generate(filepath.Join(t.TempDir(), "security"), devbundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := highwater.CreateInitial(t.Context(), clustertest.Cluster(t).Kube(), ns, "execplane-security-high-water"); err != nil {
		t.Fatal(err)
	}
	actual, _ := materials.LoadOrStore(ns, res)
	return actual.(*devbundle.Result)
}

// request is one series of the replica's count of its API requests.
type request struct{ method, resource string }

// Series of that count the election test follows: the Lease reads every campaign attempt
// makes, and the Lease updates by which the leader renews.
var (
	leaseReads   = request{"GET", "leases"}
	leaseRenewal = request{"PUT", "leases"}
)

// requestSeries is one line of that count in the text exposition format.
var requestSeries = regexp.MustCompile(`^execplane_controller_kube_requests_total\{method="([A-Z]+)",resource="([a-z]+)"\} (\S+)$`)

// requests scrapes the replica's own count of its API requests
// (execplane_controller_kube_requests_total), by method and resource.
func (r *replica) requests(t *testing.T) map[request]int {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + r.diag + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[request]int{}
	for line := range strings.SplitSeq(string(body), "\n") {
		m := requestSeries.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		n, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			t.Fatal(err)
		}
		counts[request{m[1], m[2]}] = int(n)
	}
	return counts
}

// writes is the replica's count of API writes (POST, PUT, PATCH, DELETE) to what the leader
// manages: environments, Pods, claims and Events. (Every replica may campaign for the Lease
// and raise the security material's high-water mark.)
func (r *replica) writes(t *testing.T) int {
	t.Helper()
	total := 0
	for req, n := range r.requests(t) {
		if req.method != "GET" && req.resource != "leases" && req.resource != "configmaps" {
			total += n
		}
	}
	return total
}

// stateSeries is a series of the replica's execplane_controller_replica_state.
var stateSeries = regexp.MustCompile(`^execplane_controller_replica_state\{state="([a-z_]+)"\} 1$`)

// state is the replica's state as its metrics say: "leader", "standby", "not_ready", or ""
// while unreachable.
func (r *replica) state() string {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + r.diag + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return ""
	}
	for line := range strings.SplitSeq(string(body), "\n") {
		if m := stateSeries.FindStringSubmatch(line); m != nil {
			return m[1]
		}
	}
	return ""
}

// leads reports whether the replica leads and is ready to serve.
func (r *replica) leads() bool { return r.state() == "leader" }

// ready reports the replica's /readyz status (false while unreachable).
func (r *replica) ready() bool {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + r.diag + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// Two controller processes: exactly one leads, and both are ready — the leader to serve, the
// follower to take over. The leader stopped (SIGSTOP) past its lease loses it to the other;
// resumed, it finds its leadership gone and exits non-zero instead of acting on it. A clean
// SIGTERM releases the Lease.
func TestTwoReplicasLeaderElectionAndFencing(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	_, err := c.InstallCRDs(t.Context(), "../../deploy/helm/execplane/files/crds")
	if err != nil {
		t.Fatal(err)
	}
	a := startReplica(t, c.Kubeconfig(), ns, "replica-a")
	b := startReplica(t, c.Kubeconfig(), ns, "replica-b")
	// Both serving their metrics (state "" is a replica not up yet), exactly one leading.
	clustertest.Eventually(t, 20*time.Second, "one replica leads, the other stands by", func() bool {
		sa, sb := a.state(), b.state()
		return sa != "" && sb != "" && (sa == "leader") != (sb == "leader")
	})
	leader, follower := a, b
	if b.leads() {
		leader, follower = b, a
	}
	// Leadership follows the Lease, not a moment: the follower campaigns again and finds the
	// Lease held, and the leader renews it, each seen in the replica's own request count.
	// Each loop runs one attempt at a time and counts a request as it starts, so two more
	// mean an attempt that began after this point has finished.
	reads, renewals := follower.requests(t)[leaseReads], leader.requests(t)[leaseRenewal]
	clustertest.Eventually(t, 10*time.Second, "the follower campaigns and the leader renews", func() bool {
		return follower.requests(t)[leaseReads] >= reads+2 && leader.requests(t)[leaseRenewal] >= renewals+2
	})
	if got := []string{leader.state(), follower.state()}; got[0] != "leader" || got[1] != "standby" || !leader.ready() || !follower.ready() {
		t.Fatalf("states %v, ready %v %v: want a ready leader and a ready standby", got, leader.ready(), follower.ready())
	}
	// Only the leader writes: an environment provisioned while both run is the leader's
	// work alone (each process counts its own API requests; Lease traffic aside).
	g := &rig{c: c, ns: ns, ctx: t.Context(), entry: pythonProfile(t)}
	if g.exec, err = versioned.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	g.create(t, "env-l")
	g.waitReady(t, "env-l")
	if n := follower.writes(t); n != 0 {
		t.Fatalf("the follower made %d API writes", n)
	}
	if n := leader.writes(t); n == 0 {
		t.Fatal("the leader's writes were not counted")
	}

	if err := leader.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	clustertest.Eventually(t, 15*time.Second, "the follower takes over", follower.leads)
	t.Logf("takeover %s after the leader was stopped", time.Since(stopped).Round(10*time.Millisecond))
	if err := leader.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-leader.done:
		if err == nil {
			t.Fatal("the deposed leader exited 0; it must report lost leadership")
		}
		if !leader.log.Contains("leadership lost") {
			t.Fatalf("the deposed leader exited (%v) without reporting lost leadership", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the deposed leader kept running after resuming")
	}
	if !follower.leads() || !follower.ready() {
		t.Fatal("the new leader stopped leading or being ready")
	}

	if err := follower.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-follower.done:
		if err != nil {
			t.Fatalf("SIGTERM: exit %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the leader did not stop on SIGTERM")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lease, err := c.Kube().CoordinationV1().Leases(ns).Get(ctx, "execplane-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if holder := ptr.Deref(lease.Spec.HolderIdentity, ""); holder != "" {
		t.Fatalf("the Lease was not released on SIGTERM: holder %q", holder)
	}
}
