package allocation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned/fake"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/quota"
	"github.com/execplane/execplane/pkg/store"
)

// The Allocator starts an informer: it must end with the context Start was given.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testNS = "executors"

var (
	testClient  = ident.ClientHash("spiffe://example.org/client/ci")
	alice       = ownerHash("alice")
	bob         = ownerHash("bob")
	allocations = executionv1alpha1.SchemeGroupVersion.WithResource("executionallocations")
	// t0 is the fixed clock's time: whole seconds, as an API server stores times.
	t0 = time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
)

func ownerHash(owner string) string {
	sum := sha256.Sum256([]byte("owner/" + owner))
	return hex.EncodeToString(sum[:])
}

// apiServer is a fake clientset that keeps the API server's promises admission relies on
// for allocations: every write gets a new resourceVersion, an update carrying another one
// is a Conflict, a create of an existing one AlreadyExists. (client-go's fake tracker keeps
// none of them.) It counts the allocation writes that succeeded.
type apiServer struct {
	*fake.Clientset
	mu     sync.Mutex
	rv     int
	writes int
}

func newAPIServer() *apiServer {
	s := &apiServer{Clientset: fake.NewSimpleClientset(), rv: 100}
	tracker := s.Tracker()
	s.PrependReactor("create", "executionallocations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.CreateAction).GetObject().(*executionv1alpha1.ExecutionAllocation).DeepCopy()
		s.mu.Lock()
		defer s.mu.Unlock()
		if obj.ResourceVersion != "" {
			return true, nil, apierrors.NewBadRequest("resourceVersion should not be set on objects to be created")
		}
		s.rv++
		obj.ResourceVersion = strconv.Itoa(s.rv)
		if err := tracker.Create(allocations, obj, obj.Namespace); err != nil {
			return true, nil, err
		}
		s.writes++
		return true, obj, nil
	})
	s.PrependReactor("update", "executionallocations", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*executionv1alpha1.ExecutionAllocation).DeepCopy()
		s.mu.Lock()
		defer s.mu.Unlock()
		cur, err := tracker.Get(allocations, obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		if obj.ResourceVersion != cur.(*executionv1alpha1.ExecutionAllocation).ResourceVersion {
			return true, nil, apierrors.NewConflict(allocations.GroupResource(), obj.Name, errors.New("the object has been modified"))
		}
		s.rv++
		obj.ResourceVersion = strconv.Itoa(s.rv)
		s.writes++
		return true, obj, tracker.Update(allocations, obj, obj.Namespace)
	})
	return s
}

func (s *apiServer) writeCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.writes
}

// fixture is an Allocator over an apiServer, a hand-filled environments cache and a
// fixed clock.
type fixture struct {
	t    *testing.T
	api  *apiServer
	envs cache.Indexer
	a    *Allocator
	now  time.Time
}

type setup struct {
	quotas string
	use    Use
	envs   []*executionv1alpha1.ExecutionEnvironment
	// allocations exist before the Allocator starts.
	allocations []*executionv1alpha1.ExecutionAllocation
	maxCommand  time.Duration
}

