package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/pkg/store"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

var (
	agentA     = store.Caller{Client: "spiffe://execplane.test/agent-a", Capabilities: store.Capabilities{MayAttestOwner: true}}
	agentB     = store.Caller{Client: "spiffe://execplane.test/agent-b", Capabilities: store.Capabilities{MayAttestOwner: true}}
	noAttest   = store.Caller{Client: "spiffe://execplane.test/agent-a", Capabilities: store.Capabilities{}}
	admin      = store.Caller{Client: "spiffe://execplane.test/ops", Capabilities: store.Capabilities{Administrator: true}}
	scopedOps  = store.Caller{Client: "spiffe://execplane.test/ops-b", Capabilities: store.Capabilities{Administrator: true, AdministratorFor: []string{"spiffe://execplane.test/agent-b"}}}
	notAdmin   = store.Caller{Client: "spiffe://execplane.test/agent-a", Capabilities: store.Capabilities{MayAttestOwner: true}}
	alice      = store.Owner{Issuer: "https://issuer.example", Subject: "alice"}
	bob        = store.Owner{Issuer: "https://issuer.example", Subject: "bob"}
	opSequence atomic.Int64
)

func opID() string { return "op-" + strconv.FormatInt(opSequence.Add(1), 10) }

type fixture struct {
	c        *devcluster.Cluster
	ns       string
	exec     versioned.Interface
	store    *store.Store
	ctx      context.Context
	lister   execlisters.ExecutionEnvironmentLister
	profiles *profile.Registry
}

type options struct {
	maxEnvironments int
	// reconcile runs the controller's reconciler, so that environments become Ready and
	// lifecycle operations complete.
	reconcile bool
	// profileExtra is appended to the test profile's YAML (fields indented by four spaces).
	profileExtra string
	// tombstoneRetention is the reconciler's; 0: its default.
	tombstoneRetention time.Duration
}

func newFixture(t *testing.T, o options) *fixture {
	t.Helper()
	if o.maxEnvironments == 0 {
		o.maxEnvironments = 100
	}
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, 3*time.Minute)
	if _, err := c.InstallCRDs(ctx, "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	reg, _ := profiletest.Registry(t, profiletest.YAML(o.maxEnvironments)+o.profileExtra)
	exec, err := versioned.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	factory := execinformers.NewSharedInformerFactoryWithOptions(exec, 0, execinformers.WithNamespace(ns))
	lister := factory.Execution().V1alpha1().ExecutionEnvironments().Lister()
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())
	s, err := store.New(store.Config{Execution: exec, Kube: c.Kube(), Environments: lister, Namespace: ns, Profiles: reg, Finalizer: controller.EnvironmentFinalizer})
	if err != nil {
		t.Fatal(err)
	}
	if o.reconcile {
		r, err := controller.NewReconciler(controller.ReconcilerConfig{Kube: c.Kube(), Execution: exec, Namespace: ns, Profiles: reg,
			TombstoneRetention: o.tombstoneRetention})
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Initialize(ctx); err != nil {
			t.Fatal(err)
		}
		go r.Run(ctx, 2)
	}
	return &fixture{c: c, ns: ns, exec: exec, store: s, ctx: ctx, lister: lister, profiles: reg}
}

// secondStore is another Store over the same namespace, with its own informer and locks:
// a second leader, for a moment.
func (f *fixture) secondStore(t *testing.T) *store.Store {
	t.Helper()
	factory := execinformers.NewSharedInformerFactoryWithOptions(f.exec, 0, execinformers.WithNamespace(f.ns))
	lister := factory.Execution().V1alpha1().ExecutionEnvironments().Lister()
	factory.Start(f.ctx.Done())
	factory.WaitForCacheSync(f.ctx.Done())
	s, err := store.New(store.Config{Execution: f.exec, Kube: f.c.Kube(), Environments: lister, Namespace: f.ns, Profiles: f.profiles, Finalizer: controller.EnvironmentFinalizer})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (f *fixture) ensure(t *testing.T, caller store.Caller, owner store.Owner, binding string) *store.Result {
	t.Helper()
	r, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: caller, OperationID: opID(), Owner: owner, BindingID: binding, Profile: "python"})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (f *fixture) get(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	env, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Get(f.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

func (f *fixture) waitReady(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, name+" Ready", func() bool {
		env = f.get(t, name)
		return meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady)
	})
	return env
}

