package integration_test

import (
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/gateway"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// pausingProxy forwards TCP connections to target; paused, it stops forwarding bytes in both
// directions without closing anything — a network path that silently stalls, as a partition
// does, so the client's watch neither ends nor errors.
type pausingProxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex
	cond   *sync.Cond
	paused bool
	conns  []net.Conn
}

func startPausingProxy(t *testing.T, target string) *pausingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &pausingProxy{ln: ln, target: target}
	p.cond = sync.NewCond(&p.mu)
	t.Cleanup(p.close)
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	return p
}

// pipe copies src to dst, holding every chunk while the proxy is paused.
func (p *pausingProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		p.mu.Lock()
		for p.paused {
			p.cond.Wait()
		}
		p.mu.Unlock()
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *pausingProxy) pause() { p.mu.Lock(); p.paused = true; p.mu.Unlock() }

func (p *pausingProxy) resume() {
	p.mu.Lock()
	p.paused = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *pausingProxy) close() {
	p.ln.Close()
	p.resume()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// proxiedKubeconfig writes a copy of kubeconfig whose server is reached through proxy.
func proxiedKubeconfig(t *testing.T, kubeconfig string, proxy func(target string) string) string {
	t.Helper()
	cfg, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, cluster := range cfg.Clusters {
		u, err := url.Parse(cluster.Server)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = proxy(u.Host)
		cluster.Server = u.String()
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// Fresh-view fencing: a gateway whose path to the API server stalls (a TCP proxy between them
// stops forwarding; nothing closes, so its watch neither ends nor errors) refuses grants
// UNAVAILABLE, retryable, within its freshness bound of the stall and reports not ready;
// the environment, revoked meanwhile through another gateway, is never served with the old
// grant by it — once the proxy resumes it rebuilds its view from a fresh list, refuses the
// old grant as revoked, and serves a new one.
func TestGatewayCutFromTheAPIServerRefusesWithinItsBound(t *testing.T) {
	sys := startSystem(t, 1)
	var proxy *pausingProxy
	kubeconfig := proxiedKubeconfig(t, sys.kubeconfig, func(target string) string {
		proxy = startPausingProxy(t, target)
		return proxy.ln.Addr().String()
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

	proxy.pause()
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

	proxy.resume()
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
