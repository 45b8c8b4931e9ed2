package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/store"
)

// A thousand concurrent Ensure calls for one binding, each with its own operation id,
// create exactly one environment, and every caller gets it.
func TestThousandConcurrentEnsuresCreateOne(t *testing.T) {
	f := newFixture(t, options{})
	const callers = 1000
	uids := make([]types.UID, callers)
	errs := make([]error, callers)
	changed := make([]bool, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			r, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: fmt.Sprintf("concurrent-%d", i), Owner: alice, BindingID: "shared", Profile: "python"})
			errs[i] = err
			if err == nil {
				uids[i], changed[i] = r.Environment.UID, r.Changed
			}
		})
	}
	wg.Wait()
	created := 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if uids[i] != uids[0] {
			t.Fatalf("caller %d got %s, caller 0 got %s", i, uids[i], uids[0])
		}
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("%d environments for one binding", n)
	}
	env := f.get(t, store.EnvironmentName(agentA.Client, store.OwnerHash(alice), "shared"))
	if len(env.Status.References) != 1 {
		t.Fatalf("references %+v", env.Status.References)
	}
	for _, c := range changed {
		if c {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d callers were told they created the environment", created)
	}
}

// Two Store instances — two leaders for a moment, with no lock in common — racing Ensure for
// one binding still create exactly one environment with one reference: the API server's
// create and compare-and-swap are the safety, not the in-process locks. A caller that lost
// the compare-and-swap too often gets the retryable CONFLICT and retries with its operation
// id, as the SDK does. At most one caller is told it created the environment (a creator
// whose first status write lost reports nothing, by design).
func TestTwoStoresRacingEnsureCreateOne(t *testing.T) {
	f := newFixture(t, options{})
	other := f.secondStore(t)
	const callers = 200
	uids := make([]types.UID, callers)
	errs := make([]error, callers)
	changed := make([]bool, callers)
	conflicts := make([]int, callers)
	var wg sync.WaitGroup
	for i := range callers {
		s := f.store
		if i%2 == 1 {
			s = other
		}
		wg.Go(func() {
			in := store.EnsureInput{Caller: agentA, OperationID: fmt.Sprintf("two-stores-%d", i), Owner: alice, BindingID: "shared", Profile: "python"}
			for range 20 {
				r, err := s.Ensure(f.ctx, in)
				if errors.Is(err, apierror.ErrConflict) {
					conflicts[i]++
					continue
				}
				errs[i] = err
				if err == nil {
					uids[i], changed[i] = r.Environment.UID, r.Changed
				}
				return
			}
			errs[i] = fmt.Errorf("still conflicting after %d attempts", conflicts[i])
		})
	}
	wg.Wait()
	created, lost := 0, 0
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if uids[i] != uids[0] {
			t.Fatalf("caller %d got %s, caller 0 got %s", i, uids[i], uids[0])
		}
		if changed[i] {
			created++
		}
		lost += conflicts[i]
	}
	if n := f.count(t); n != 1 {
		t.Fatalf("%d environments for one binding", n)
	}
	env := f.get(t, store.EnvironmentName(agentA.Client, store.OwnerHash(alice), "shared"))
	if len(env.Status.References) != 1 {
		t.Fatalf("references %+v", env.Status.References)
	}
	if created > 1 {
		t.Fatalf("%d callers were told they created the environment", created)
	}
	t.Logf("%d callers over two stores: one environment; %d compare-and-swaps lost and retried", callers, lost)
}

// Many bindings racing for the last slots of a profile: exactly the capacity is created,
// the rest are refused with apierror.ErrLimitExceeded and leave nothing behind.
func TestCapacityIsExactUnderRace(t *testing.T) {
	const capacity, racers = 3, 12
	f := newFixture(t, options{maxEnvironments: capacity})
	var wg sync.WaitGroup
	results := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			_, results[i] = f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: opID(), Owner: alice, BindingID: fmt.Sprintf("race-%d", i), Profile: "python"})
		})
	}
	wg.Wait()
	ok, refused := 0, 0
	for _, err := range results {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, apierror.ErrLimitExceeded):
			refused++
		default:
			t.Fatalf("unexpected: %v", err)
		}
	}
	type outcome struct{ Created, Refused, Objects int }
	if diff := cmp.Diff(outcome{capacity, racers - capacity, capacity}, outcome{ok, refused, f.count(t)}); diff != "" {
		t.Fatalf("%d racers for capacity %d (-want +got):\n%s", racers, capacity, diff)
	}
	// A binding that has its environment still ensures at capacity: it needs no new slot.
	list, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).List(f.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f.ensure(t, agentA, alice, list.Items[0].Spec.BindingID)
}
