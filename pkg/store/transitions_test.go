package store_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/store"
)

func (f *fixture) intents(t *testing.T, c store.Caller, o *store.Owner) []store.Intent {
	t.Helper()
	var all []store.Intent
	token := ""
	for {
		page, err := f.store.ListReferenceIntents(f.ctx, store.ListIntentsInput{Caller: c, Owner: o, PageSize: 1, PageToken: token})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, page.Intents...)
		if token = page.NextPageToken; token == "" {
			return all
		}
	}
}

// waitIntents polls the (cache-backed) intent list until it has n entries.
func (f *fixture) waitIntents(t *testing.T, c store.Caller, o *store.Owner, n int) []store.Intent {
	t.Helper()
	var got []store.Intent
	clustertest.Eventually(t, 10*time.Second, fmt.Sprintf("%d intents", n), func() bool {
		got = f.intents(t, c, o)
		return len(got) == n
	})
	return got
}

// reference is what the transition tests check of a binding's reference.
type reference struct {
	State  v1alpha1.ReferenceState
	Source string // the binding a successor succeeds
}

func referenceOf(r *v1alpha1.Reference) reference {
	if r == nil {
		return reference{}
	}
	return reference{r.State, r.SourceBindingID}
}

// Every reference transition, and the intents feed that shows what is not published.
func TestReferenceTransitions(t *testing.T) {
	f := newFixture(t, options{})
	env := f.ensure(t, agentA, alice, "conv-1").Environment
	r := ref(env)
	in := func(binding string) store.ReferenceInput {
		return store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: binding}
	}
	if got := f.waitIntents(t, agentA, &alice, 1); got[0].Reference.State != v1alpha1.ReferencePendingCreate {
		t.Fatalf("intents %+v", got)
	}
	res, err := f.store.CommitReference(f.ctx, in("conv-1"))
	if err != nil || res.Reference.State != v1alpha1.ReferencePublished {
		t.Fatalf("commit: %+v %v", res, err)
	}
	f.waitIntents(t, agentA, &alice, 0)

	res, err = f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, SourceBindingID: "conv-1", SuccessorBindingID: "conv-2"})
	if err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if diff := cmp.Diff(reference{v1alpha1.ReferenceReserveSuccessor, "conv-1"}, referenceOf(res.Reference)); diff != "" {
		t.Fatalf("reserve (-want +got):\n%s", diff)
	}
	got := f.waitIntents(t, agentA, nil, 1) // the client-wide feed
	if got[0].Reference.BindingID != "conv-2" || got[0].Environment != r {
		t.Fatalf("intents %+v", got)
	}
	if _, err := f.store.FindReferenceIntent(f.ctx, store.AttachInput{Caller: agentA, Owner: alice, Environment: r, BindingID: "conv-2"}); err != nil {
		t.Fatal(err)
	}
	if got := f.intents(t, agentB, nil); len(got) != 0 {
		t.Fatal("another client sees the intents")
	}
	if _, err := f.store.AbortReference(f.ctx, in("conv-2")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, SourceBindingID: "conv-1", SuccessorBindingID: "conv-3"}); err != nil {
		t.Fatal(err)
	}
	if res, err = f.store.CommitReference(f.ctx, in("conv-3")); err != nil {
		t.Fatalf("commit successor: %v", err)
	}
	if diff := cmp.Diff(reference{State: v1alpha1.ReferencePublished}, referenceOf(res.Reference)); diff != "" {
		t.Fatalf("commit successor (-want +got):\n%s", diff)
	}
	if _, err := f.store.Attach(f.ctx, store.AttachInput{Caller: agentA, Owner: alice, Environment: r, BindingID: "conv-3"}); err != nil {
		t.Fatal(err)
	}

	if res, err = f.store.PrepareReferenceDelete(f.ctx, in("conv-1")); err != nil || res.Reference.State != v1alpha1.ReferencePendingDelete {
		t.Fatalf("prepare: %+v %v", res, err)
	}
	if _, err := f.store.Attach(f.ctx, store.AttachInput{Caller: agentA, Owner: alice, Environment: r, BindingID: "conv-1"}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("attach while deleting: %v", err)
	}
	if res, err = f.store.CancelReferenceDelete(f.ctx, in("conv-1")); err != nil || res.Reference.State != v1alpha1.ReferencePublished {
		t.Fatalf("cancel: %+v %v", res, err)
	}
	if _, err := f.store.PrepareReferenceDelete(f.ctx, in("conv-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ConfirmReferenceDelete(f.ctx, in("conv-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ReleaseReference(f.ctx, in("conv-3")); err != nil {
		t.Fatal(err)
	}
	if refs := f.get(t, env.Name).Status.References; len(refs) != 0 {
		t.Fatalf("references left: %+v", refs)
	}
}

// Run claims: one holder at a time; replay returns the same claim without doing anything
// again (a client that timed out after the commit retries safely); renew and release.
func TestRunClaims(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-run").Environment
	f.ensure(t, agentA, alice, "conv-run") // idempotent
	env = f.waitReady(t, env.Name)
	r := ref(env)
	envGrant := authority.GrantClaims{BindingID: "conv-run", Environment: r}
	acquire := store.AcquireRunInput{Caller: agentA, OperationID: "acquire-1", Grant: envGrant, Environment: r, RunID: "run-1"}
	first, err := f.store.AcquireRun(f.ctx, acquire)
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if first.Run.ClaimID == "" {
		t.Fatalf("acquire: no claim id in %+v", first.Run)
	}
	// The claim answered and the ledger's epoch: one increment for the claim, none for its
	// replay, which answers the same claim.
	type claim struct {
		ID                 string
		Epoch, LedgerEpoch int64
	}
	want := claim{ID: first.Run.ClaimID, Epoch: 1, LedgerEpoch: 1}
	if diff := cmp.Diff(want, claim{first.Run.ClaimID, first.Run.Epoch, f.get(t, env.Name).Status.Epoch}); diff != "" {
		t.Fatalf("acquire (-want +got):\n%s", diff)
	}
	// The caller's deadline passed after the commit; it retries with the same id.
	retry, err := f.store.AcquireRun(f.ctx, acquire)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if diff := cmp.Diff(want, claim{retry.Run.ClaimID, retry.Run.Epoch, f.get(t, env.Name).Status.Epoch}); diff != "" {
		t.Fatalf("retry (-want +got):\n%s", diff)
	}
	// A second binding on the same environment cannot take the claim.
	if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, SourceBindingID: "conv-run", SuccessorBindingID: "conv-other"}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("reserve from an unpublished source: %v", err)
	}
	if _, err := f.store.CommitReference(f.ctx, store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: "conv-run"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, SourceBindingID: "conv-run", SuccessorBindingID: "conv-other"}); err != nil {
		t.Fatal(err)
	}
	other := store.AcquireRunInput{Caller: agentA, OperationID: opID(), Grant: authority.GrantClaims{BindingID: "conv-other", Environment: r}, Environment: r, RunID: "run-2"}
	if _, err := f.store.AcquireRun(f.ctx, other); !errors.Is(err, apierror.ErrRunClaimHeld) {
		t.Fatalf("second holder: %v", err)
	}
	runGrant := authority.GrantClaims{BindingID: "conv-run", Environment: r, Epoch: 1, RunID: "run-1", ClaimID: first.Run.ClaimID}
	renewed, err := f.store.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: runGrant, Environment: r, TTL: 2 * time.Minute})
	if err != nil || !renewed.Run.ExpiresAt.After(first.Run.ExpiresAt.Time) {
		t.Fatalf("renew: %+v %v", renewed, err)
	}
	stale := runGrant
	stale.Epoch = 0
	if _, err := f.store.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: stale, Environment: r}); !errors.Is(err, apierror.ErrStaleEpoch) {
		t.Fatalf("stale renew: %v", err)
	}
	if _, err := f.store.ReleaseRun(f.ctx, store.ReleaseRunInput{Caller: agentA, OperationID: opID(), Grant: runGrant, Environment: r}); err != nil {
		t.Fatal(err)
	}
	second, err := f.store.AcquireRun(f.ctx, other)
	if err != nil || second.Run.Epoch != 2 {
		t.Fatalf("acquire after release: %+v %v", second, err)
	}
}