// sourceOf is a quota.Source over a file holding yaml.
func sourceOf(t *testing.T, yaml string) *quota.Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := quota.NewSource(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newFixture(t *testing.T, in setup) *fixture {
	t.Helper()
	f := &fixture{t: t, api: newAPIServer(), now: t0,
		envs: cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})}
	for _, e := range in.envs {
		f.addEnv(e)
	}
	for _, al := range in.allocations {
		if _, err := f.api.ExecutionV1alpha1().ExecutionAllocations(testNS).Create(t.Context(), al, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	a, err := New(Config{
		Execution: f.api, Namespace: testNS, Environments: execlisters.NewExecutionEnvironmentLister(f.envs),
		Quotas: sourceOf(t, in.quotas), Use: in.use,
		Storage:    func(string) int64 { return 1 << 30 },
		MaxCommand: func(string) time.Duration { return in.maxCommand },
		Now:        func() time.Time { return f.now },
	})
	if err != nil {
		t.Fatal(err)
	}
	f.a = a
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	f.settle()
	return f
}

// addEnv puts an environment in the cache and on the API server (Sync confirms a gone
// one there).
func (f *fixture) addEnv(e *executionv1alpha1.ExecutionEnvironment) {
	f.t.Helper()
	if err := f.envs.Add(e); err != nil {
		f.t.Fatal(err)
	}
	if err := f.api.Tracker().Add(e); err != nil {
		f.t.Fatal(err)
	}
}

// settle waits until the Allocator's cache holds every allocation as the API server does,
// so that a test's next step does not depend on the informer's timing.
func (f *fixture) settle() {
	f.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		list, err := f.api.ExecutionV1alpha1().ExecutionAllocations(testNS).List(f.t.Context(), metav1.ListOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		synced := true
		for _, al := range list.Items {
			cached, err := f.a.lister.ExecutionAllocations(testNS).Get(al.Name)
			synced = synced && err == nil && cached.ResourceVersion == al.ResourceVersion
		}
		if synced {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatal("the allocations cache did not catch up")
		}
		time.Sleep(time.Millisecond)
	}
}

// freeze replaces the Allocator's cache by a copy of what it holds now: a cache that has
// not yet seen the writes that follow (an informer's lag, made to last).
func (f *fixture) freeze() {
	f.t.Helper()
	f.settle()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	all, err := f.a.lister.List(labels.Everything())
	if err != nil {
		f.t.Fatal(err)
	}
	for _, al := range all {
		if err := idx.Add(al.DeepCopy()); err != nil {
			f.t.Fatal(err)
		}
	}
	f.a.lister = execlisters.NewExecutionAllocationLister(idx)
}

func clientScope() scope {
	return scope{kind: executionv1alpha1.AllocationClient, clientHash: testClient}
}

func ownerScope(owner string) scope {
	return scope{kind: executionv1alpha1.AllocationOwner, clientHash: testClient, ownerHash: owner}
}

// allocation returns the scope's allocation as the API server has it (nil: none).
func (f *fixture) allocation(s scope) *executionv1alpha1.ExecutionAllocation {
	f.t.Helper()
	al, err := f.api.ExecutionV1alpha1().ExecutionAllocations(testNS).Get(f.t.Context(), s.name(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return al
}

func (f *fixture) entries(s scope) []executionv1alpha1.AllocatedEnvironment {
	f.t.Helper()
	if al := f.allocation(s); al != nil {
		return al.Status.Environments
	}
	return nil
}

// names lists the environments an allocation holds, marking the ready ones with a "+".
func (f *fixture) names(s scope) []string {
	f.t.Helper()
	var out []string
	for _, e := range f.entries(s) {
		n := e.Name
		if e.Ready {
			n += "+"
		}
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func allocationOf(s scope, envs ...executionv1alpha1.AllocatedEnvironment) *executionv1alpha1.ExecutionAllocation {
	return &executionv1alpha1.ExecutionAllocation{
		ObjectMeta: metav1.ObjectMeta{Name: s.name(), Namespace: testNS},
		Spec:       executionv1alpha1.ExecutionAllocationSpec{Scope: s.kind, ClientHash: s.clientHash, OwnerHash: s.ownerHash},
		Status:     executionv1alpha1.ExecutionAllocationStatus{Environments: envs},
	}
}

func entry(name string, ready bool, admitted time.Time) executionv1alpha1.AllocatedEnvironment {
	return executionv1alpha1.AllocatedEnvironment{Name: name, Ready: ready, StorageBytes: 1 << 30, AdmittedAt: metav1.NewTime(admitted)}
}

func admitted(owner, name string) store.Admitted {
	return store.Admitted{ClientHash: testClient, OwnerHash: owner, Name: name, StorageBytes: 1 << 30}
}

type envState int

const (
	running envState = iota
	suspended
	deleted
)

func testEnv(name, owner string, state envState) *executionv1alpha1.ExecutionEnvironment {
	env := &executionv1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS, UID: types.UID("uid-" + name)},
		Spec:       executionv1alpha1.ExecutionEnvironmentSpec{ClientHash: testClient, OwnerHash: owner, Profile: "p"},
	}
	op := func(k executionv1alpha1.LifecycleKind) *executionv1alpha1.LifecycleOperation {
		return &executionv1alpha1.LifecycleOperation{Kind: k, Phase: executionv1alpha1.PhaseCompleted, OperationID: "op"}
	}
	switch state {
	case suspended:
		env.Status.LifecycleOperation = op(executionv1alpha1.LifecycleSuspend)
	case deleted:
		env.Status.LifecycleOperation = op(executionv1alpha1.LifecycleDelete)
	}
	return env
}

// refusal is what a caller reads of a quota refusal: its ErrorInfo metadata.
func refusal(t *testing.T, err error) map[string]string {
	t.Helper()
	if !errors.Is(err, apierror.ErrQuotaExceeded) {
		t.Fatalf("err = %v, want ErrQuotaExceeded", err)
	}
	md := apierror.Info(apierror.Status(err, "")).GetMetadata()
	delete(md, "retryable")
	return md
}

func TestAdmitEnvironmentOwnerCount(t *testing.T) {
	f := newFixture(t, setup{quotas: "defaults: {owner: {environments: 2}}"})
	ctx := t.Context()
	for _, name := range []string{"xenv-a", "xenv-b"} {
		if err := f.a.AdmitEnvironment(ctx, admitted(alice, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	f.settle()
	writes := f.api.writeCount()

	err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-c"))
	want := map[string]string{"quota": "environments", "scope": "owner", "limit": "2", "used": "2"}
	if diff := cmp.Diff(want, refusal(t, err)); diff != "" {
		t.Errorf("refusal metadata (-want +got):\n%s", diff)
	}
	if apierror.Retryable(apierror.Status(err, "")) {
		t.Error("a quota refusal is retryable")
	}
	if got := f.api.writeCount(); got != writes {
		t.Errorf("a refusal wrote %d times", got-writes)
	}

	// Admitted already: admitted again, unchanged, without a write.
	if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-a")); err != nil {
		t.Errorf("admitted again: %v", err)
	}
	if got := f.api.writeCount(); got != writes {
		t.Errorf("an admission again wrote %d times", got-writes)
	}
	if diff := cmp.Diff([]string{"xenv-a+", "xenv-b+"}, f.names(ownerScope(alice))); diff != "" {
		t.Errorf("alice's allocation (-want +got):\n%s", diff)
	}

	// Another owner of the client has its own 2.
	for _, name := range []string{"xenv-d", "xenv-e"} {
		if err := f.a.AdmitEnvironment(ctx, admitted(bob, name)); err != nil {
			t.Fatalf("bob's %s: %v", name, err)
		}
	}
	if diff := cmp.Diff(want, refusal(t, f.a.AdmitEnvironment(ctx, admitted(bob, "xenv-f")))); diff != "" {
		t.Errorf("bob's third (-want +got):\n%s", diff)
	}
	// The client scope has no limits: it costs no write.
	if al := f.allocation(clientScope()); al != nil {
		t.Errorf("an unlimited client scope has an allocation: %+v", al.Status)
	}
}

func TestAdmitEnvironmentUnlisted(t *testing.T) {
	// Limits for another client only: this one is not limited and nothing is written.
	f := newFixture(t, setup{quotas: "clients: {'spiffe://example.org/client/other': {owner: {environments: 0}}}"})
	for _, name := range []string{"xenv-a", "xenv-b", "xenv-c"} {
		if err := f.a.AdmitEnvironment(t.Context(), admitted(alice, name)); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	if n := f.api.writeCount(); n != 0 {
		t.Errorf("%d writes for a client without limits", n)
	}
}

// A refusal by the owner scope gives back what the client scope took for a new environment.
func TestAdmitEnvironmentGivesBack(t *testing.T) {
	f := newFixture(t, setup{quotas: "defaults: {client: {environments: 10}, owner: {environments: 1}}"})
	ctx := t.Context()
	if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-a")); err != nil {
		t.Fatal(err)
	}
	f.settle()
	before := f.entries(clientScope())

	err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-b"))
	want := map[string]string{"quota": "environments", "scope": "owner", "limit": "1", "used": "1"}
	if diff := cmp.Diff(want, refusal(t, err)); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, f.entries(clientScope())); diff != "" {
		t.Errorf("the client allocation after the owner's refusal (-before +after):\n%s", diff)
	}
}

// A refusal by the owner scope gives back what the client scope took for a resume: the
// client's entry is not ready again, as it was.
func TestAdmitReadyGivesBack(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, setup{
		quotas: "defaults: {client: {readyEnvironments: 10}, owner: {readyEnvironments: 1}}",
		allocations: []*executionv1alpha1.ExecutionAllocation{
			allocationOf(clientScope(), entry("xenv-a", true, old), entry("xenv-b", false, old)),
			allocationOf(ownerScope(alice), entry("xenv-a", true, old), entry("xenv-b", false, old)),
		},
	})
	before := f.entries(clientScope())

	err := f.a.AdmitReady(t.Context(), admitted(alice, "xenv-b"))
	want := map[string]string{"quota": "readyEnvironments", "scope": "owner", "limit": "1", "used": "1"}
	if diff := cmp.Diff(want, refusal(t, err)); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(before, f.entries(clientScope())); diff != "" {
		t.Errorf("the client allocation after the owner's refusal (-before +after):\n%s", diff)
	}
}

// What a call takes, and gives back, is decided on the API server's allocation, not on a
// cache that has not seen the call's own writes yet: a give-back that reads the cache
// finds nothing to give back and writes nothing.
func TestGiveBackDecidedOnTheAPIServer(t *testing.T) {
	ctx := t.Context()
	t.Run("owner refuses a new environment", func(t *testing.T) {
		f := newFixture(t, setup{quotas: "defaults: {client: {environments: 10}, owner: {environments: 1}}"})
		if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-a")); err != nil {
			t.Fatal(err)
		}
		f.freeze()
		refusal(t, f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-b")))
		if diff := cmp.Diff([]string{"xenv-a+"}, f.names(clientScope())); diff != "" {
			t.Errorf("the client allocation after the owner's refusal (-want +got):\n%s", diff)
		}
	})
	t.Run("Forget after admission", func(t *testing.T) {
		f := newFixture(t, setup{quotas: "defaults: {owner: {environments: 2}}"})
		if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-a")); err != nil {
			t.Fatal(err)
		}
		f.freeze()
		if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-b")); err != nil {
			t.Fatal(err)
		}
		// The store's creation failed after the admission: it gives the slot back.
		f.a.Forget(ctx, admitted(alice, "xenv-b"))
		if diff := cmp.Diff([]string{"xenv-a+"}, f.names(ownerScope(alice))); diff != "" {
			t.Errorf("alice's allocation after Forget (-want +got):\n%s", diff)
		}
	})
	t.Run("owner refuses a command", func(t *testing.T) {
		env := testEnv("xenv-a", alice, running)
		f := newFixture(t, setup{quotas: "defaults: {client: {detachedCommands: 10}, owner: {detachedCommands: 1}}",
			envs: []*executionv1alpha1.ExecutionEnvironment{env}, maxCommand: 24 * time.Hour})
		if _, err := f.a.Command(ctx, env.Name, string(env.UID), "cmd-1", false); err != nil {
			t.Fatal(err)
		}
		f.freeze()
		refusal(t, second(f.a.Command(ctx, env.Name, string(env.UID), "cmd-2", false)))
		var ids []string
		for _, c := range f.allocation(clientScope()).Status.Commands {
			ids = append(ids, c.CommandID)
		}
		if diff := cmp.Diff([]string{"cmd-1"}, ids); diff != "" {
			t.Errorf("the client's commands after the owner's refusal (-want +got):\n%s", diff)
		}
	})
	t.Run("a refusal keeps the slots it did not take", func(t *testing.T) {
		// cmd-1 counted by the client's quota before the owner's was set; cmd-2 fills the
		// owner's: the owner refuses the repeat of cmd-1's start, and the client's slot of
		// cmd-1 — the first start's — stays.
		env := testEnv("xenv-a", alice, running)
		until := metav1.NewTime(t0.Add(time.Hour))
		client, owner := allocationOf(clientScope(), entry(env.Name, true, t0)), allocationOf(ownerScope(alice), entry(env.Name, true, t0))
		client.Status.Commands = []executionv1alpha1.AllocatedCommand{{Environment: env.Name, CommandID: "cmd-1", Until: until}}
		owner.Status.Commands = []executionv1alpha1.AllocatedCommand{{Environment: env.Name, CommandID: "cmd-2", Until: until}}
		f := newFixture(t, setup{quotas: "defaults: {client: {detachedCommands: 10}, owner: {detachedCommands: 1}}",
			envs: []*executionv1alpha1.ExecutionEnvironment{env}, allocations: []*executionv1alpha1.ExecutionAllocation{client, owner},
			maxCommand: 24 * time.Hour})
		f.freeze()
		refusal(t, second(f.a.Command(ctx, env.Name, string(env.UID), "cmd-1", false)))
		var ids []string
		for _, c := range f.allocation(clientScope()).Status.Commands {
			ids = append(ids, c.CommandID)
		}
		if diff := cmp.Diff([]string{"cmd-1"}, ids); diff != "" {
			t.Errorf("the client's commands after the owner's refusal (-want +got):\n%s", diff)
		}
	})
	t.Run("not taken when a scope listed it already", func(t *testing.T) {
		// cmd-1 counted by the client's quota before the owner's was set: its repeat is
		// listed in the owner's scope too, but its slots are not this admission's to give
		// back (a give-back drops every scope's).
		env := testEnv("xenv-a", alice, running)
		client := allocationOf(clientScope(), entry(env.Name, true, t0))
		client.Status.Commands = []executionv1alpha1.AllocatedCommand{{Environment: env.Name, CommandID: "cmd-1", Until: metav1.NewTime(t0.Add(time.Hour))}}
		f := newFixture(t, setup{quotas: "defaults: {client: {detachedCommands: 10}, owner: {detachedCommands: 5}}",
			envs: []*executionv1alpha1.ExecutionEnvironment{env}, allocations: []*executionv1alpha1.ExecutionAllocation{client},
			maxCommand: 24 * time.Hour})
		if taken, err := f.a.Command(ctx, env.Name, string(env.UID), "cmd-1", false); err != nil || taken {
			t.Errorf("the repeat: taken %v, %v; want not taken", taken, err)
		}
		if taken, err := f.a.Command(ctx, env.Name, string(env.UID), "cmd-2", false); err != nil || !taken {
			t.Errorf("a new command: taken %v, %v; want taken", taken, err)
		}
		if al := f.allocation(ownerScope(alice)); al == nil || len(al.Status.Commands) != 2 {
			t.Errorf("the owner's commands: %+v, want cmd-1 and cmd-2", al)
		}
	})
	t.Run("release after a command's admission", func(t *testing.T) {
		env := testEnv("xenv-a", alice, running)
		f := newFixture(t, setup{quotas: "defaults: {owner: {detachedCommands: 1}}", envs: []*executionv1alpha1.ExecutionEnvironment{env}, maxCommand: 24 * time.Hour})
		f.freeze()
		if _, err := f.a.Command(ctx, env.Name, string(env.UID), "cmd-1", false); err != nil {
			t.Fatal(err)
		}
		// The start failed: the gateway gives the slot back.
		if _, err := f.a.Command(ctx, env.Name, string(env.UID), "cmd-1", true); err != nil {
			t.Fatal(err)
		}
		if al := f.allocation(ownerScope(alice)); al != nil && len(al.Status.Commands) != 0 {
			t.Errorf("the released command still holds a slot: %+v", al.Status.Commands)
		}
	})
}

func TestAdmitReadyCount(t *testing.T) {
	old := t0.Add(-time.Hour)
	f := newFixture(t, setup{
		quotas: "defaults: {owner: {readyEnvironments: 2}}",
		allocations: []*executionv1alpha1.ExecutionAllocation{
			allocationOf(ownerScope(alice), entry("xenv-a", true, old), entry("xenv-b", false, old), entry("xenv-c", false, old)),
		},
	})
	ctx := t.Context()
	if err := f.a.AdmitReady(ctx, admitted(alice, "xenv-b")); err != nil {
		t.Fatal(err)
	}
	f.settle()
	err := f.a.AdmitReady(ctx, admitted(alice, "xenv-c"))
	want := map[string]string{"quota": "readyEnvironments", "scope": "owner", "limit": "2", "used": "2"}
	if diff := cmp.Diff(want, refusal(t, err)); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
	// A new environment is ready too: it needs a ready slot.
	if diff := cmp.Diff(want, refusal(t, f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-d")))); diff != "" {
		t.Errorf("a new environment (-want +got):\n%s", diff)
	}
	// A ready one again is no change.
	if err := f.a.AdmitReady(ctx, admitted(alice, "xenv-a")); err != nil {
		t.Errorf("a ready one again: %v", err)
	}
	if diff := cmp.Diff([]string{"xenv-a+", "xenv-b+", "xenv-c"}, f.names(ownerScope(alice))); diff != "" {
		t.Errorf("alice's allocation (-want +got):\n%s", diff)
	}
	got := f.entries(ownerScope(alice))
	if i := slices.IndexFunc(got, func(e executionv1alpha1.AllocatedEnvironment) bool { return e.Name == "xenv-b" }); !got[i].AdmittedAt.Time.Equal(t0) {
		t.Errorf("the resumed entry's AdmittedAt is %v, want now (%v): its grace starts", got[i].AdmittedAt, t0)
	}
}

func TestAdmitStorage(t *testing.T) {
	f := newFixture(t, setup{quotas: "defaults: {client: {storage: 10Gi}}"})
	ctx := t.Context()
	gi := int64(1 << 30)
	admit := func(name string, size int64) error {
		return f.a.AdmitEnvironment(ctx, store.Admitted{ClientHash: testClient, OwnerHash: alice, Name: name, StorageBytes: size})
	}
	if err := admit("xenv-a", 6*gi); err != nil {
		t.Fatal(err)
	}
	f.settle()
	want := map[string]string{"quota": "storage", "scope": "client", "limit": strconv.FormatInt(10*gi, 10), "used": strconv.FormatInt(6*gi, 10)}
	if diff := cmp.Diff(want, refusal(t, admit("xenv-b", 5*gi))); diff != "" {
		t.Errorf("refusal (-want +got):\n%s", diff)
	}
	// Exactly the limit fits.
	if err := admit("xenv-c", 4*gi); err != nil {
		t.Fatal(err)
	}
	f.settle()
	want["used"] = strconv.FormatInt(10*gi, 10)
	if diff := cmp.Diff(want, refusal(t, admit("xenv-d", 1))); diff != "" {
		t.Errorf("refusal at the limit (-want +got):\n%s", diff)
	}
	// An environment admitted already is not new: its storage is counted already.
	if err := admit("xenv-a", 6*gi); err != nil {
		t.Errorf("admitted again: %v", err)
	}
}

func TestForget(t *testing.T) {
	f := newFixture(t, setup{quotas: "defaults: {client: {environments: 5}, owner: {environments: 1}}"})
	ctx := t.Context()
	if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-a")); err != nil {
		t.Fatal(err)
	}
	f.settle()
	f.a.Forget(ctx, admitted(alice, "xenv-a"))
	for _, s := range []scope{clientScope(), ownerScope(alice)} {
		if got := f.names(s); len(got) != 0 {
			t.Errorf("the %s allocation after Forget: %v", s.label(), got)
		}
	}
	f.settle()
	// The slot is free again; forgetting what is not listed writes nothing.
	if err := f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-b")); err != nil {
		t.Fatalf("after Forget: %v", err)
	}
	f.settle()
	writes := f.api.writeCount()
	f.a.Forget(ctx, admitted(alice, "xenv-zzz"))
	if got := f.api.writeCount(); got != writes {
		t.Errorf("forgetting an unlisted environment wrote %d times", got-writes)
	}
}

