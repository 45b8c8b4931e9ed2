package integration_test

import (
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// openSessions is the gateway's count of open helper sessions.
func openSessions(t *testing.T, g *process) float64 {
	t.Helper()
	return g.metric(t, "execplane_gateway_sessions_open ")
}

// awaitNoSession polls the gateway until it holds no session, and returns how long that
// took from since.
func awaitNoSession(t *testing.T, g *process, since time.Time, bound time.Duration) time.Duration {
	t.Helper()
	clustertest.Eventually(t, bound-time.Since(since), "no session open", func() bool { return openSessions(t, g) == 0 })
	return time.Since(since)
}

// A session is bound to the executor Pod and the epoch and grant generation it was opened
// under: a revocation, and then a replacement of the executor while a session to it is
// open, close it within a second of the change (the RPC's return), and the calls after go
// through a new session to the new Pod, with the workspace kept.
func TestSessionsFollowRevokeAndReplace(t *testing.T) {
	sys := startSystem(t, 1, "--sessions=true") // also under make test-per-exec
	g := sys.gateways[0]
	api, admin := sys.dial(t, "caller", 0), sys.dial(t, "admin", 0)
	ctx := callCtx(t)
	s := ensureReadyOn(t, api, "alice", "conv-sessions", profiletest.Name)
	if _, err := s.files(ctx, write("kept.txt", "kept\n")); err != nil {
		t.Fatal(err)
	}
	if n := openSessions(t, g); n != 1 {
		t.Fatalf("%v sessions open after a call", n)
	}

	env := s.latest(t)
	if _, err := admin.RevokeEnvironment(ctx, &executionv1.RevokeEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{GrantGeneration: ptr(env.GetGrantGeneration())}, Reason: "test"}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	t.Logf("revoke: the session closed %s after the RPC returned", awaitNoSession(t, g, time.Now(), time.Second))

	s.latest(t)
	s.acquire(t, "run-after-revoke")
	if r, err := s.files(ctx, read("kept.txt")); err != nil || string(r.GetRead().GetContent()) != "kept\n" {
		t.Fatalf("read after revoke: %v %v", r, err)
	}
	env = s.latest(t)
	oldPod := env.GetPodUid()
	rp, err := admin.ReplaceExecutor(ctx, &executionv1.ReplaceExecutorRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{Epoch: ptr(env.GetEpoch()), PodUid: ptr(oldPod)}, Reason: "test"})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	t.Logf("replace: the session to the old Pod closed %s after the RPC returned", awaitNoSession(t, g, time.Now(), time.Second))
	clustertest.Eventually(t, 60*time.Second, "the replacement done and ready", func() bool {
		env = s.latest(t)
		return env.GetReady() && env.GetEpoch() > rp.GetEnvironment().GetEpoch() && env.GetPodUid() != oldPod
	})
	opened := g.metric(t, "execplane_gateway_sessions_opened_total")
	s.acquire(t, "run-after-replace")
	if r, err := s.files(ctx, read("kept.txt")); err != nil || string(r.GetRead().GetContent()) != "kept\n" {
		t.Fatalf("read after replace: %v %v", r, err)
	}
	if now := g.metric(t, "execplane_gateway_sessions_opened_total"); now != opened+1 {
		t.Fatalf("the call after the replacement opened %v sessions, want one (to the new Pod)", now-opened)
	}
	if closed := g.metric(t, `execplane_gateway_sessions_closed_total{reason="view"}`); closed < 2 {
		t.Fatalf("%v sessions closed for a change of view, want 2", closed)
	}
}