// AcquireRun and RevokeEnvironment racing converge: at most one claim holder at any time,
// and epoch and generation only grow.
func TestAcquireAndRevokeConverge(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-race").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	var mu sync.Mutex
	var lastEpoch, lastGen int64
	watchDone := make(chan struct{})
	go func() { // observe the stored values while the race runs
		defer close(watchDone)
		for f.ctx.Err() == nil {
			e, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Get(f.ctx, env.Name, metav1.GetOptions{})
			if err != nil {
				return
			}
			mu.Lock()
			if e.Status.Epoch < lastEpoch || e.Status.GrantGeneration < lastGen {
				mu.Unlock()
				t.Errorf("went backwards: epoch %d→%d, generation %d→%d", lastEpoch, e.Status.Epoch, lastGen, e.Status.GrantGeneration)
				return
			}
			lastEpoch, lastGen = e.Status.Epoch, e.Status.GrantGeneration
			done := lastGen >= 10
			mu.Unlock()
			if done {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var wg sync.WaitGroup
	var acquired, revoked, held, revokedErr int64
	var cmu sync.Mutex
	for i := range 10 {
		wg.Go(func() { // revoker: retries its exact generation until it wins
			for {
				gen := uint64(f.get(t, env.Name).Status.GrantGeneration)
				_, err := f.store.RevokeEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: fmt.Sprintf("revoke-%d-%d", i, gen), Environment: r,
					Preconditions: store.Preconditions{GrantGeneration: &gen}})
				if err == nil {
					cmu.Lock()
					revoked++
					cmu.Unlock()
					return
				}
				if !errors.Is(err, apierror.ErrPreconditionMismatch) && !errors.Is(err, apierror.ErrOperationIDReused) {
					t.Errorf("revoke: %v", err)
					return
				}
			}
		})
		wg.Go(func() { // acquirer: under whatever generation it last saw
			gen := uint64(f.get(t, env.Name).Status.GrantGeneration)
			_, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: fmt.Sprintf("acq-%d", i),
				Grant: authority.GrantClaims{BindingID: "conv-race", Environment: r, GrantGeneration: gen}, Environment: r, RunID: fmt.Sprintf("run-%d", i)})
			cmu.Lock()
			defer cmu.Unlock()
			switch {
			case err == nil:
				acquired++
			case errors.Is(err, apierror.ErrRunClaimHeld):
				held++
			case errors.Is(err, apierror.ErrRevoked):
				revokedErr++
			default:
				t.Errorf("acquire: %v", err)
			}
		})
	}
	wg.Wait()
	<-watchDone
	final := f.get(t, env.Name)
	// Every revocation and every acquisition is counted once in the ledger.
	type converged struct{ Revoked, Generation, Acquired, Epoch int64 }
	if diff := cmp.Diff(converged{10, 10, acquired, acquired}, converged{revoked, final.Status.GrantGeneration, acquired, final.Status.Epoch}); diff != "" {
		t.Fatalf("after the race (held %d, refused as revoked %d) (-want +got):\n%s", held, revokedErr, diff)
	}
	if run := final.Status.ActiveRun; run != nil && run.GrantGeneration != final.Status.GrantGeneration {
		t.Fatalf("a claim survived a revocation: %+v", run)
	}
	t.Logf("acquired %d, held %d, refused as revoked %d", acquired, held, revokedErr)
}