func (f *fixture) count(t *testing.T) int {
	t.Helper()
	list, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// snapshot is the object's stored form: a refusal must leave it byte-for-byte unchanged.
func (f *fixture) snapshot(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := f.exec.ExecutionV1alpha1().RESTClient().Get().Namespace(f.ns).Resource("executionenvironments").Name(name).DoRaw(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return raw
}

func ref(env *v1alpha1.ExecutionEnvironment) ident.EnvironmentRef {
	return ident.EnvironmentRef{Name: env.Name, UID: string(env.UID)}
}

func ptrTo[T any](v T) *T { return &v }

// Ensure creates one environment per (client, owner, binding), replays exactly, and refuses
// an operation id reused with other arguments.
func TestEnsureCreatesReplaysAndRefusesReuse(t *testing.T) {
	f := newFixture(t, options{})
	in := store.EnsureInput{Caller: agentA, OperationID: "ensure-1", Owner: alice, BindingID: "conv-1", Profile: "python"}
	first, err := f.store.Ensure(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	env := first.Environment
	type created struct {
		Changed, Prefixed     bool
		Reference             v1alpha1.ReferenceState
		OwnerHash, ClientHash string
		Finalizers            int
	}
	got := created{Changed: first.Changed, Prefixed: strings.HasPrefix(env.Name, store.NamePrefix),
		OwnerHash: env.Spec.OwnerHash, ClientHash: env.Spec.ClientHash, Finalizers: len(env.Finalizers)}
	if first.Reference != nil {
		got.Reference = first.Reference.State
	}
	want := created{Changed: true, Prefixed: true, Reference: v1alpha1.ReferencePendingCreate,
		OwnerHash: store.OwnerHash(alice), ClientHash: ident.ClientHash(agentA.Client), Finalizers: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("first Ensure %s (-want +got):\n%s", env.Name, diff)
	}
	before := f.snapshot(t, env.Name)
	// The answer that matters to a caller: whether this call created it, and which object.
	type answer struct {
		Changed bool
		UID     types.UID
	}
	replay, err := f.store.Ensure(f.ctx, in)
	if err != nil {
		t.Fatalf("replay: %v", err)
	}
	if diff := cmp.Diff(answer{true, env.UID}, answer{replay.Changed, replay.Environment.UID}); diff != "" {
		t.Fatalf("replay (-want +got):\n%s", diff)
	}
	again, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: "ensure-2", Owner: alice, BindingID: "conv-1", Profile: "python"})
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if diff := cmp.Diff(answer{false, env.UID}, answer{again.Changed, again.Environment.UID}); diff != "" {
		t.Fatalf("second Ensure (-want +got):\n%s", diff)
	}
	if string(f.snapshot(t, env.Name)) != string(before) {
		t.Fatal("a replay or an Ensure of an existing binding wrote")
	}
	// The same operation id with other arguments (a pinned digest) is refused, and writes
	// nothing.
	reused := in
	reused.ExpectedProfileDigest = env.Spec.ProfileDigest
	if _, err := f.store.Ensure(f.ctx, reused); !errors.Is(err, apierror.ErrOperationIDReused) {
		t.Fatalf("operation id reused: %v", err)
	}
	wrongPin := in
	wrongPin.OperationID, wrongPin.ExpectedProfileDigest = "ensure-3", "sha256:"+strings.Repeat("0", 64)
	if _, err := f.store.Ensure(f.ctx, wrongPin); !errors.Is(err, apierror.ErrProfileMismatch) {
		t.Fatalf("pinned wrong digest: %v", err)
	}
	if string(f.snapshot(t, env.Name)) != string(before) {
		t.Fatal("a refusal wrote")
	}
	other, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentB, OperationID: "ensure-1", Owner: alice, BindingID: "conv-1", Profile: "python"})
	if err != nil || other.Environment.Name == env.Name {
		t.Fatalf("the fingerprint must include the client: %v %v", other, err)
	}
}
