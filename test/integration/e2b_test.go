package integration_test

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// tinyProfile is a profile of tinyCapacity environments, for a burst of creates over it.
const (
	tinyProfile  = "tiny"
	tinyCapacity = 3
)

// e2bTestDir is the node:test suite that drives the unmodified E2B SDK.
const e2bTestDir = "../e2b"

// e2bFrontEnd is a running E2B front end of a system, and the API keys of its two tenants.
type e2bFrontEnd struct {
	url          string
	key, otherKy string
	log          *clustertest.SyncBuffer
	// keys is the key file a replica is started with; diag the first replica's diagnostics.
	keys, diag string
}

// startE2B runs the E2B front end against the system's first gateway, as the client
// "other" (which may attest owners), with two API keys (two owners) and two templates:
// "base" cold on profiletest's profile, "warm" on the pooled profile, "tiny" on tinyProfile.
func startE2B(t *testing.T, sys *system) *e2bFrontEnd {
	t.Helper()
	dir := t.TempDir()
	newKey := func() string {
		var b [20]byte
		_, _ = rand.Read(b[:])
		return "e2b_" + hex.EncodeToString(b[:])
	}
	hash := func(k string) string { s := sha256.Sum256([]byte(k)); return hex.EncodeToString(s[:]) }
	fe := &e2bFrontEnd{key: newKey(), otherKy: newKey(), log: &clustertest.SyncBuffer{}}
	var token [32]byte
	_, _ = rand.Read(token[:])
	if err := os.WriteFile(filepath.Join(dir, "token.key"), []byte(base64.StdEncoding.EncodeToString(token[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keys := fmt.Sprintf(`version: 1
tokenKeyFile: token.key
keys:
  - id: tenant-a
    sha256: %s
    owner: {issuer: https://idp.example, subject: tenant-a}
  - id: tenant-b
    sha256: %s
    owner: {issuer: https://idp.example, subject: tenant-b}
`, hash(fe.key), hash(fe.otherKy))
	if err := os.WriteFile(filepath.Join(dir, "keys.yaml"), []byte(keys), 0o600); err != nil {
		t.Fatal(err)
	}
	fe.keys = filepath.Join(dir, "keys.yaml")
	fe.url, fe.diag = startE2BReplica(t, sys, fe.keys, fe.log)
	return fe
}

// startE2BReplica runs one front end process with the key file and returns its URL and its
// diagnostics address.
func startE2BReplica(t *testing.T, sys *system, keys string, log *clustertest.SyncBuffer) (string, string) {
	t.Helper()
	files, err := sys.ClientFiles(otherClient)
	if err != nil {
		t.Fatal(err)
	}
	addrs, err := devcluster.FreeAddrs(2)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(e2bBin, "--listen-address", addrs[0], "--diagnostics-address", addrs[1],
		"--gateway", sys.gateways[0].Listen, "--gateway-server-name", "localhost", "--gateway-ca", files.CAFile,
		"--client-cert", files.CertFile, "--client-key", files.KeyFile, "--keys", keys,
		"--template", "base="+profiletest.Name, "--template", "warm="+pooledProfile, "--template", "tiny="+tinyProfile, "--log-format", "text", "--log-level", "debug")
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("e2b front end log (%s):\n%s", addrs[0], log.String())
		}
	})
	url := "http://" + addrs[0]
	clustertest.Eventually(t, 30*time.Second, "the E2B front end serving", func() bool {
		resp, err := http.Get(url + "/sandboxes")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusUnauthorized
	})
	return url, addrs[1]
}

// The unmodified E2B SDK (e2b 2.51.0, pinned by test/e2b's lockfile) runs its programs
// against execplane through the front end: sandboxes created cold and from a warm pool,
// commands streamed with their exit codes, background commands found again from a second
// SDK instance, the file API, listing by metadata, timeouts, pause and resume keeping the
// files, kill; a wrong key and another key's sandbox refused as E2B refuses them; two
// replicas of the front end acting on one sandbox in turn (test/e2b/e2b.test.mjs names each
// case).
func TestE2BSDK(t *testing.T) {
	node := needNodePackages(t, e2bTestDir)
	sys := startSystemProfiles(t, pooledProfilesYAML(2, 0)+profileYAML(tinyProfile, "registry.example/python:3.13", "kwok-volume", tinyCapacity, ""), 1)
	fe := startE2B(t, sys)
	second, _ := startE2BReplica(t, sys, fe.keys, &clustertest.SyncBuffer{}) // a second replica, stateless like the first
	waitPool(t, sys, pooledProfile, 2)
	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=tap", "--test-concurrency=1", "e2b.test.mjs")
	cmd.Dir = e2bTestDir
	cmd.Env = append(os.Environ(), "E2B_API_URL="+fe.url, "E2B_SANDBOX_URL="+fe.url, "E2B_API_KEY="+fe.key,
		"E2B_OTHER_API_KEY="+fe.otherKy, "E2B_SECOND_URL="+second, "E2B_WARM_TEMPLATE=warm", "E2B_TINY_TEMPLATE=tiny", fmt.Sprintf("E2B_TINY_CAPACITY=%d", tinyCapacity))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the E2B SDK's suite failed: %v", err)
	}
	if !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), "# skipped 0") || !strings.Contains(string(out), "# todo 0") {
		t.Fatal("node did not pass every test")
	}
	// The front end counted what it served, by bounded route: the creates, the 429s of the
	// burst, the envd procedures.
	resp, err := http.Get("http://" + fe.diag + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{
		`execplane_e2b_requests_total{code="201",route="POST /v2/sandboxes"}`,
		`execplane_e2b_requests_total{code="429",route="POST /v2/sandboxes"}`,
		`execplane_e2b_requests_total{code="200",route="/process.Process/Start"}`,
		`execplane_e2b_sandboxes_open `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("the front end's metrics lack %s", want)
		}
	}
}

// A background command started through the E2B SDK outlives a restart of the gateway behind
// the front end: a second program, after the restart, finds it in commands.list and follows
// it to its end with its whole output (test/e2b/restart.mjs).
func TestE2BProcessesOutliveAGatewayRestart(t *testing.T) {
	node := needNodePackages(t, e2bTestDir)
	sys := startSystemProfiles(t, pooledProfilesYAML(1, 0), 1)
	fe := startE2B(t, sys)
	program := func(args ...string) map[string]any {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), node, append([]string{"restart.mjs"}, args...)...)
		cmd.Dir = e2bTestDir
		cmd.Env = append(os.Environ(), "E2B_API_URL="+fe.url, "E2B_SANDBOX_URL="+fe.url, "E2B_API_KEY="+fe.key, "E2B_WARM_TEMPLATE=warm")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("node restart.mjs %v: %v\n%s", args, err, stderr.String())
		}
		var v map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("node restart.mjs %v printed %q", args, out)
		}
		return v
	}
	started := program("start")
	if _, err := sys.System.Restart(sys.gateways[0].Process); err != nil {
		t.Fatal(err)
	}
	if err := sys.WaitReady(t.Context(), time.Minute); err != nil {
		t.Fatal(err)
	}
	got := program("follow", started["id"].(string), fmt.Sprint(started["pid"]))
	want := map[string]any{"listed": true, "exitCode": float64(0), "stdout": "before\nafter\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("after the gateway's restart (-want +got):\n%s", diff)
	}
}