// The administrative lifecycle through the store, driven to completion by the reconciler:
// Replace (epoch + 1), Retire, then DeleteRetired removes the claim and the environment.
// Migrate of a current environment is a no-op with its preconditions checked.
func TestAdministrativeLifecycle(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-admin").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	epoch := func(e *v1alpha1.ExecutionEnvironment) *uint64 { return ptrTo(uint64(e.Status.Epoch)) }
	podUID := ptrTo(string(env.Status.Pod.UID))

	mig, err := f.store.MigrateEnvironment(f.ctx, store.MigrateInput{AdminInput: store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env)}}, TargetSchemaVersion: 1})
	if err != nil || mig.Changed {
		t.Fatalf("migrate: %+v %v", mig, err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env), PodUID: ptrTo("00000000-0000-4000-8000-000000000009")}}); !errors.Is(err, apierror.ErrPreconditionMismatch) {
		t.Fatalf("replace naming another pod: %v", err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: scopedOps, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env), PodUID: podUID}}); !errors.Is(err, apierror.ErrNotFound) {
		t.Fatalf("replace out of scope: %v", err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env), PodUID: podUID}, Reason: "image update"}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "replaced and Ready", func() bool {
		env = f.get(t, env.Name)
		op := env.Status.LifecycleOperation
		return op.Phase == v1alpha1.PhaseCompleted && env.Status.Epoch == 1 && env.Status.Pod != nil && env.Status.Phase == v1alpha1.PhaseReady
	})
	if _, err := f.store.Retire(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env)}}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "retired", func() bool {
		env = f.get(t, env.Name)
		return env.Status.Phase == v1alpha1.PhaseRetired
	})
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-x",
		Grant: authority.GrantClaims{BindingID: "conv-admin", Environment: r}}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("acquire on a retired environment: %v", err)
	}
	if _, err := f.store.DeleteRetiredEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{PVCUID: ptrTo(string(env.Status.PVC.UID))}}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "deleted", func() bool {
		_, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Get(f.ctx, env.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// A run claim blocks Retire while it is unexpired; once expired — its client may be gone
// for good — it no longer does, and Retire clears it.
func TestExpiredClaimNeverBlocksRetire(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-exp").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1",
		Grant: authority.GrantClaims{BindingID: "conv-exp", Environment: r}, TTL: store.MinRunTTL}); err != nil {
		t.Fatal(err)
	}
	epoch := ptrTo[uint64](1)
	retire := store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch}}
	if _, err := f.store.Retire(f.ctx, retire); !errors.Is(err, apierror.ErrRunClaimHeld) {
		t.Fatalf("retire under a live claim: %v", err)
	}
	// The same ledger seen an hour later (the store's clock is its only notion of time).
	later, err := store.New(store.Config{Execution: f.exec, Kube: f.c.Kube(), Environments: f.lister, Namespace: f.ns, Profiles: f.profiles,
		Finalizer: "execution.mecatl.dev/delete-retired", Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	retire.OperationID = opID()
	res, err := later.Retire(f.ctx, retire)
	if err != nil {
		t.Fatalf("retire after the claim expired: %v", err)
	}
	if res.Environment.Status.ActiveRun != nil || res.Environment.Status.LifecycleOperation.Kind != v1alpha1.LifecycleRetire {
		t.Fatalf("status %+v", res.Environment.Status)
	}
}

// A fenced environment (its executor vanished without a trace) refuses runs and Replace
// until RecoverEnvironment names the exact executor; then Replace brings a new one.
func TestRecoverThenReplace(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-fence").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	pods := f.c.Kube().CoreV1().Pods(f.ns)
	if _, err := pods.Patch(f.ctx, env.Status.Pod.Name, "application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(f.ctx, env.Status.Pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptrTo[int64](0)}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "fenced", func() bool {
		env = f.get(t, env.Name)
		return env.Status.FenceState == v1alpha1.FenceUnknown
	})
	vanished := string(env.Status.Pod.UID)
	epoch := ptrTo(uint64(env.Status.Epoch))
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1",
		Grant: authority.GrantClaims{BindingID: "conv-fence", Environment: r}}); !errors.Is(err, apierror.ErrFenced) {
		t.Fatalf("acquire on a fenced environment: %v", err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch, PodUID: &vanished}}); !errors.Is(err, apierror.ErrFenced) {
		t.Fatalf("replace on a fenced environment: %v", err)
	}
	if _, err := f.store.RecoverEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch, PodUID: ptrTo("")}}); !errors.Is(err, apierror.ErrPreconditionMismatch) {
		t.Fatalf("recover naming no executor: %v", err)
	}
	rec, err := f.store.RecoverEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch, PodUID: &vanished}, Reason: "node lost"})
	if err != nil {
		t.Fatal(err)
	}
	st := rec.Environment.Status
	// Recovery declares the named executor terminated, forgets it and fences its grants.
	type recovered struct {
		Fence       v1alpha1.FenceState
		PodRecorded bool
		Epoch       int64
		ProofPodUID string
	}
	got := recovered{Fence: st.FenceState, PodRecorded: st.Pod != nil, Epoch: st.Epoch}
	if st.TerminationProof != nil {
		got.ProofPodUID = string(st.TerminationProof.PodUID)
	}
	if diff := cmp.Diff(recovered{Fence: v1alpha1.FenceHealthy, Epoch: int64(*epoch) + 1, ProofPodUID: vanished}, got); diff != "" {
		t.Fatalf("after recover (-want +got):\n%s", diff)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: ptrTo(uint64(st.Epoch)), PodUID: ptrTo("")}}); err != nil {
		t.Fatal(err)
	}
	env = f.waitReady(t, env.Name)
	if env.Status.Pod == nil || string(env.Status.Pod.UID) == vanished {
		t.Fatalf("after replace: executor %+v (the vanished one: %s)", env.Status.Pod, vanished)
	}
	if env.Status.Epoch != st.Epoch+1 {
		t.Fatalf("after replace: epoch %d, want %d", env.Status.Epoch, st.Epoch+1)
	}
}

