package integration_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// mcpTestDir holds the node test of execctl mcp and its pinned packages (make npm-packages).
const mcpTestDir = "../mcp"

// needNodePackages finds node and dir's installed packages, or reports the precondition
// missing (a failure under CI=true).
func needNodePackages(t *testing.T, dir string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		precondition.Missing(t, "node is not installed (make npm-packages installs it)")
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", ".package-lock.json")); err != nil {
		precondition.Missing(t, "%s has no installed packages: run make npm-packages", dir)
	}
	return node
}

// A real MCP client — the TypeScript MCP SDK's, as an agent host runs it — lists execctl
// mcp's tools and drives a session over stdio against the real processes (test/mcp): the
// environment ensured, a file written, a command reading it with its output streamed as
// progress, the result read, a compare-and-swap refused on a stale version, refusals as
// tool errors with the API's reason, a detached command followed. When the client closes,
// execctl mcp releases the run claim it held. The same server over streamable HTTP (a
// loopback port) serves a second client, and releases its claim on SIGTERM.
func TestMCPWithTheTypeScriptClient(t *testing.T) {
	node := needNodePackages(t, mcpTestDir)
	sys := startSystem(t, 1)
	caller := sys.cli(t, "caller")
	const binding = "mcp-1"

	cmd := exec.CommandContext(t.Context(), node, "--test", "--test-reporter=tap", "mcp.test.mjs")
	cmd.Dir = mcpTestDir
	cmd.Env = append(caller.env, "EXECCTL="+execctlBin, "EXECPLANE_BINDING="+binding, "EXECPLANE_PROFILE="+profiletest.Name)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test mcp.test.mjs:\n%s", out)
	if err != nil {
		t.Fatalf("the MCP client's session failed: %v", err)
	}
	if !strings.Contains(string(out), "# pass 2") || !strings.Contains(string(out), "# fail 0") || !strings.Contains(string(out), "# skipped 0") {
		t.Fatalf("node did not pass both sessions (stdio, streamable HTTP)")
	}

	// The run claims the servers held were released: when the stdio client closed, when the
	// HTTP server was told to stop.
	c := sys.sdk(t, "caller", 0)
	for _, b := range []string{binding, binding + "-http"} {
		env, err := c.Ensure(callCtx(t), client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingID: b, Profile: profiletest.Name})
		if err != nil {
			t.Fatal(err)
		}
		if run := env.Status().GetActiveRun(); run != nil {
			t.Fatalf("binding %s: the run claim is still held after its MCP server ended: %v", b, run)
		}
	}
}
