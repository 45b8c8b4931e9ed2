package store_test

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/store"
)

// idleAfter is the test profile's suspendAfterIdle: the policy's shortest.
const idleAfter = 30 * time.Second

// With suspendAfterIdle, the reconciler suspends an environment once its run was released
// that long ago, and writes nothing before: the first change of the object after the
// release is the suspension itself.
func TestIdleEnvironmentIsSuspendedWithoutWritesBefore(t *testing.T) {
	f := newFixture(t, options{reconcile: true, profileExtra: "    suspendAfterIdle: 30s\n"})
	env := f.ensure(t, agentA, alice, "conv-idle").Environment
	env = f.waitReady(t, env.Name)
	r := ref(env)
	grant := authority.GrantClaims{BindingID: "conv-idle", Environment: r, GrantGeneration: uint64(env.Status.GrantGeneration)}
	run, err := f.store.AcquireRun(f.ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1", Grant: grant})
	if err != nil {
		t.Fatal(err)
	}
	grant.Epoch, grant.RunID, grant.ClaimID = uint64(run.Run.Epoch), "run-1", run.Run.ClaimID
	released, err := f.store.ReleaseRun(f.ctx, store.ReleaseRunInput{Caller: agentA, OperationID: opID(), Environment: r, Grant: grant})
	if err != nil {
		t.Fatal(err)
	}
	releasedAt := time.Now()
	w, err := f.exec.ExecutionV1alpha1().ExecutionEnvironments(f.ns).Watch(f.ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + env.Name, ResourceVersion: released.Environment.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	deadline := time.After(idleAfter + 30*time.Second)
	for first := true; ; first = false {
		select {
		case ev := <-w.ResultChan():
			if ev.Type != watch.Modified {
				t.Fatalf("watch: %s %v", ev.Type, ev.Object)
			}
			got := ev.Object.(*v1alpha1.ExecutionEnvironment)
			op := got.Status.LifecycleOperation
			if first {
				if op == nil || op.Kind != v1alpha1.LifecycleSuspend {
					t.Fatalf("the first write after the release is not the suspension: operation %+v, phase %s", op, got.Status.Phase)
				}
				if elapsed := time.Since(releasedAt); elapsed < idleAfter-time.Second {
					t.Fatalf("suspended %s after the release, before %s idle", elapsed, idleAfter)
				}
				if got.Status.GrantGeneration != env.Status.GrantGeneration+1 {
					t.Fatalf("generation %d after an idle suspension, was %d", got.Status.GrantGeneration, env.Status.GrantGeneration)
				}
			}
			if got.Status.Phase == v1alpha1.PhaseSuspended {
				t.Logf("suspended %s after the release", time.Since(releasedAt).Round(100*time.Millisecond))
				return
			}
		case <-deadline:
			t.Fatalf("not suspended %s after the release", time.Since(releasedAt))
		}
	}
}

// Attach with WaitReady answers once the environment is Ready (not before), and at once for
// one that is ready already.
func TestAttachWaitsUntilReady(t *testing.T) {
	f := newFixture(t, options{reconcile: true})
	env := f.ensure(t, agentA, alice, "conv-wait").Environment
	in := store.AttachInput{Caller: agentA, Owner: alice, BindingID: "conv-wait", Environment: ref(env), WaitReady: 20 * time.Second}
	start := time.Now()
	got, err := f.store.Attach(f.ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionTrue(got.Environment.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("a waiting attach answered %s after %s, not ready", got.Environment.Status.Phase, time.Since(start))
	}
	t.Logf("ready %s after the ensure", time.Since(start).Round(time.Millisecond))
	start = time.Now()
	if _, err := f.store.Attach(f.ctx, in); err != nil || time.Since(start) > time.Second {
		t.Fatalf("a waiting attach of a ready environment: %v after %s", err, time.Since(start))
	}
}