// The owner's Suspend and Resume through the store with the reconciler: suspend revokes every
// grant and stops the executor, keeping the claim; AcquireRun with a revoked grant wakes
// nothing, with a current one it starts the resume (and is refused until Ready); Ensure
// resumes too; a resumed environment has a new executor at a higher epoch; a suspended one
// can be deleted by an administrator.
func TestSuspendAndResume(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-suspend").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	in := func() store.ReferenceInput {
		return store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: "conv-suspend"}
	}
	oldPod, oldPVC, gen := env.Status.Pod.UID, env.Status.PVC.UID, uint64(env.Status.GrantGeneration)
	grant := authority.GrantClaims{BindingID: "conv-suspend", Environment: r, GrantGeneration: gen}
	run, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1", Grant: grant})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.SuspendEnvironment(f.ctx, in()); !errors.Is(err, apierror.ErrRunClaimHeld) {
		t.Fatalf("suspend with a claim held: %v", err)
	}
	runGrant := grant
	runGrant.Epoch, runGrant.RunID, runGrant.ClaimID = uint64(run.Run.Epoch), "run-1", run.Run.ClaimID
	if _, err := f.store.ReleaseRun(f.ctx, store.ReleaseRunInput{Caller: agentA, OperationID: opID(), Environment: r, Grant: runGrant}); err != nil {
		t.Fatal(err)
	}
	s, err := f.store.SuspendEnvironment(f.ctx, in())
	if err != nil {
		t.Fatal(err)
	}
	if uint64(s.Environment.Status.GrantGeneration) != gen+1 || s.Environment.Status.ActiveRun != nil {
		t.Fatalf("suspend left generation %d (was %d), run %v", s.Environment.Status.GrantGeneration, gen, s.Environment.Status.ActiveRun)
	}
	clustertest.Eventually(t, 30*time.Second, "suspended", func() bool {
		env = f.get(t, env.Name)
		return env.Status.Phase == v1alpha1.PhaseSuspended
	})
	if env.Status.Pod != nil || env.Status.PVC == nil || env.Status.PVC.UID != oldPVC {
		t.Fatalf("suspended with pod %v, claim %v (was %s)", env.Status.Pod, env.Status.PVC, oldPVC)
	}
	if again, err := f.store.SuspendEnvironment(f.ctx, in()); err != nil || again.Environment.ResourceVersion != env.ResourceVersion {
		t.Fatalf("a suspension of a suspended environment changed it: %v", err)
	}
	// A revoked grant wakes nothing.
	before := f.snapshot(t, env.Name)
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-2", Grant: grant}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("acquire with a revoked grant on a suspended environment: %v", err)
	}
	if string(f.snapshot(t, env.Name)) != string(before) {
		t.Fatal("acquire with a revoked grant changed the suspended environment")
	}
	// A current grant starts the resume, and is refused until Ready.
	grant.GrantGeneration = gen + 1
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-2", Grant: grant}); !errors.Is(err, apierror.ErrNotReady) {
		t.Fatalf("acquire with a current grant on a suspended environment: %v", err)
	}
	env = f.waitReady(t, env.Name)
	if env.Status.Pod == nil || env.Status.Pod.UID == oldPod || env.Status.LifecycleOperation.Kind != v1alpha1.LifecycleResume {
		t.Fatalf("resumed with pod %v (was %s), operation %+v", env.Status.Pod, oldPod, env.Status.LifecycleOperation)
	}
	if _, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-2", Grant: grant}); err != nil {
		t.Fatalf("acquire once resumed: %v", err)
	}
	// Resume of a running environment changes nothing.
	cur := f.get(t, env.Name)
	if res, err := f.store.ResumeEnvironment(f.ctx, in()); err != nil || res.Environment.ResourceVersion != cur.ResourceVersion {
		t.Fatalf("resume of a running environment: %v", err)
	}

	// Ensure resumes a suspended environment.
	clustertest.Eventually(t, 30*time.Second, "the run released and suspended again", func() bool {
		cur := f.get(t, env.Name)
		if run := cur.Status.ActiveRun; run != nil {
			g := authority.GrantClaims{BindingID: "conv-suspend", Environment: r, GrantGeneration: gen + 1, Epoch: uint64(run.Epoch), RunID: run.RunID, ClaimID: run.ClaimID}
			if _, err := f.store.ReleaseRun(f.ctx, store.ReleaseRunInput{Caller: agentA, OperationID: opID(), Environment: r, Grant: g}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := f.store.SuspendEnvironment(f.ctx, in())
		return err == nil && f.get(t, env.Name).Status.Phase == v1alpha1.PhaseSuspended
	})
	if _, err := f.store.Ensure(f.ctx, store.EnsureInput{Caller: agentA, OperationID: opID(), Owner: alice, BindingID: "conv-suspend", Profile: "python"}); err != nil {
		t.Fatal(err)
	}
	f.waitReady(t, env.Name)

	// An administrator can delete a suspended environment.
	clustertest.Eventually(t, 30*time.Second, "suspended once more", func() bool {
		_, err := f.store.SuspendEnvironment(f.ctx, in())
		return err == nil && f.get(t, env.Name).Status.Phase == v1alpha1.PhaseSuspended
	})
	env = f.get(t, env.Name)
	if _, err := f.store.DeleteRetiredEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{PVCUID: ptrTo(string(env.Status.PVC.UID))}}); err != nil {
		t.Fatalf("delete a suspended environment: %v", err)
	}
	clustertest.Eventually(t, 30*time.Second, "deleted", func() bool {
		_, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Get(f.ctx, env.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// Found by the fault suite (test/chaos): agents of one binding that raced their Ensures
// each saw the reference PendingCreate and each committed it; every commit after the first
// was refused NOT_READY ("it is Published") however often it was retried, so the Go SDK's
// Ensure failed for all but one of them. A commit of a published reference answers it,
// and writes nothing.
func TestCommitOfAPublishedReferenceAnswersIt(t *testing.T) {
	f := newFixture(t, options{})
	env := f.ensure(t, agentA, alice, "conv-1").Environment
	in := func() store.ReferenceInput {
		return store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: ref(env), BindingID: "conv-1"}
	}
	if _, err := f.store.CommitReference(f.ctx, in()); err != nil {
		t.Fatalf("first commit: %v", err)
	}
	before := f.snapshot(t, env.Name)
	res, err := f.store.CommitReference(f.ctx, in())
	if err != nil || res.Reference == nil || res.Reference.State != v1alpha1.ReferencePublished {
		t.Fatalf("second commit: %+v %v", res, err)
	}
	if string(f.snapshot(t, env.Name)) != string(before) {
		t.Fatal("the second commit wrote")
	}
}

// Found by the soak (test/chaos TestSoak, 30 minutes): the expiry answered to a claim's
// holder had nanoseconds, the resource keeps seconds, so for up to a second before the
// expiry the holder was told, another run's AcquireRun found the claim lapsed and took it —
// two holders. The expiry answered is the expiry stored, after acquire and after renew.
func TestClaimExpiryAnsweredIsTheOneStored(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.waitReady(t, f.ensure(t, agentA, alice, "conv-exp").Environment.Name)
	r := ref(env)
	got, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(),
		Grant: authority.GrantClaims{BindingID: "conv-exp", Environment: r}, Environment: r, RunID: "run-1", TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if stored := f.get(t, env.Name).Status.ActiveRun.ExpiresAt; !got.Run.ExpiresAt.Equal(&stored) || got.Run.ExpiresAt.Nanosecond() != 0 {
		t.Fatalf("acquire answered expiry %s, stored %s", got.Run.ExpiresAt.Format(time.RFC3339Nano), stored.Format(time.RFC3339Nano))
	}
	grant := authority.GrantClaims{BindingID: "conv-exp", Environment: r, Epoch: uint64(got.Run.Epoch), RunID: "run-1", ClaimID: got.Run.ClaimID}
	renewed, err := f.store.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: grant, Environment: r, TTL: 45 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if stored := f.get(t, env.Name).Status.ActiveRun.ExpiresAt; !renewed.Run.ExpiresAt.Equal(&stored) || renewed.Run.ExpiresAt.Nanosecond() != 0 {
		t.Fatalf("renew answered expiry %s, stored %s", renewed.Run.ExpiresAt.Format(time.RFC3339Nano), stored.Format(time.RFC3339Nano))
	}
}
