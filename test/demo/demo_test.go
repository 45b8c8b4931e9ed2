// Package demo_test runs the stack `make demo` starts, as a user would, on each kind of node:
// it starts clusters of its own (execplane-dev up), so it keeps none in the package.
package demo_test

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devstack"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/internal/executor"
)

var controllerBin, gatewayBin, execctlBin, devBin, e2bBin, helperBin, pauseBin string

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "demo-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	controllerBin, gatewayBin, execctlBin = filepath.Join(dir, "controller"), filepath.Join(dir, "gateway"), filepath.Join(dir, "execctl")
	devBin, e2bBin = filepath.Join(dir, "execplane-dev"), filepath.Join(dir, "e2b")
	helperBin, pauseBin = filepath.Join(dir, "helper"), filepath.Join(dir, "pause")
	for _, b := range []struct{ out, pkg string }{
		{controllerBin, "./cmd/controller"}, {gatewayBin, "./cmd/gateway"}, {execctlBin, "./cmd/execctl"}, {e2bBin, "./cmd/e2b"},
	} {
		if err := clustertest.GoBuild("../..", b.out, b.pkg, "-race"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	// execplane-dev without the race detector, as make demo builds it: it builds the real
	// node's Debian executor image, whose .deb decompression takes minutes under -race (its
	// concurrency is debroot's, tested under -race in its package).
	if err := clustertest.GoBuild("../..", devBin, "./cmd/execplane-dev"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Static, as make build and bin/pause build them: the real node's images hold no libc.
	for _, b := range []struct{ out, pkg string }{{helperBin, "./cmd/helper"}, {pauseBin, "./internal/dev/pause"}} {
		if err := clustertest.StaticBuild("../..", b.out, b.pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return m.Run()
}

// upTimeout covers the stack's start, and on the real node the wait for the machine's real
// node lock while another test package holds it (a few minutes).
const upTimeout = 15 * time.Minute

// The stack `make demo` starts, on the real node (its default) and on the fake nodes:
// `execplane-dev up` with the controller and gateway binaries brings up a cluster of its own
// and execplane on it in the background, `execplane-dev demo` walks a real client through the
// session, a command in a new environment run by hand with execctl runs as the profile's user
// (the real node's container: 65532; the fake node: this machine's user, the helper a local
// process), `execplane-dev down` leaves nothing running — on the real node, the machine as it
// was — and a new stack in the same directory starts afresh.
func TestDemoStack(t *testing.T) {
	for _, node := range []string{devstack.NodeReal, devstack.NodeKWOK} {
		t.Run(node, func(t *testing.T) {
			clustertest.SkipShort(t) // starts clusters of its own
			var before devcluster.HostState
			if node == devstack.NodeReal {
				if err := devcluster.RealNodeAvailable(); err != nil {
					precondition.Missing(t, "the real node: %v", err)
				}
				before = idleSnapshot(t)
			}
			demoStack(t, node)
			if node == devstack.NodeReal {
				if d := idleSnapshot(t).Diff(before); len(d) > 0 {
					t.Fatalf("after execplane-dev down the machine is not as before:\n  %s", strings.Join(d, "\n  "))
				}
			}
		})
	}
}

// idleSnapshot reads the machine while no real node runs: under the machine's real-node
// lock, which other test packages' nodes take turns on.
func idleSnapshot(t *testing.T) devcluster.HostState {
	t.Helper()
	lock, err := devcluster.LockRealNode(clustertest.Context(t, upTimeout), t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Release()
	s, err := devcluster.SnapshotHost()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// byHand is the command run by hand with execctl exec, by node kind.
var byHand = map[string]string{
	devstack.NodeKWOK: "id -u",
	devstack.NodeReal: `bash -c 'id -u; python3 --version; git --version; echo x > ~/probe; readlink -f ~/probe'`,
}

func demoStack(t *testing.T, node string) {
	state := filepath.Join(t.TempDir(), "dev")
	dev := func(timeout time.Duration, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(clustertest.Context(t, timeout), devBin, args...)
		cmd.Dir = "../.."
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("execplane-dev %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	defer func() {
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(state, "devstack.log"))
			t.Logf("--- devstack log ---\n%s", log)
		}
		_ = exec.Command(devBin, "down", "--state-dir", state).Run()
	}()
	upArgs := []string{"up", "--state-dir", state, "--node", node, "--helper", helperBin, "--pause", pauseBin,
		"--controller", controllerBin, "--gateway", gatewayBin, "--e2b", e2bBin}
	up := dev(upTimeout, upArgs...)
	if !strings.Contains(up, "source "+filepath.Join(state, "caller.env")) {
		t.Fatalf("up did not say how to reach the stack:\n%s", up)
	}
	// The real node alone: make demo neither runs KWOK nor builds it (docs/quickstart.md);
	// the fake nodes' stack runs it.
	_, err := os.Stat(filepath.Join(state, "cluster", "kwok.log"))
	if ranKWOK := err == nil; ranKWOK != (node == devstack.NodeKWOK) {
		t.Errorf("--node %s: KWOK ran: %v, want %v", node, ranKWOK, node == devstack.NodeKWOK)
	}
	pid, err := os.ReadFile(filepath.Join(state, "devstack.pid"))
	if err != nil {
		t.Fatal(err)
	}
	if again := dev(time.Minute, upArgs...); !strings.Contains(again, "already running") {
		t.Fatalf("a second up:\n%s", again)
	}
	demo := dev(3*time.Minute, "demo", "--state-dir", state)
	for _, want := range []string{"10/10 delete the retired environment", `"HELLO FROM AN EXECPLANE WORKSPACE\n"`, "done in"} {
		if !strings.Contains(demo, want) {
			t.Fatalf("the walkthrough lacks %q:\n%s", want, demo)
		}
	}
	// By hand, as docs/quickstart.md says: a command in a new environment, and who runs it.
	script := fmt.Sprintf(`set -e
. %s
out=$(%[2]s env ensure by-hand --profile %[3]s)
id=$(echo "$out" | awk 'NR==2 {print $1}'); rev=$(echo "$out" | awk 'NR==2 {print $2}')
%[2]s run acquire by-hand "$id" --revision "$rev" --run-id turn-1 >/dev/null
%[2]s exec "$id" -- %[4]s
%[2]s run release "$id" >/dev/null`, filepath.Join(state, "caller.env"), execctlBin, devstack.DemoProfile, byHand[node])
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = "../.."
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("by hand: %v\n%s%s", err, out, stderr.String())
	}
	// The fake node runs the helper as this machine's user; the real node the Debian
	// executor image as the profile's: bash, python3 and git there, HOME writable.
	want := []string{strconv.Itoa(os.Getuid())}
	if node == devstack.NodeReal {
		want = []string{strconv.Itoa(executor.RunAsUser), "Python 3.", "git version 2.", "/workspace/probe"}
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(got) != len(want) {
		t.Fatalf("execctl exec ENV -- %s printed %q, want lines starting %q", byHand[node], got, want)
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Fatalf("execctl exec ENV -- %s printed %q, want lines starting %q", byHand[node], got, want)
		}
	}
	// An E2B program, unchanged, with the stack's e2b.env (docs/e2b.md): on the real node,
	// the workspace is /home/user for files.write, bash and python3 alike.
	e2b := exec.CommandContext(clustertest.Context(t, 4*time.Minute), "sh", "-c", ". "+shellQuote(filepath.Join(state, "e2b.env"))+" && exec node --test --test-reporter=tap stack.mjs")
	e2b.Dir = "../e2b"
	e2b.Env = append(os.Environ(), "E2B_NODE="+node)
	if out, err := e2b.CombinedOutput(); err != nil || !strings.Contains(string(out), "# pass 1") || !strings.Contains(string(out), "# fail 0") {
		log, _ := os.ReadFile(filepath.Join(state, "e2b", "e2b.log"))
		t.Fatalf("the E2B program on the stack: %v\n%s\n--- e2b log ---\n%s", err, out, log)
	}
	if down := dev(time.Minute, "down", "--state-dir", state); !strings.Contains(down, "stopped") {
		t.Fatalf("down:\n%s", down)
	}
	// A second stack in the same directory starts afresh (new material, no stale state).
	dev(upTimeout, upArgs...)
	if again := dev(3*time.Minute, "demo", "--state-dir", state); !strings.Contains(again, "done in") {
		t.Fatalf("the walkthrough on a second stack:\n%s", again)
	}
	dev(time.Minute, "down", "--state-dir", state)
	n, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(n, 0); err == nil {
		t.Fatalf("the stack's daemon (pid %d) still runs after down", n)
	}
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
