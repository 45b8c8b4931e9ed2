package layout_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The gateway's two rooms: internal/gateway keeps the public API, authorisation and the
// control client; internal/podexec is its reach into executor Pods. The handlers never exec
// themselves, and the Pod side authorises nothing, so a call reads straight down: edge →
// handler → grant check → podexec → protocol, never back up.
func TestGatewayRooms(t *testing.T) {
	g := graph(t)
	// The Pod side: no grants, no security material, no store, no handlers.
	for d := range deps(g, "internal/podexec") {
		for _, forbidden := range []string{"internal/gateway", "internal/security", "pkg/grant", "pkg/store", "internal/control", "internal/controller"} {
			if d == forbidden {
				t.Errorf("internal/podexec reaches %s: the Pod side authorises nothing", d)
			}
		}
	}
	// Only the Pod side opens exec streams.
	for _, p := range []string{"internal/gateway", "internal/startup"} {
		for _, imp := range imports(t, p) {
			if imp == "k8s.io/client-go/tools/remotecommand" {
				t.Errorf("%s imports %s: exec streams are internal/podexec's", p, imp)
			}
		}
	}
	if !slices.Contains(g["internal/gateway"], "internal/podexec") {
		t.Error("internal/gateway does not import internal/podexec: the rooms moved; update this test and docs/architecture.md")
	}
}

// The shared startup is the servers': nothing but the two server packages imports it, and it
// imports neither of them.
func TestStartupIsTheServers(t *testing.T) {
	g := graph(t)
	for p, ds := range g {
		if apart(p) || p == "internal/gateway" || p == "internal/controller" {
			continue
		}
		if slices.Contains(ds, "internal/startup") {
			t.Errorf("%s imports internal/startup: it is the servers' startup", p)
		}
	}
	for d := range deps(g, "internal/startup") {
		if d == "internal/gateway" || d == "internal/controller" || strings.HasPrefix(d, "internal/helper") {
			t.Errorf("internal/startup reaches %s", d)
		}
	}
}

// imports lists every import (the project's and others') of the project package p.
func imports(t *testing.T, p string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{join .Imports \"\\n\"}}", "./"+p)
	cmd.Dir = root(t)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list %s: %v", p, err)
	}
	return strings.Fields(string(out))
}