func TestCommand(t *testing.T) {
	env := testEnv("xenv-a", alice, running)
	f := newFixture(t, setup{
		quotas:     "defaults: {owner: {detachedCommands: 1}}",
		envs:       []*executionv1alpha1.ExecutionEnvironment{env},
		maxCommand: time.Hour,
	})
	ctx := t.Context()
	uid := string(env.UID)
	if taken, err := f.a.Command(ctx, env.Name, uid, "cmd-1", false); err != nil || !taken {
		t.Fatalf("the first command: taken %v, %v", taken, err)
	}
	f.settle()
	al := f.allocation(ownerScope(alice))
	wantCommands := []executionv1alpha1.AllocatedCommand{{Environment: env.Name, CommandID: "cmd-1", Until: metav1.NewTime(t0.Add(time.Hour))}}
	if diff := cmp.Diff(wantCommands, al.Status.Commands); diff != "" {
		t.Errorf("commands (-want +got):\n%s", diff)
	}
	want := map[string]string{"quota": "detachedCommands", "scope": "owner", "limit": "1", "used": "1"}
	if diff := cmp.Diff(want, refusal(t, second(f.a.Command(ctx, env.Name, uid, "cmd-2", false)))); diff != "" {
		t.Errorf("the second command (-want +got):\n%s", diff)
	}
	// The same command again is admitted, unchanged: its slot is the first admission's.
	if taken, err := f.a.Command(ctx, env.Name, uid, "cmd-1", false); err != nil || taken {
		t.Errorf("the same command again: taken %v, %v", taken, err)
	}
	if _, err := f.a.Command(ctx, env.Name, uid, "cmd-1", true); err != nil {
		t.Fatalf("release: %v", err)
	}
	f.settle()
	if _, err := f.a.Command(ctx, env.Name, uid, "cmd-2", false); err != nil {
		t.Errorf("after the release: %v", err)
	}
	f.settle()
	// A slot past its expiry is free whether or not the sync dropped it.
	f.now = t0.Add(2 * time.Hour)
	if _, err := f.a.Command(ctx, env.Name, uid, "cmd-3", false); err != nil {
		t.Errorf("past the first slot's expiry: %v", err)
	}

	for _, c := range []struct{ name, env, uid string }{
		{"unknown environment", "xenv-nope", "uid-xenv-nope"},
		{"another incarnation", env.Name, "uid-other"},
	} {
		for _, release := range []bool{false, true} {
			if _, err := f.a.Command(ctx, c.env, c.uid, "cmd-9", release); !errors.Is(err, apierror.ErrNotFound) {
				t.Errorf("%s (release %v): err = %v, want ErrNotFound", c.name, release, err)
			}
		}
	}
}

