package control_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/execplane/execplane/internal/control"
	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/security/highwater"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/pkg/store"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

type harness struct {
	material *devbundle.Result
	ledger   *atomic.Pointer[store.Store]
	addr     string
	ctx      context.Context
}

// start runs the control server over mTLS with the real security manager, the real store
// and reconciler, against the local cluster.
func start(t *testing.T) *harness {
	t.Helper()
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, 2*time.Minute)
	if _, err := c.InstallCRDs(ctx, "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	material, err := devbundle.Generate(filepath.Join(t.TempDir(), "security"), devbundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const mark = "execplane-security-high-water"
	if err := highwater.CreateInitial(ctx, c.Kube(), ns, mark); err != nil {
		t.Fatal(err)
	}
	mgr, err := security.NewManager(security.ManagerConfig{ManifestPath: material.Manifest, Namespace: ns, HighWaterConfigMap: mark, RaiseMark: true, Kube: c.Kube(), PollInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	go mgr.Run(ctx)
	deadline := time.Now().Add(20 * time.Second)
	for !mgr.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("security material not ready")
		}
		time.Sleep(50 * time.Millisecond)
	}
	reg, _ := profiletest.Registry(t, profiletest.YAML(10))
	exec, err := versioned.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	r, err := controller.NewReconciler(controller.ReconcilerConfig{Kube: c.Kube(), Execution: exec, Namespace: ns, Profiles: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := store.New(store.Config{Execution: exec, Kube: c.Kube(), Environments: r.Environments(), Namespace: ns, Profiles: reg, Finalizer: controller.EnvironmentFinalizer})
	if err != nil {
		t.Fatal(err)
	}
	var ledger atomic.Pointer[store.Store]
	ledger.Store(st)
	srv, err := control.NewServer(control.Config{Store: ledger.Load, Current: mgr.Current, Gateways: []security.ClientIdentity{security.ClientIdentity(material.Gateway.Identity)}})
	if err != nil {
		t.Fatal(err)
	}
	auth, err := security.NewPeerAuthenticator(mgr.Current)
	if err != nil {
		t.Fatal(err)
	}
	limiter, err := security.NewRPCLimiter(auth, 64, 64)
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer(grpc.Creds(security.NewServerCredentials(mgr.Current, nil, nil)), grpc.ChainUnaryInterceptor(limiter.UnaryInterceptor(func(err error) error { return apierror.Status(err, "") })))
	controlv1.RegisterControlServiceServer(g, srv)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = g.Serve(l) }()
	t.Cleanup(g.Stop)
	return &harness{material: material, ledger: &ledger, addr: l.Addr().String(), ctx: ctx}
}

func (h *harness) client(t *testing.T, as devbundle.Client) controlv1.ControlServiceClient {
	t.Helper()
	cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: as.CertFile, KeyFile: as.KeyFile, CAFile: h.material.CACert, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(h.addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlv1.NewControlServiceClient(conn)
}

func ensure(caller string, op string) *controlv1.EnsureRequest {
	return &controlv1.EnsureRequest{
		Caller: &controlv1.Caller{ClientUri: caller, RequestId: "req-" + op},
		Request: &executionv1.EnsureEnvironmentRequest{OperationId: op, Owner: &executionv1.Owner{Issuer: "https://issuer.example", Subject: "alice"},
			BindingId: "conv-1", Profile: "python"},
	}
}

func wantStatus(t *testing.T, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || apierror.Reason(err) != reason {
		t.Fatalf("got %v (reason %q), want %s/%s", err, apierror.Reason(err), code, reason)
	}
}

// A gateway forwards a client's Ensure: the environment comes back with the hashes grants
// bind; the same call from a client certificate (not a gateway), for a client not in the
// policy, or to a replica that does not lead is refused with the stated code.
func TestControlAPI(t *testing.T) {
	h := start(t)
	gw := h.client(t, h.material.Gateway)
	caller := h.material.Caller.Identity

	reply, err := gw.Ensure(h.ctx, ensure(caller, "op-1"))
	if err != nil {
		t.Fatal(err)
	}
	env := reply.GetEnvironment()
	if !reply.GetChanged() || env.GetRef().GetRevision() == "" || reply.GetClientHash() != ident.ClientHash(caller) ||
		reply.GetReference().GetState() != executionv1.ReferenceState_REFERENCE_STATE_PENDING_CREATE {
		t.Fatalf("reply %v", reply)
	}
	again, err := gw.Ensure(h.ctx, ensure(caller, "op-1"))
	if err != nil || again.GetEnvironment().GetRef().GetRevision() != env.GetRef().GetRevision() || !again.GetChanged() {
		t.Fatalf("replay: %v %v", again, err)
	}
	// The pending reference is an intent (the feed reads the leader's cache: poll).
	deadline := time.Now().Add(10 * time.Second)
	for {
		intents, err := gw.ListReferenceIntents(h.ctx, &controlv1.ListReferenceIntentsRequest{Caller: &controlv1.Caller{ClientUri: caller},
			Request: &executionv1.ListReferenceIntentsRequest{}})
		if err != nil {
			t.Fatal(err)
		}
		if len(intents.GetIntents()) == 1 && intents.GetIntents()[0].GetReference().GetBindingId() == "conv-1" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("intents %v", intents)
		}
		time.Sleep(50 * time.Millisecond)
	}

	// Not a gateway: the caller's own certificate.
	_, err = h.client(t, h.material.Caller).Ensure(h.ctx, ensure(caller, "op-2"))
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	// A client the policy does not know.
	_, err = gw.Ensure(h.ctx, ensure("spiffe://execplane.test/stranger", "op-3"))
	wantStatus(t, err, codes.Unauthenticated, "UNAUTHENTICATED")
	// A malformed caller.
	_, err = gw.Ensure(h.ctx, ensure("not a uri", "op-4"))
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	// A caller without MayAttestOwner (the development bundle's administrator).
	_, err = gw.Ensure(h.ctx, ensure(h.material.Administrator.Identity, "op-5"))
	wantStatus(t, err, codes.PermissionDenied, "PERMISSION_DENIED")
	// Not the leader: retryable UNAVAILABLE, nothing touched.
	saved := h.ledger.Swap(nil)
	_, err = gw.Ensure(h.ctx, ensure(caller, "op-6"))
	wantStatus(t, err, codes.Unavailable, "UNAVAILABLE")
	h.ledger.Store(saved)
	// Administrative call by the administrator, with a stale precondition.
	var epoch uint64 = 9
	_, err = gw.Retire(h.ctx, &controlv1.RetireRequest{Caller: &controlv1.Caller{ClientUri: h.material.Administrator.Identity},
		Request: &executionv1.RetireEnvironmentRequest{OperationId: "op-7", Environment: env.GetRef(), Preconditions: &executionv1.AdminPreconditions{Epoch: &epoch}}})
	wantStatus(t, err, codes.Aborted, "PRECONDITION_MISMATCH")
}

// Found by the fault suite (test/chaos): an administrative call with no preconditions
// message at all dereferenced it, and the panic took the leading controller down — any
// administrator could crash the leader, again after each failover. It is refused, naming
// what is required, and the server goes on.
func TestAdminCallWithoutPreconditionsIsRefusedNotACrash(t *testing.T) {
	h := start(t)
	gw := h.client(t, h.material.Gateway)
	reply, err := gw.Ensure(h.ctx, ensure(h.material.Caller.Identity, "op-1"))
	if err != nil {
		t.Fatal(err)
	}
	admin := &controlv1.Caller{ClientUri: h.material.Administrator.Identity}
	ref := reply.GetEnvironment().GetRef()
	_, err = gw.Revoke(h.ctx, &controlv1.RevokeRequest{Caller: admin,
		Request: &executionv1.RevokeEnvironmentRequest{OperationId: "op-2", Environment: ref}})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	if !strings.Contains(status.Convert(err).Message(), "preconditions.grant_generation") {
		t.Errorf("the refusal does not name the missing precondition: %v", err)
	}
	_, err = gw.Replace(h.ctx, &controlv1.ReplaceRequest{Caller: admin,
		Request: &executionv1.ReplaceExecutorRequest{OperationId: "op-3", Environment: ref}})
	wantStatus(t, err, codes.InvalidArgument, "INVALID_ARGUMENT")
	// Still serving.
	if _, err := gw.Ensure(h.ctx, ensure(h.material.Caller.Identity, "op-1")); err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
}
