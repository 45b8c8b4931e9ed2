package integration_test

import (
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/faultproxy"
	"github.com/execplane/execplane/internal/gateway"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Fresh-view fencing: a gateway whose path to the API server stalls (a TCP proxy between them
// stops forwarding; nothing closes, so its watch neither ends nor errors) refuses grants
// UNAVAILABLE, retryable, within its freshness bound of the stall and reports not ready;
// the environment, revoked meanwhile through another gateway, is never served with the old
// grant by it — once the proxy resumes it rebuilds its view from a fresh list, refuses the
// old grant as revoked, and serves a new one.
func TestGatewayCutFromTheAPIServerRefusesWithinItsBound(t *testing.T) {
	sys := startSystem(t, 1)
	var proxy *faultproxy.Proxy
	kubeconfig := clustertest.ProxiedKubeconfig(t, sys.kubeconfig, func(target string) string {
		var err error
		if proxy, err = faultproxy.To(target); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(proxy.Close)
		return proxy.Addr()
	})
	cut := sys.startGateway(t, "gateway-cut", clustertest.HelperPath, "--kubeconfig", kubeconfig)
	clustertest.Eventually(t, time.Minute, "the proxied gateway ready", cut.ready)

	admin := sys.dial(t, "admin", 0)
	s := ensureReady(t, sys.dial(t, "caller", 0), "alice", "conv-1")
	viaCut := *s
	viaCut.api = sys.dial(t, "caller", 1)
	// A command over the profile's bounds is authorised and then refused before any exec:
	// a cheap probe of the grant's verdict that touches no executor.
	verdict := func(g *executionv1.Grant) codes.Code {
		_, err := viaCut.api.StartCommand(callCtx(t), overBoundsProbe(g, s.envRef))
		return status.Code(err)
	}
	clustertest.Eventually(t, 10*time.Second, "the grant authorised through the proxied gateway", func() bool { return verdict(s.runG) == codes.InvalidArgument })
	old := s.runG

	proxy.Stall()
	paused := time.Now()
	env := s.latest(t)
	if _, err := admin.RevokeEnvironment(callCtx(t), &executionv1.RevokeEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{GrantGeneration: ptr(env.GetGrantGeneration())}, Reason: "freshness"}); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	// Until the bound runs out the cut gateway cannot know; from then on it must refuse.
	const slack = 750 * time.Millisecond // scheduling of a -race build on two loaded cores
	deadline := paused.Add(gateway.DefaultFreshnessBound + slack)
	var refusedAt time.Time
	for refusedAt.IsZero() {
		code := verdict(old)
		switch {
		case code == codes.Unavailable:
			refusedAt = time.Now()
		case code != codes.InvalidArgument:
			t.Fatalf("while cut off: %v", code)
		case time.Now().After(deadline):
			t.Fatalf("the cut gateway still honoured the revoked grant %s after the stall", time.Since(paused).Round(time.Millisecond))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("refused UNAVAILABLE %s after the stall (bound %s)", refusedAt.Sub(paused).Round(time.Millisecond), gateway.DefaultFreshnessBound)
	if cut.ready() {
		t.Fatal("the cut gateway reports ready")
	}
	// It stays refusing while cut off, also after further probes failed: no call succeeds on
	// a view it cannot prove current.
	clustertest.Eventually(t, 10*time.Second, "a further stale spell observed", func() bool {
		if code := verdict(old); code != codes.Unavailable {
			t.Fatalf("while still cut off: %v", code)
		}
		return time.Since(refusedAt) > gateway.DefaultFreshnessBound
	})

	proxy.Flow()
	clustertest.Eventually(t, 30*time.Second, "the revocation observed after the stall", func() bool {
		switch code := verdict(old); code {
		case codes.Aborted:
			return true
		case codes.Unavailable:
			return false
		default:
			t.Fatalf("after the stall, the old grant: %v", code)
			return false
		}
	})
	clustertest.Eventually(t, 30*time.Second, "the proxied gateway ready again", cut.ready)
	if relists := cut.metric(t, "execplane_gateway_view_relists_total"); relists < 1 {
		t.Fatalf("the view was not rebuilt after the stall: %v relists", relists)
	}
	s.latest(t)
	s.acquire(t, "run-after-the-stall")
	clustertest.Eventually(t, 10*time.Second, "a new grant served through the proxied gateway", func() bool { return verdict(s.runG) == codes.InvalidArgument })
}

// overBoundsProbe is a command whose timeout is past any profile's maximum: the gateway
// authorises it (the bound is the environment's profile's) and then refuses it,
// INVALID_ARGUMENT, before any exec — so it probes a grant's verdict without an executor.
func overBoundsProbe(g *executionv1.Grant, ref *executionv1.EnvironmentRef) *executionv1.StartCommandRequest {
	return &executionv1.StartCommandRequest{RunGrant: g, Environment: ref,
		Command: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"true"}}}, Timeout: durationpb.New(100 * time.Hour)}}
}
