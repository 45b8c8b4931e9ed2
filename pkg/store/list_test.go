package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/store"
)

// Metadata is set with the environment and is part of the request; the deadline is set
// with the binding's reference and is not; ListEnvironments answers one client's
// environments for one owner, filtered and paged; SetDeadline moves and clears the
// deadline for the owner only; every refusal leaves the object as it was.
func TestMetadataListAndDeadline(t *testing.T) {
	f := newFixture(t, options{})
	ensure := func(c store.Caller, o store.Owner, binding string, md map[string]string, d *store.DeadlineInput) (*store.Result, error) {
		return f.store.Ensure(f.ctx, store.EnsureInput{Caller: c, OperationID: opID(), Owner: o, BindingID: binding, Profile: "python", Metadata: md, Deadline: d})
	}
	before := time.Now()
	r1, err := ensure(agentA, alice, "sbx-1", map[string]string{"team": "a", "kind": "x"}, &store.DeadlineInput{After: time.Hour, Action: v1alpha1.DeadlineSuspend})
	if err != nil {
		t.Fatal(err)
	}
	env1 := r1.Environment
	if diff := cmp.Diff(map[string]string{"team": "a", "kind": "x"}, env1.Spec.CallerMetadata); diff != "" {
		t.Fatalf("metadata (-want +got):\n%s", diff)
	}
	if d := env1.Status.Deadline; d == nil || d.Action != v1alpha1.DeadlineSuspend || d.At.Time.Before(before.Add(time.Hour-time.Second)) || d.At.Time.After(time.Now().Add(time.Hour)) {
		t.Fatalf("deadline %+v, want Suspend an hour from the call", d)
	}

	// The same binding with other metadata is another request; the deadline is not part of
	// it, and a later Ensure leaves it as it is.
	snap := f.snapshot(t, env1.Name)
	if _, err := ensure(agentA, alice, "sbx-1", map[string]string{"team": "b"}, nil); !errors.Is(err, apierror.ErrAlreadyExists) {
		t.Fatalf("other metadata: %v, want ALREADY_EXISTS", err)
	}
	if string(f.snapshot(t, env1.Name)) != string(snap) {
		t.Fatal("the refused Ensure changed the environment")
	}
	again, err := ensure(agentA, alice, "sbx-1", map[string]string{"kind": "x", "team": "a"}, &store.DeadlineInput{After: 2 * time.Hour, Action: v1alpha1.DeadlineDelete})
	if err != nil {
		t.Fatal(err)
	}
	if !again.Environment.Status.Deadline.At.Equal(&env1.Status.Deadline.At) {
		t.Fatalf("a second Ensure moved the deadline to %v", again.Environment.Status.Deadline)
	}

	// Malformed metadata and deadlines are refused before anything is created.
	many := map[string]string{}
	for i := range 33 {
		many[fmt.Sprintf("k%d", i)] = "v"
	}
	for name, c := range map[string]struct {
		md map[string]string
		d  *store.DeadlineInput
	}{
		"33 entries":       {md: many},
		"a key not an id":  {md: map[string]string{"a b": "v"}},
		"a value too long": {md: map[string]string{"k": string(make([]byte, 513))}},
		"not UTF-8":        {md: map[string]string{"k": "\xff"}},
		"a zero deadline":  {d: &store.DeadlineInput{Action: v1alpha1.DeadlineDelete}},
		"no action":        {d: &store.DeadlineInput{After: time.Minute}},
	} {
		n := f.count(t)
		if _, err := ensure(agentA, alice, "sbx-bad", c.md, c.d); !errors.Is(err, apierror.ErrInvalidArgument) {
			t.Fatalf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
		if f.count(t) != n {
			t.Fatalf("%s: the refused Ensure created an environment", name)
		}
	}

	r2, err := ensure(agentA, alice, "sbx-2", map[string]string{"team": "b"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r2.Environment.Status.Deadline != nil {
		t.Fatalf("an Ensure without a deadline set one: %+v", r2.Environment.Status.Deadline)
	}
	r3, err := ensure(agentA, bob, "sbx-3", map[string]string{"team": "a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ensure(agentB, alice, "sbx-4", map[string]string{"team": "a"}, nil); err != nil {
		t.Fatal(err)
	}

	list := func(in store.ListEnvironmentsInput) ([]string, string) {
		t.Helper()
		page, err := f.store.ListEnvironments(f.ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		var bindings []string
		for _, env := range page.Environments {
			bindings = append(bindings, env.Spec.BindingID)
		}
		return bindings, page.NextPageToken
	}
	sorted := func(bs ...string) []string { // in name order, as listed
		names := map[string]string{"sbx-1": env1.Name, "sbx-2": r2.Environment.Name}
		slices.SortFunc(bs, func(a, b string) int { return strings.Compare(names[a], names[b]) })
		return bs
	}
	clustertest.Eventually(t, 10*time.Second, "alice's two environments listed", func() bool {
		got, _ := list(store.ListEnvironmentsInput{Caller: agentA, Owner: alice})
		return len(got) == 2
	})
	for name, c := range map[string]struct {
		in   store.ListEnvironmentsInput
		want []string
	}{
		"every one of alice's": {store.ListEnvironmentsInput{Caller: agentA, Owner: alice}, sorted("sbx-1", "sbx-2")},
		"by metadata":          {store.ListEnvironmentsInput{Caller: agentA, Owner: alice, Metadata: map[string]string{"team": "a"}}, []string{"sbx-1"}},
		"by two entries":       {store.ListEnvironmentsInput{Caller: agentA, Owner: alice, Metadata: map[string]string{"team": "a", "kind": "y"}}, nil},
		"by binding":           {store.ListEnvironmentsInput{Caller: agentA, Owner: alice, BindingID: "sbx-2"}, []string{"sbx-2"}},
		"another owner's":      {store.ListEnvironmentsInput{Caller: agentA, Owner: bob}, []string{"sbx-3"}},
		"another client's":     {store.ListEnvironmentsInput{Caller: agentB, Owner: alice, BindingID: "sbx-1"}, nil},
		"none matched":         {store.ListEnvironmentsInput{Caller: agentA, Owner: alice, Match: func(*v1alpha1.ExecutionEnvironment) bool { return false }}, nil},
	} {
		if got, _ := list(c.in); !cmp.Equal(c.want, got) {
			t.Errorf("%s: %v, want %v", name, got, c.want)
		}
	}
	first, token := list(store.ListEnvironmentsInput{Caller: agentA, Owner: alice, PageSize: 1})
	second, last := list(store.ListEnvironmentsInput{Caller: agentA, Owner: alice, PageSize: 1, PageToken: token})
	if token == "" || last != "" || !cmp.Equal(sorted("sbx-1", "sbx-2"), append(first, second...)) {
		t.Fatalf("pages %v (%q) then %v (%q)", first, token, second, last)
	}
	for name, in := range map[string]store.ListEnvironmentsInput{
		"a forged token":   {Caller: agentA, Owner: alice, PageToken: "not-a-token!"},
		"no owner":         {Caller: agentA},
		"a page too large": {Caller: agentA, Owner: alice, PageSize: 501},
	} {
		if _, err := f.store.ListEnvironments(f.ctx, in); !errors.Is(err, apierror.ErrInvalidArgument) {
			t.Errorf("%s: %v, want INVALID_ARGUMENT", name, err)
		}
	}
	if _, err := f.store.ListEnvironments(f.ctx, store.ListEnvironmentsInput{Caller: noAttest, Owner: alice}); !errors.Is(err, apierror.ErrPermissionDenied) {
		t.Errorf("a client that may not attest owners: %v, want PERMISSION_DENIED", err)
	}

	// SetDeadline: the owner's binding moves and clears it; another owner's is absent.
	target := func(o store.Owner, env *v1alpha1.ExecutionEnvironment, binding string) store.ReferenceInput {
		return store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: o, Environment: ref(env), BindingID: binding}
	}
	snap = f.snapshot(t, r3.Environment.Name)
	if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target(alice, r3.Environment, "sbx-3"),
		Deadline: &store.DeadlineInput{After: time.Minute, Action: v1alpha1.DeadlineDelete}}); !errors.Is(err, apierror.ErrNotFound) {
		t.Fatalf("another owner's deadline: %v, want NOT_FOUND", err)
	}
	if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target(bob, r3.Environment, "sbx-3"),
		Deadline: &store.DeadlineInput{After: 0, Action: v1alpha1.DeadlineDelete}}); !errors.Is(err, apierror.ErrInvalidArgument) {
		t.Fatalf("a zero deadline: %v, want INVALID_ARGUMENT", err)
	}
	if string(f.snapshot(t, r3.Environment.Name)) != string(snap) {
		t.Fatal("a refused SetDeadline changed the environment")
	}
	in := store.SetDeadlineInput{ReferenceInput: target(alice, env1, "sbx-1"), Deadline: &store.DeadlineInput{After: 2 * time.Minute, Action: v1alpha1.DeadlineDelete}}
	moved, err := f.store.SetDeadline(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if d := moved.Environment.Status.Deadline; d == nil || d.Action != v1alpha1.DeadlineDelete || time.Until(d.At.Time) > 2*time.Minute {
		t.Fatalf("moved deadline %+v", d)
	}
	replayed, err := f.store.SetDeadline(f.ctx, in)
	if err != nil || !replayed.Environment.Status.Deadline.At.Equal(&moved.Environment.Status.Deadline.At) {
		t.Fatalf("replay: %v, %+v", err, replayed)
	}
	cleared, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target(alice, env1, "sbx-1")})
	if err != nil || cleared.Environment.Status.Deadline != nil {
		t.Fatalf("clear: %v, deadline %+v", err, cleared.Environment.Status.Deadline)
	}
}