func TestCommandSlotAtLeastGrace(t *testing.T) {
	env := testEnv("xenv-a", alice, running)
	f := newFixture(t, setup{quotas: "defaults: {client: {detachedCommands: 3}}", envs: []*executionv1alpha1.ExecutionEnvironment{env}})
	if _, err := f.a.Command(t.Context(), env.Name, string(env.UID), "cmd-1", false); err != nil {
		t.Fatal(err)
	}
	got := f.allocation(clientScope()).Status.Commands
	want := []executionv1alpha1.AllocatedCommand{{Environment: env.Name, CommandID: "cmd-1", Until: metav1.NewTime(t0.Add(grace))}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("a profile without a longest command (-want +got):\n%s", diff)
	}
}

func TestReconcile(t *testing.T) {
	now := t0
	fresh := now.Add(-time.Minute)
	old := now.Add(-grace - time.Second)
	until := metav1.NewTime(now.Add(time.Hour))
	cmd := func(env, id string, until metav1.Time) executionv1alpha1.AllocatedCommand {
		return executionv1alpha1.AllocatedCommand{Environment: env, CommandID: id, Until: until}
	}
	want := func(es ...executionv1alpha1.AllocatedEnvironment) map[string]executionv1alpha1.AllocatedEnvironment {
		m := map[string]executionv1alpha1.AllocatedEnvironment{}
		for _, e := range es {
			e.AdmittedAt = metav1.Time{}
			m[e.Name] = e
		}
		return m
	}
	for _, c := range []struct {
		name string
		st   executionv1alpha1.ExecutionAllocationStatus
		want map[string]executionv1alpha1.AllocatedEnvironment
		// gone answers the API server's read; asked lists who is asked.
		gone    bool
		out     executionv1alpha1.ExecutionAllocationStatus
		changed bool
		asked   []string
	}{
		{
			name:    "nothing to change",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old), entry("b", false, old)}, Commands: []executionv1alpha1.AllocatedCommand{cmd("a", "1", until)}},
			want:    want(entry("a", true, old), entry("b", false, old)),
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old), entry("b", false, old)}, Commands: []executionv1alpha1.AllocatedCommand{cmd("a", "1", until)}},
			changed: false,
		},
		{
			name:    "a fresh admission without its environment is kept",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, fresh)}},
			want:    want(),
			gone:    true,
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, fresh)}},
			changed: false,
		},
		{
			name:    "an old one whose environment is gone is dropped",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old), entry("b", true, old)}},
			want:    want(entry("b", true, old)),
			gone:    true,
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("b", true, old)}},
			changed: true,
			asked:   []string{"a"},
		},
		{
			name:    "an old one the API server still has is kept",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old)}},
			want:    want(),
			gone:    false,
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old)}},
			changed: false,
			asked:   []string{"a"},
		},
		{
			name:    "a suspended one is not ready after the grace",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old)}},
			want:    want(entry("a", false, old)),
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", false, old)}},
			changed: true,
		},
		{
			name:    "a suspended one stays ready within the grace (a resume not written yet)",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, fresh)}},
			want:    want(entry("a", false, old)),
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, fresh)}},
			changed: false,
		},
		{
			name:    "a resumed one is ready again",
			st:      executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", false, old)}},
			want:    want(entry("a", true, old)),
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old)}},
			changed: true,
		},
		{
			name: "an environment missing from the allocation is added, admitted now",
			st:   executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("b", true, old)}},
			want: want(entry("c", false, old), entry("a", true, old), entry("b", true, old)),
			out: executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{
				entry("a", true, now), entry("b", true, old), entry("c", false, now)}},
			changed: true,
		},
		{
			name: "commands past their expiry or of environments not ready or absent are dropped",
			st: executionv1alpha1.ExecutionAllocationStatus{
				Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old), entry("s", false, old)},
				Commands: []executionv1alpha1.AllocatedCommand{
					cmd("a", "live", until), cmd("a", "at-expiry", metav1.NewTime(now)), cmd("a", "expired", metav1.NewTime(now.Add(-time.Second))),
					cmd("s", "of-suspended", until), cmd("x", "of-absent", until),
				},
			},
			want: want(entry("a", true, old), entry("s", false, old)),
			out: executionv1alpha1.ExecutionAllocationStatus{
				Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, old), entry("s", false, old)},
				Commands:     []executionv1alpha1.AllocatedCommand{cmd("a", "live", until), cmd("a", "at-expiry", metav1.NewTime(now))},
			},
			changed: true,
		},
		{
			name: "a command of an environment not listed is dropped, beside a fresh admission too",
			st: executionv1alpha1.ExecutionAllocationStatus{
				Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, fresh)},
				Commands:     []executionv1alpha1.AllocatedCommand{cmd("a", "1", until)},
			},
			want: want(),
			// A command is admitted only for an environment the leader's cache holds: one
			// the sync does not list has ended with its environment.
			out:     executionv1alpha1.ExecutionAllocationStatus{Environments: []executionv1alpha1.AllocatedEnvironment{entry("a", true, fresh)}},
			changed: true,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			var asked []string
			st := c.st.DeepCopy()
			changed := reconcile(st, c.want, now, func(name string) bool { asked = append(asked, name); return c.gone })
			if diff := cmp.Diff(c.out, *st, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("status (-want +got):\n%s", diff)
			}
			if changed != c.changed {
				t.Errorf("changed = %v, want %v", changed, c.changed)
			}
			if diff := cmp.Diff(c.asked, asked); diff != "" {
				t.Errorf("gone asked about (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSyncLists(t *testing.T) {
	old := t0.Add(-time.Hour)
	envs := []*executionv1alpha1.ExecutionEnvironment{
		testEnv("xenv-a", alice, running),
		testEnv("xenv-b", alice, suspended),
		testEnv("xenv-d", alice, deleted),
	}
	f := newFixture(t, setup{
		quotas: "defaults: {owner: {environments: 10}}",
		envs:   envs,
		allocations: []*executionv1alpha1.ExecutionAllocation{
			// xenv-b was ready when admitted; xenv-gone's environment is gone; xenv-d's
			// is deleted.
			allocationOf(ownerScope(alice), entry("xenv-b", true, old), entry("xenv-d", true, old), entry("xenv-gone", true, old)),
		},
	})
	if got := f.a.Sync(t.Context()); len(got) != 0 {
		t.Errorf("Sync without time quotas suspends %v", got)
	}
	want := []executionv1alpha1.AllocatedEnvironment{
		{Name: "xenv-a", Ready: true, StorageBytes: 1 << 30, AdmittedAt: metav1.NewTime(t0)},
		entry("xenv-b", false, old),
	}
	if diff := cmp.Diff(want, f.entries(ownerScope(alice))); diff != "" {
		t.Errorf("alice's allocation after Sync (-want +got):\n%s", diff)
	}
	// A second pass changes nothing and writes nothing.
	f.settle()
	writes := f.api.writeCount()
	f.a.Sync(t.Context())
	if got := f.api.writeCount(); got != writes {
		t.Errorf("a Sync with nothing to change wrote %d times", got-writes)
	}
}

func TestSyncTimeQuota(t *testing.T) {
	// Use reports alice over any limit (two core-hours, three GiB-hours), bob under.
	over := func(_, owner string, _ time.Duration) (int64, int64) {
		if owner == alice {
			return 2 * 3600 * 1e9, 3 * 3600 << 20
		}
		return 0, 0
	}
	envs := []*executionv1alpha1.ExecutionEnvironment{
		testEnv("xenv-a1", alice, running),
		testEnv("xenv-a2", alice, running),
		testEnv("xenv-a3", alice, suspended),
		testEnv("xenv-a4", alice, deleted),
		testEnv("xenv-b1", bob, running),
	}
	for _, c := range []struct {
		name   string
		quotas string
		want   map[string][]string
	}{
		{"suspend", "defaults: {owner: {cpuCoreHours: {limit: 1, action: suspend}}}",
			map[string][]string{ownerScope(alice).name(): {"xenv-a1", "xenv-a2"}}},
		{"suspend, memory", "defaults: {owner: {memoryGiBHours: {limit: 3, window: 48h, action: suspend}}}",
			map[string][]string{ownerScope(alice).name(): {"xenv-a1", "xenv-a2"}}},
		{"suspend with counts", "defaults: {owner: {environments: 10, cpuCoreHours: {limit: 1, action: suspend}}}",
			map[string][]string{ownerScope(alice).name(): {"xenv-a1", "xenv-a2"}}},
		{"refuse", "defaults: {owner: {cpuCoreHours: {limit: 1, action: refuse}}}", map[string][]string{}},
		{"report", "defaults: {owner: {cpuCoreHours: {limit: 1, action: report}}}", map[string][]string{}},
		{"under the limit", "defaults: {owner: {cpuCoreHours: {limit: 3, action: suspend}}}", map[string][]string{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, setup{quotas: c.quotas, use: over, envs: envs})
			got := f.a.Sync(t.Context())
			for _, names := range got {
				slices.Sort(names)
			}
			if got == nil {
				got = map[string][]string{}
			}
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("to suspend (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAdmitTimeQuota(t *testing.T) {
	over := func(_, owner string, window time.Duration) (int64, int64) {
		if owner == alice && window == 24*time.Hour {
			return 2 * 3600 * 1e9, 0 // two core-hours
		}
		return 0, 0
	}
	env := testEnv("xenv-a", alice, running)
	for _, c := range []struct {
		name, quotas string
		want         map[string]string // nil: admitted
	}{
		{"refuse", "defaults: {owner: {cpuCoreHours: {limit: 1.5, action: refuse}}}",
			map[string]string{"quota": "cpuCoreHours", "scope": "owner", "limit": "1.5", "used": "2.000"}},
		{"suspend refuses too", "defaults: {owner: {cpuCoreHours: {limit: 2, action: suspend}}}",
			map[string]string{"quota": "cpuCoreHours", "scope": "owner", "limit": "2", "used": "2.000"}},
		{"report admits", "defaults: {owner: {cpuCoreHours: {limit: 1, action: report}}}", nil},
		{"another window", "defaults: {owner: {cpuCoreHours: {limit: 1, window: 48h}}}", nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, setup{quotas: c.quotas, use: over, envs: []*executionv1alpha1.ExecutionEnvironment{env}})
			ctx := t.Context()
			calls := map[string]error{
				"AdmitEnvironment": f.a.AdmitEnvironment(ctx, admitted(alice, "xenv-new")),
				"AdmitReady":       f.a.AdmitReady(ctx, admitted(alice, env.Name)),
				"Command":          second(f.a.Command(ctx, env.Name, string(env.UID), "cmd-1", false)),
			}
			for call, err := range calls {
				if c.want == nil {
					if err != nil {
						t.Errorf("%s: %v", call, err)
					}
					continue
				}
				if diff := cmp.Diff(c.want, refusal(t, err)); diff != "" {
					t.Errorf("%s (-want +got):\n%s", call, diff)
				}
			}
			// Bob, under the limit, is admitted; time quotas alone cost no write.
			if err := f.a.AdmitEnvironment(ctx, admitted(bob, "xenv-bob")); err != nil {
				t.Errorf("bob: %v", err)
			}
			if n := f.api.writeCount(); n != 0 {
				t.Errorf("time quotas alone wrote %d times", n)
			}
		})
	}
}

func TestNewRequires(t *testing.T) {
	src := sourceOf(t, "")
	envs := execlisters.NewExecutionEnvironmentLister(cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{}))
	full := Config{Execution: newAPIServer(), Namespace: testNS, Environments: envs, Quotas: src}
	for name, cfg := range map[string]Config{
		"no Execution":    {Namespace: testNS, Environments: envs, Quotas: src},
		"no Namespace":    {Execution: full.Execution, Environments: envs, Quotas: src},
		"no Environments": {Execution: full.Execution, Namespace: testNS, Quotas: src},
		"no Quotas":       {Execution: full.Execution, Namespace: testNS, Environments: envs},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
	if _, err := New(full); err != nil {
		t.Errorf("a full config: %v", err)
	}
}

// second is the error of a call that answers a value too.
func second[T any](_ T, err error) error { return err }
