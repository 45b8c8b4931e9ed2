package kube

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestResourceOf(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces/ns/pods/p-x0":                                                  "pods",
		"/api/v1/namespaces/ns/pods/p-x0/exec":                                             "pods",
		"/api/v1/namespaces/ns/persistentvolumeclaims":                                     "persistentvolumeclaims",
		"/apis/execution.mecatl.dev/v1alpha1/namespaces/ns/executionenvironments/e/status": "executionenvironments",
		"/apis/coordination.k8s.io/v1/namespaces/ns/leases/execplane-controller":           "leases",
		"/api/v1/namespaces/ns/events":                                                     "events",
		"/api/v1/namespaces":                                                               "other",
		"/api/v1/nodes":                                                                    "other",
		"/apis/apps/v1/namespaces/ns/deployments":                                          "other",
		"/healthz": "other",
		"":         "other",
	} {
		if got := resourceOf(path); got != want {
			t.Errorf("resourceOf(%q) = %q, want %q", path, got, want)
		}
	}
}

// A burst that empties the work clients' rate limiter leaves the Lease client's untouched:
// a renewal never waits behind queued work (which, past the renew deadline, loses the Lease).
func TestLeaseClientHasItsOwnRateLimiter(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := NewClients(ClientOptions{Kubeconfig: kubeconfig, UserAgent: "test", QPS: 1, Burst: 3})
	if err != nil {
		t.Fatal(err)
	}
	work := c.Kube.CoreV1().RESTClient().GetRateLimiter()
	for range 3 {
		if !work.TryAccept() {
			t.Fatal("the work limiter refused within its burst")
		}
	}
	if work.TryAccept() {
		t.Fatal("the work limiter accepted beyond its burst")
	}
	if !c.Lease.CoordinationV1().RESTClient().GetRateLimiter().TryAccept() {
		t.Fatal("the Lease client waits behind the work clients' limiter")
	}
}

// A wait the client-side limiter refuses because it would outlast the caller's deadline is
// context.DeadlineExceeded (a retryable deadline at the gRPC edge), not an untyped error
// that would reach the caller as Internal; a token that is there is taken at once.
func TestLimiterRefusalIsADeadline(t *testing.T) {
	l := newLimiter(1, 1)
	if err := l.Wait(t.Context()); err != nil {
		t.Fatalf("the first token: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err := l.Wait(ctx) // the next token is a second away: past the deadline
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past the deadline answered %v", err)
	}
	if ctx.Err() != nil {
		t.Fatal("the refusal waited for the deadline instead of answering at once")
	}
}
