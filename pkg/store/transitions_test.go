package store_test

import (
	"errors"
	"fmt"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"sync"
	"testing"
	"time"

	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/store"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	if err != nil || res.Reference.State != v1alpha1.ReferenceReserveSuccessor || res.Reference.SourceBindingID != "conv-1" {
		t.Fatalf("reserve: %+v %v", res, err)
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
	if res, err = f.store.CommitReference(f.ctx, in("conv-3")); err != nil || res.Reference.State != v1alpha1.ReferencePublished || res.Reference.SourceBindingID != "" {
		t.Fatalf("commit successor: %+v %v", res, err)
	}
	if _, err := f.store.Attach(f.ctx, store.AttachInput{Caller: agentA, Owner: alice, Environment: r, BindingID: "conv-3"}); err != nil {
		t.Fatal(err)
	}

	if res, err = f.store.PrepareReferenceDelete(f.ctx, in("conv-1")); err != nil || res.Reference.State != v1alpha1.ReferencePendingDelete {
		t.Fatalf("prepare: %+v %v", res, err)
	}
	if _, err := f.store.Attach(f.ctx, store.AttachInput{Caller: agentA, Owner: alice, Environment: r, BindingID: "conv-1"}); !errors.Is(err, store.ErrNotReady) {
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
	envGrant := store.GrantClaims{BindingID: "conv-run", Environment: r}
	acquire := store.AcquireRunInput{Caller: agentA, OperationID: "acquire-1", Grant: envGrant, Environment: r, RunID: "run-1"}
	first, err := f.store.AcquireRun(f.ctx, acquire)
	if err != nil || first.Run.Epoch != 1 || first.Run.ClaimID == "" {
		t.Fatalf("acquire: %+v %v", first, err)
	}
	// The caller's deadline passed after the commit; it retries with the same id.
	retry, err := f.store.AcquireRun(f.ctx, acquire)
	if err != nil || retry.Run.ClaimID != first.Run.ClaimID || f.get(t, env.Name).Status.Epoch != 1 {
		t.Fatalf("retry: %+v %v (epoch %d)", retry, err, f.get(t, env.Name).Status.Epoch)
	}
	// A second binding on the same environment cannot take the claim.
	if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, SourceBindingID: "conv-run", SuccessorBindingID: "conv-other"}); !errors.Is(err, store.ErrNotReady) {
		t.Fatalf("reserve from an unpublished source: %v", err)
	}
	if _, err := f.store.CommitReference(f.ctx, store.ReferenceInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, BindingID: "conv-run"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.store.ReserveSuccessor(f.ctx, store.ReserveSuccessorInput{Caller: agentA, OperationID: opID(), Owner: alice, Environment: r, SourceBindingID: "conv-run", SuccessorBindingID: "conv-other"}); err != nil {
		t.Fatal(err)
	}
	other := store.AcquireRunInput{Caller: agentA, OperationID: opID(), Grant: store.GrantClaims{BindingID: "conv-other", Environment: r}, Environment: r, RunID: "run-2"}
	if _, err := f.store.AcquireRun(f.ctx, other); !errors.Is(err, store.ErrRunClaimHeld) {
		t.Fatalf("second holder: %v", err)
	}
	runGrant := store.GrantClaims{BindingID: "conv-run", Environment: r, Epoch: 1, RunID: "run-1", ClaimID: first.Run.ClaimID}
	renewed, err := f.store.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: runGrant, Environment: r, TTL: 2 * time.Minute})
	if err != nil || !renewed.Run.ExpiresAt.After(first.Run.ExpiresAt.Time) {
		t.Fatalf("renew: %+v %v", renewed, err)
	}
	stale := runGrant
	stale.Epoch = 0
	if _, err := f.store.RenewRun(f.ctx, store.RenewRunInput{Caller: agentA, OperationID: opID(), Grant: stale, Environment: r}); !errors.Is(err, store.ErrStaleEpoch) {
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
				if !errors.Is(err, store.ErrPreconditionMismatch) && !errors.Is(err, store.ErrOperationIDReused) {
					t.Errorf("revoke: %v", err)
					return
				}
			}
		})
		wg.Go(func() { // acquirer: under whatever generation it last saw
			gen := uint64(f.get(t, env.Name).Status.GrantGeneration)
			_, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: fmt.Sprintf("acq-%d", i),
				Grant: store.GrantClaims{BindingID: "conv-race", Environment: r, GrantGeneration: gen}, Environment: r, RunID: fmt.Sprintf("run-%d", i)})
			cmu.Lock()
			defer cmu.Unlock()
			switch {
			case err == nil:
				acquired++
			case errors.Is(err, store.ErrRunClaimHeld):
				held++
			case errors.Is(err, store.ErrRevoked):
				revokedErr++
			default:
				t.Errorf("acquire: %v", err)
			}
		})
	}
	wg.Wait()
	<-watchDone
	final := f.get(t, env.Name)
	if revoked != 10 || final.Status.GrantGeneration != 10 || final.Status.Epoch != acquired {
		t.Fatalf("revoked %d (generation %d), acquired %d (epoch %d), held %d, refused as revoked %d",
			revoked, final.Status.GrantGeneration, acquired, final.Status.Epoch, held, revokedErr)
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
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env), PodUID: ptrTo("00000000-0000-4000-8000-000000000009")}}); !errors.Is(err, store.ErrPreconditionMismatch) {
		t.Fatalf("replace naming another pod: %v", err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: scopedOps, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch(env), PodUID: podUID}}); !errors.Is(err, store.ErrNotFound) {
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
		Grant: store.GrantClaims{BindingID: "conv-admin", Environment: r}}); !errors.Is(err, store.ErrNotReady) {
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
		Grant: store.GrantClaims{BindingID: "conv-exp", Environment: r}, TTL: store.MinRunTTL}); err != nil {
		t.Fatal(err)
	}
	epoch := ptrTo[uint64](1)
	retire := store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch}}
	if _, err := f.store.Retire(f.ctx, retire); !errors.Is(err, store.ErrRunClaimHeld) {
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
		Grant: store.GrantClaims{BindingID: "conv-fence", Environment: r}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("acquire on a fenced environment: %v", err)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch, PodUID: &vanished}}); !errors.Is(err, store.ErrFenced) {
		t.Fatalf("replace on a fenced environment: %v", err)
	}
	if _, err := f.store.RecoverEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch, PodUID: ptrTo("")}}); !errors.Is(err, store.ErrPreconditionMismatch) {
		t.Fatalf("recover naming no executor: %v", err)
	}
	rec, err := f.store.RecoverEnvironment(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: epoch, PodUID: &vanished}, Reason: "node lost"})
	if err != nil {
		t.Fatal(err)
	}
	st := rec.Environment.Status
	if st.FenceState != v1alpha1.FenceHealthy || st.Pod != nil || st.Epoch != int64(*epoch)+1 || st.TerminationProof == nil || string(st.TerminationProof.PodUID) != vanished {
		t.Fatalf("after recover: %+v", st)
	}
	if _, err := f.store.ReplaceExecutor(f.ctx, store.AdminInput{Caller: admin, OperationID: opID(), Environment: r, Preconditions: store.Preconditions{Epoch: ptrTo(uint64(st.Epoch)), PodUID: ptrTo("")}}); err != nil {
		t.Fatal(err)
	}
	env = f.waitReady(t, env.Name)
	if env.Status.Epoch != st.Epoch+1 || env.Status.Pod == nil || string(env.Status.Pod.UID) == vanished {
		t.Fatalf("after replace: %+v", env.Status)
	}
}
