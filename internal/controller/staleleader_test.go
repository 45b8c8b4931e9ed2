package controller_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

// A stale leader's write loses the compare-and-swap, deterministically. The new leader B
// creates an environment's claim and Pod (a quiet start: no status write); the old leader A
// caches the environment as created with its executor Pod ready, and is frozen there (its
// informers stopped: a leader paused past its lease); B records the ready executor; A,
// resumed, computes the same change from its stale view and writes it carrying the
// resourceVersion it read: refused Conflict, and the environment is exactly what
// B wrote, with no duplicate claim or Pod. No timing decides the outcome: the reconcilers run
// no workers, every pass is one synchronous Reconcile the test calls.
func TestStaleLeaderStatusWriteLosesTheCAS(t *testing.T) {
	g := newRig(t)
	reg, _ := profiletest.Registry(t, profilesYAML)
	newReconciler := func() *controller.Reconciler {
		r, err := controller.NewReconciler(controller.ReconcilerConfig{Kube: g.c.Kube(), Execution: g.exec, Namespace: g.ns, Profiles: reg})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	g.create(t, "env")
	key := g.ns + "/env"
	cachedAt := func(r *controller.Reconciler, rv string) {
		t.Helper()
		if err := wait.PollUntilContextTimeout(g.ctx, 10*time.Millisecond, cacheCatchUp, true, func(context.Context) (bool, error) {
			env, err := r.Environments().ExecutionEnvironments(g.ns).Get("env")
			return err == nil && env.ResourceVersion == rv, nil
		}); err != nil {
			t.Fatalf("the reconciler's cache never showed resourceVersion %s", rv)
		}
	}

	leader := newReconciler()
	if err := leader.Initialize(g.ctx); err != nil {
		t.Fatal(err)
	}
	// pass runs the leader's passes, each on its cache caught up with the API server, until
	// done holds of the environment.
	pass := func(what string, done func(*v1alpha1.ExecutionEnvironment) bool) *v1alpha1.ExecutionEnvironment {
		t.Helper()
		for range 10 {
			cur := g.get(t, "env")
			if done(cur) {
				return cur
			}
			cachedAt(leader, cur.ResourceVersion)
			if err := leader.Reconcile(g.ctx, key); err != nil {
				t.Fatalf("the leader's pass: %v", err)
			}
		}
		t.Fatalf("the leader's passes never reached: %s", what)
		return nil
	}
	// The leader's passes protect the environment (its finalizer) and create the claim and
	// the executor Pod, and — the start being quiet — write no status; then (no pass runs
	// meanwhile) the Pod starts and is ready.
	for i := 0; len(g.pods(t, "env")) == 0; i++ {
		if i == 10 {
			t.Fatal("the leader's passes never created the executor Pod")
		}
		cachedAt(leader, g.get(t, "env").ResourceVersion)
		if err := leader.Reconcile(g.ctx, key); err != nil {
			t.Fatalf("the leader's pass: %v", err)
		}
	}
	created := g.get(t, "env")
	if created.Status.Phase != "" || created.Status.PVC != nil || created.Status.Pod != nil {
		t.Fatalf("a starting environment's status was written before Ready (a start is quiet): %+v", created.Status)
	}
	clustertest.Eventually(t, 30*time.Second, "the executor Pod ready", func() bool {
		pods := g.pods(t, "env")
		return len(pods) == 1 && slices.ContainsFunc(pods[0].Status.Conditions, func(c corev1.PodCondition) bool {
			return c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue
		})
	})
	// The stale leader caches that moment — the environment as created, the Pod ready — and
	// is frozen there: its informers stop, as a leader's do when it is paused past its lease.
	stale := newReconciler()
	staleCtx, freeze := context.WithCancel(g.ctx)
	if err := stale.Initialize(staleCtx); err != nil {
		t.Fatal(err)
	}
	cachedAt(stale, created.ResourceVersion)
	freeze()
	// The new leader records the running executor: the status moves on.
	written := pass("ready", func(e *v1alpha1.ExecutionEnvironment) bool {
		return meta.IsStatusConditionTrue(e.Status.Conditions, v1alpha1.ConditionReady)
	})
	if cached, _ := stale.Environments().ExecutionEnvironments(g.ns).Get("env"); cached.ResourceVersion != created.ResourceVersion {
		t.Fatalf("the stale leader's cache moved to %s: the scenario is not stale", cached.ResourceVersion)
	}

	// Resumed, the stale leader computes the same change from its view and writes it with
	// the resourceVersion it read.
	err := stale.Reconcile(g.ctx, key)
	if !apierrors.IsConflict(err) {
		t.Fatalf("the stale leader's pass: %v, want a lost compare-and-swap (Conflict)", err)
	}
	after := g.get(t, "env")
	if after.ResourceVersion != written.ResourceVersion {
		t.Fatalf("the stale write landed: resourceVersion %s -> %s; status (-leader +after):\n%s",
			written.ResourceVersion, after.ResourceVersion, cmp.Diff(written.Status, after.Status))
	}
	claims, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironment + "=env"})
	if err != nil {
		t.Fatal(err)
	}
	if len(claims.Items) != 1 || claims.Items[0].UID != written.Status.PVC.UID {
		t.Fatalf("%d workspace claims after the stale pass, want the new leader's only", len(claims.Items))
	}
	if pods := g.pods(t, "env"); len(pods) > 1 {
		t.Fatalf("%d executor Pods after the stale pass", len(pods))
	}
}
