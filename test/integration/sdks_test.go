package integration_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// pythonSDKDir is the Python SDK, its tests beside it.
const pythonSDKDir = "../../sdk/python"

// debianPython is the interpreter whose packages (python3-grpcio, python3-protobuf,
// python3-pytest) the SDK is built and tested against: not whichever python3 comes first on
// PATH (a pyenv shim, a virtualenv).
const debianPython = "/usr/bin/python3"

// The Python SDK's tests (pytest) walk the Go SDK's session against the real processes:
// ensure → ready → acquire → write → run → read → release, a compare-and-swap conflict, a
// stale-epoch refusal, and a retried call (its answer lost after the server acted) that does
// not act twice.
func TestPythonSDK(t *testing.T) {
	if out, err := exec.Command(debianPython, "-c", "import grpc, google.protobuf, pytest").CombinedOutput(); err != nil {
		precondition.Missing(t, "%s lacks grpcio, protobuf or pytest (make python-packages installs them): %v %s", debianPython, err, out)
	}
	sys := startSystem(t, 1)
	caller := sys.cli(t, "caller")
	cmd := exec.CommandContext(t.Context(), debianPython, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests")
	cmd.Dir = pythonSDKDir
	cmd.Env = append(caller.env, "PYTHONPATH=.", "PYTHONDONTWRITEBYTECODE=1", "EXECPLANE_PROFILE="+profiletest.Name)
	out, err := cmd.CombinedOutput()
	t.Logf("pytest:\n%s", out)
	if err != nil {
		t.Fatalf("the Python SDK's tests failed: %v", err)
	}
	// Every test ran and passed: none skipped (a skipped session proves nothing).
	summary := string(out)[strings.LastIndex(string(out), "\n=")+1:]
	if !strings.Contains(summary, " passed") || strings.Contains(summary, "skipped") || strings.Contains(summary, "deselected") {
		t.Fatalf("pytest's summary: %s", summary)
	}
}

// typeScriptSDKDir is the TypeScript SDK, its tests beside it.
const typeScriptSDKDir = "../../sdk/typescript"

// The TypeScript SDK's tests (node's test runner, after tsc) walk the same session as the
// Python SDK's against the real processes; the rest (requests, usage, errors) need no server.
func TestTypeScriptSDK(t *testing.T) {
	needNodePackages(t, typeScriptSDKDir)
	sys := startSystem(t, 1)
	caller := sys.cli(t, "caller")
	cmd := exec.CommandContext(t.Context(), "npm", "test", "--silent")
	cmd.Dir = typeScriptSDKDir
	cmd.Env = append(caller.env, "EXECPLANE_PROFILE="+profiletest.Name)
	out, err := cmd.CombinedOutput()
	t.Logf("npm test:\n%s", out)
	if err != nil {
		t.Fatalf("the TypeScript SDK's tests failed: %v", err)
	}
	if !strings.Contains(string(out), "# pass 15\n") || !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), "# skipped 0") {
		t.Fatal("node did not pass the fifteen tests (three sessions, six request shapes, three usage calls, one snapshot call, two error readings)")
	}
}
