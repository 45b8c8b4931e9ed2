package devcluster

import (
	"crypto/x509"
	"encoding/pem"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestPodFSTranslate(t *testing.T) {
	fs := &podFS{
		images: map[string]string{"/execplane/helper": "/build/bin/helper"},
		mounts: []mount{ // longest first, as mapPod sorts them
			{containerPath: "/workspace/cache", localPath: "/state/pods/u/volumes/cache"},
			{containerPath: "/workspace", localPath: "/state/volumes/pv-1"},
			{containerPath: "/tmp", localPath: "/state/pods/u/volumes/tmp"},
		},
	}
	cases := map[string]string{
		"/execplane/helper":  "/build/bin/helper",
		"/workspace":         "/state/volumes/pv-1",
		"/workspace/a/b":     "/state/volumes/pv-1/a/b",
		"/workspace/cache/x": "/state/pods/u/volumes/cache/x",
		"/workspacex":        "/workspacex", // a prefix of a name is not a parent
		"/tmp":               "/state/pods/u/volumes/tmp",
		"/bin/sh":            "/bin/sh",
		"sh":                 "sh",
		"":                   "",
	}
	for in, want := range cases {
		if got := fs.translate(in); got != want {
			t.Errorf("translate(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestGeneratePKIChainsAndUsages(t *testing.T) {
	p, err := generatePKI(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(readCert(t, p.CACert))
	cases := []struct {
		path  string
		usage x509.ExtKeyUsage
		name  string
	}{
		{p.APIServerCert, x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{p.APIServerCert, x509.ExtKeyUsageServerAuth, "kubernetes.default.svc"},
		{p.KubeletCert, x509.ExtKeyUsageServerAuth, "127.0.0.1"},
		{p.AdminCert, x509.ExtKeyUsageClientAuth, ""},
		{p.KubeletClientCert, x509.ExtKeyUsageClientAuth, ""},
	}
	for _, tc := range cases {
		cert := readCert(t, tc.path)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: roots, DNSName: tc.name, KeyUsages: []x509.ExtKeyUsage{tc.usage}}); err != nil {
			t.Errorf("%s for %q: %v", tc.path, tc.name, err)
		}
	}
	if admin := readCert(t, p.AdminCert); !slices.Contains(admin.Subject.Organization, "system:masters") {
		t.Errorf("admin certificate not in system:masters: %v", admin.Subject)
	}
	for _, key := range []string{p.CAKey, p.AdminKey, p.ServiceAccountKey} {
		st, err := os.Stat(key)
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, err %v", key, st.Mode().Perm(), err)
		}
	}
}

func readCert(t *testing.T, path string) *x509.Certificate {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

func TestCheckBinariesNamesWhatIsMissing(t *testing.T) {
	err := checkBinaries(t.TempDir(), true)
	if err == nil {
		t.Fatal("empty directory accepted")
	}
	for _, name := range append(slices.Clone(binaryNames), kwokName, "kwok-stages/pod-ready.yaml") {
		if !contains(err.Error(), name) {
			t.Errorf("error does not name %s: %v", name, err)
		}
	}
}

// A cluster of the real node alone (make demo) needs no KWOK: its absence is not missing.
func TestCheckBinariesWithoutFakeNodesNeedsNoKWOK(t *testing.T) {
	dir := t.TempDir()
	for _, name := range binaryNames {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := checkBinaries(dir, false); err != nil {
		t.Errorf("the core programs refused without fake nodes: %v", err)
	}
	err := checkBinaries(dir, true)
	if err == nil || !contains(err.Error(), kwokName) {
		t.Errorf("fake nodes without KWOK: got %v, want an error naming %s", err, kwokName)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A port handed out is not handed out again while its process may still be starting, though
// nothing listens on it yet (the CI flake: two hostile gateways got one metrics port).
func TestFreePortsNeverHandsOutAPortTwice(t *testing.T) {
	dir := t.TempDir()
	old := portClaimDir
	portClaimDir = dir
	t.Cleanup(func() { portClaimDir = old })
	seen := map[int]bool{}
	for range 20 {
		ports, err := freePorts(10)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ports {
			if seen[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			seen[p] = true
		}
	}
	// An expired claim is taken over.
	p := slices.Collect(maps.Keys(seen))[0]
	past := time.Now().Add(-2 * portClaimTTL)
	if err := os.Chtimes(filepath.Join(dir, strconv.Itoa(p)), past, past); err != nil {
		t.Fatal(err)
	}
	if !claimPort(p) {
		t.Errorf("the expired claim of port %d was not taken over", p)
	}
	if claimPort(p) {
		t.Errorf("port %d claimed twice", p)
	}
}

// A delayed stage carries spec.delay right before spec.next; a stage whose next cannot be
// found is refused, not left undelayed.
func TestDelayStage(t *testing.T) {
	stage := "kind: Stage\nspec:\n  selector: {}\n  next:\n    statusTemplate: x"
	got, err := delayStage(stage, 2*time.Second)
	want := "kind: Stage\nspec:\n  selector: {}\n  delay:\n    durationMilliseconds: 2000\n  next:\n    statusTemplate: x"
	if err != nil || got != want {
		t.Fatalf("delayStage: %v\n%s", err, got)
	}
	if _, err := delayStage(got, time.Second); err == nil {
		t.Error("a stage delayed twice")
	}
	if _, err := delayStage("kind: Stage\nspec: {}", time.Second); err == nil {
		t.Error("a stage without spec.next")
	}
}

// A supervised child that exits on its own is started again (kube-scheduler after an API
// server restart, as its kubelet would); once stopAll took it, it never is.
func TestSupervisedProcessIsStartedAgainUntilStopped(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	var ps processes
	p, err := ps.startSupervised(dir, "child", "/bin/sh", "-c", "echo run >> "+runs+"; exec sleep 60")
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		data, _ := os.ReadFile(runs)
		return strings.Count(string(data), "run\n")
	}
	if err := poll(t.Context(), 10*time.Second, func() (bool, error) { return count() == 1, nil }, "the child's start"); err != nil {
		t.Fatal(err)
	}
	// It exits on its own (killed from outside, as a crash): while it waits to be started
	// again the cluster is not broken, and a second one starts.
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
	if err := ps.firstExited(); err != nil {
		t.Errorf("a supervised child about to be started again is reported as exited: %v", err)
	}
	if err := poll(t.Context(), 10*time.Second, func() (bool, error) {
		return count() == 2 && ps.firstExited() == nil, nil
	}, "the child started again"); err != nil {
		t.Fatalf("%v: %d runs, %v", err, count(), ps.firstExited())
	}
	current, err := ps.find("child")
	if err != nil || current == p {
		t.Fatalf("the set still holds the exited child (%v)", err)
	}
	// Stopped, it stays stopped: the relaunch its exit schedules finds it gone from the set.
	if killed := ps.stopAll(); len(killed) != 0 {
		t.Errorf("stopAll had to kill %v", killed)
	}
	ps.relaunch(current)
	if n := count(); n != 2 {
		t.Errorf("started %d times, want 2: a stopped child was started again", n)
	}
	if _, err := ps.find("child"); err == nil {
		t.Error("a stopped child is back in the set")
	}
}