// The controller starts the deadline's action when it passes: a Suspend deadline suspends a
// ready environment under a held run claim and is spent with it; a Delete deadline deletes.
func TestDeadlineActions(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	r, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: opID(), Owner: alice, BindingID: "sbx-timeout", Profile: "python",
		Deadline: &store.DeadlineInput{After: time.Hour, Action: v1alpha1.DeadlineSuspend}})
	if err != nil {
		t.Fatal(err)
	}
	env := f.waitReady(t, r.Environment.Name)
	target := store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ref(env), BindingID: "sbx-timeout"}
	if _, err := f.store.CommitReference(f.ctx, target); err != nil {
		t.Fatal(err)
	}
	grant := authority.GrantClaims{BindingID: "sbx-timeout", Environment: ref(env), GrantGeneration: uint64(env.Status.GrantGeneration)}
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: ref(env), RunID: "run-1", Grant: grant}); err != nil {
		t.Fatal(err)
	}
	target.OperationID = opID()
	if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target, Deadline: &store.DeadlineInput{After: time.Second, Action: v1alpha1.DeadlineSuspend}}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "suspended at its deadline", func() bool {
		st := f.get(t, env.Name).Status
		return st.Suspended() && st.Deadline == nil && st.ActiveRun == nil
	})

	// A DELETE deadline is the owner's DeleteEnvironment: refused while another binding
	// holds a reference, and, set before that reference came, spent at the deadline without
	// deleting.
	successor := func() {
		t.Helper()
		if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ref(env),
			SourceBindingID: "sbx-timeout", SuccessorBindingID: "sbx-next"}); err != nil {
			t.Fatal(err)
		}
	}
	abort := func() {
		t.Helper()
		if _, err := f.store.AbortReference(f.ctx, store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ref(env), BindingID: "sbx-next"}); err != nil {
			t.Fatal(err)
		}
	}
	successor()
	snap := f.snapshot(t, env.Name)
	target.OperationID = opID()
	if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target, Deadline: &store.DeadlineInput{After: time.Second, Action: v1alpha1.DeadlineDelete}}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("a DELETE deadline beside another binding's reference: %v, want NOT_READY", err)
	}
	if string(f.snapshot(t, env.Name)) != string(snap) {
		t.Fatal("the refused SetDeadline changed the environment")
	}
	abort()
	target.OperationID = opID()
	if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target, Deadline: &store.DeadlineInput{After: 3 * time.Second, Action: v1alpha1.DeadlineDelete}}); err != nil {
		t.Fatal(err)
	}
	successor()
	clustertest.Eventually(t, 30*time.Second, "the deadline spent without a delete", func() bool {
		st := f.get(t, env.Name).Status
		return st.Deadline == nil
	})
	if st := f.get(t, env.Name).Status; st.Deleted() || st.LifecycleOperation.Kind == v1alpha1.LifecycleDelete {
		t.Fatalf("deleted beside another binding's reference: %+v", st.LifecycleOperation)
	}
	abort()

	target.OperationID = opID()
	if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target, Deadline: &store.DeadlineInput{After: time.Second, Action: v1alpha1.DeadlineDelete}}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "deleted at its deadline", func() bool {
		st := f.get(t, env.Name).Status
		return st.Deleted()
	})
	if op := f.get(t, env.Name).Status.LifecycleOperation; op.OperationID != "deadline-delete" {
		t.Fatalf("deleted by %q, want the deadline's operation", op.OperationID)
	}
}

// AcquireRun with join answers the binding's live claim of the run instead of replacing it —
// whatever else was written since (more writes than the receipts kept) — and acquires as
// usual when there is none, or when another run holds it.
func TestJoinSharesTheClaim(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	r, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: opID(), Owner: alice, BindingID: "sbx-join", Profile: "python"})
	if err != nil {
		t.Fatal(err)
	}
	env := f.waitReady(t, r.Environment.Name)
	grant := authority.GrantClaims{BindingID: "sbx-join", Environment: ref(env), GrantGeneration: uint64(env.Status.GrantGeneration)}
	acquire := func(run string, join bool) (*v1alpha1.RunClaim, error) {
		res, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: ref(env), RunID: run, Grant: grant, Join: join})
		if err != nil {
			return nil, err
		}
		return res.Run, nil
	}
	first, err := acquire("e2b", true)
	if err != nil {
		t.Fatal(err)
	}
	for range v1alpha1.MaxReceipts + 8 {
		target := store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ref(env), BindingID: "sbx-join"}
		if _, err := f.store.SetDeadline(f.ctx, store.SetDeadlineInput{ReferenceInput: target, Deadline: &store.DeadlineInput{After: time.Hour, Action: v1alpha1.DeadlineSuspend}}); err != nil {
			t.Fatal(err)
		}
	}
	joined, err := acquire("e2b", true)
	if err != nil {
		t.Fatal(err)
	}
	if joined.ClaimID != first.ClaimID || joined.Epoch != first.Epoch {
		t.Fatalf("join answered claim %s at epoch %d, want %s at %d", joined.ClaimID, joined.Epoch, first.ClaimID, first.Epoch)
	}
	if _, err := acquire("other-run", true); !errors.Is(err, apierror.ErrRunClaimHeld) {
		t.Fatalf("another run joining: %v, want RUN_CLAIM_HELD", err)
	}
	replaced, err := acquire("e2b", false)
	if err != nil || replaced.Epoch != first.Epoch+1 {
		t.Fatalf("an acquisition without join: %+v, %v; want epoch %d", replaced, err, first.Epoch+1)
	}
}
