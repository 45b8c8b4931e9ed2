package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/failpoint"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/pkg/store"
)

// pooledYAML is the test profile with a warm pool of size, and extra lines of profile
// fields (a changed field changes the digest).
func pooledYAML(size int, extra string) string {
	return profiletest.YAML(10) + extra + fmt.Sprintf("    warmPool:\n      size: %d\n", size)
}

// runReconciler runs a reconciler over g's namespace until the returned stop is called.
func (g *rig) runReconciler(t *testing.T, profiles string) (stop func()) {
	t.Helper()
	reg, _ := profiletest.Registry(t, profiles)
	ctx, cancel := context.WithCancel(g.ctx)
	r, err := controller.NewReconciler(controller.ReconcilerConfig{Kube: g.c.Kube(), Execution: g.exec, Namespace: g.ns, Profiles: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Initialize(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { r.Run(ctx, 2); close(done) }()
	g.r = r
	t.Cleanup(cancel)
	return func() { cancel(); <-done }
}

// poolState is what a pool looks like from the API server: its members by name, each
// with its Pod's digest and whether the Pod is ready and the claim bound.
type poolMember struct {
	Digest string
	Ready  bool
}

func (g *rig) pool(t *testing.T) map[string]poolMember {
	t.Helper()
	sel := metav1.ListOptions{LabelSelector: executor.LabelPool + "=" + profiletest.Name}
	pods, err := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	claims, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	bound := map[string]bool{}
	for _, c := range claims.Items {
		bound[c.Name] = c.Status.Phase == corev1.ClaimBound && c.DeletionTimestamp == nil
	}
	out := map[string]poolMember{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil {
			continue
		}
		ready := bound[p.Name] && p.Status.Phase == corev1.PodRunning
		out[p.Name] = poolMember{Digest: p.Annotations[executor.AnnotationDigest], Ready: ready}
	}
	return out
}

// waitPool waits until the pool holds exactly n ready members of digest and nothing else
// (no claim without its Pod, no member being deleted) and returns their names.
func (g *rig) waitPool(t *testing.T, n int, digest string) []string {
	t.Helper()
	var names []string
	clustertest.Eventually(t, 60*time.Second, fmt.Sprintf("a pool of %d ready members", n), func() bool {
		members := g.pool(t)
		names = names[:0]
		for name, m := range members {
			if m.Digest != digest || !m.Ready {
				return false
			}
			names = append(names, name)
		}
		all, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelPool})
		if err != nil {
			t.Fatal(err)
		}
		return len(names) == n && len(all.Items) == n
	})
	slices.Sort(names)
	return names
}

// A profile's warm pool fills; a new environment adopts a member in one status write and
// is Ready at once; the pool refills; a digest change replaces the pooled members and
// never touches the adopted pair; a pool of 0 empties.
func TestWarmPool(t *testing.T) {
	g := newRig(t)
	stop := g.runReconciler(t, pooledYAML(3, ""))
	members := g.waitPool(t, 3, g.entry.Digest)
	for _, m := range members {
		if !strings.HasPrefix(m, controller.PoolPairPrefix+profiletest.Name+"-") {
			t.Fatalf("pool member %s is not named as a pool pair", m)
		}
	}

	created := g.create(t, "env-warm")
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, "Ready", func() bool {
		env = g.get(t, "env-warm")
		return meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady)
	})
	if env.Status.Pod == nil || env.Status.PVC == nil || env.Status.Pod.Name != env.Status.PVC.Name || !slices.Contains(members, env.Status.Pod.Name) {
		t.Fatalf("the environment did not adopt a pool pair: pod %v claim %v, pool %v", env.Status.Pod, env.Status.PVC, members)
	}
	pair := env.Status.Pod.Name
	pod, err := g.c.Kube().CoreV1().Pods(g.ns).Get(g.ctx, pair, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, pair, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	type adopted struct {
		PodUID, ClaimUID, Controller types.UID
		PodEnv, ClaimEnv, PodPool    string
		ClaimPool                    string
		ClaimOwners                  int
	}
	got := adopted{PodUID: pod.UID, ClaimUID: claim.UID, PodEnv: pod.Labels[executor.LabelEnvironmentUID], ClaimEnv: claim.Labels[executor.LabelEnvironmentUID],
		PodPool: pod.Labels[executor.LabelPool], ClaimPool: claim.Labels[executor.LabelPool], ClaimOwners: len(claim.OwnerReferences)}
	if c := metav1.GetControllerOf(pod); c != nil {
		got.Controller = c.UID
	}
	want := adopted{PodUID: env.Status.Pod.UID, ClaimUID: env.Status.PVC.UID, Controller: created.UID, PodEnv: string(created.UID), ClaimEnv: string(created.UID)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("the adopted pair (-want +got):\n%s", diff)
	}
	// Nothing was created for it: its only Pod and claim are the pair.
	if pods, err := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironmentUID + "=" + string(created.UID)}); err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of the environment: %v %v", pods, err)
	}
	if read := g.idlePass(t, "env-warm"); read.ResourceVersion != env.ResourceVersion {
		t.Fatalf("the reconciler kept writing after Ready: (-ready +now):\n%s", cmp.Diff(env.Status, read.Status))
	}

	refilled := g.waitPool(t, 3, g.entry.Digest)
	if slices.Contains(refilled, pair) {
		t.Fatalf("the adopted pair %s is pooled again: %v", pair, refilled)
	}

	// A new digest: every pooled member is replaced, the adopted pair is not touched.
	stop()
	changed := pooledYAML(3, "    cpuLimit: 500m\n")
	_, newEntry := profiletest.Registry(t, changed)
	if newEntry.Digest == g.entry.Digest {
		t.Fatal("the changed profile kept its digest")
	}
	stop = g.runReconciler(t, changed)
	replaced := g.waitPool(t, 3, newEntry.Digest)
	for _, m := range replaced {
		if slices.Contains(refilled, m) {
			t.Fatalf("member %s of the old digest was kept", m)
		}
	}
	still, err := g.c.Kube().CoreV1().Pods(g.ns).Get(g.ctx, pair, metav1.GetOptions{})
	if err != nil || still.UID != pod.UID || still.DeletionTimestamp != nil {
		t.Fatalf("the adopted Pod after the digest change: %v %v", still, err)
	}

	// A pool of 0: the members go, claims included; the adopted pair stays.
	stop()
	g.runReconciler(t, pooledYAML(0, "    cpuLimit: 500m\n"))
	g.waitPool(t, 0, newEntry.Digest)
	if _, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, pair, metav1.GetOptions{}); err != nil {
		t.Fatalf("the adopted claim: %v", err)
	}
}

// A controller killed in the middle of an adoption — the Pod claimed, or both relabelled,
// and nothing recorded — is succeeded by one that finishes that adoption: the environment
// records the pair the dead one claimed, no second pair or cold object is made for it, and
// the pool refills.
func TestInterruptedAdoptionIsFinished(t *testing.T) {
	for _, point := range []string{"after-pool-pod-claim", "after-pool-claim"} {
		t.Run(point, func(t *testing.T) {
			t.Parallel()
			g := newRig(t)
			profiles := pooledYAML(1, "")
			armed := startReplicaProfiles(t, g.c.Kubeconfig(), g.ns, "replica", fastLease, profiles, failpoint.Env+"="+point)
			members := g.waitPool(t, 1, g.entry.Digest)
			created := g.create(t, "env")
			armed.waitKilled(t, 60*time.Second)
			if !armed.log.Contains("failpoint " + point) {
				t.Fatalf("killed, but not at %s", point)
			}
			startReplicaProfiles(t, g.c.Kubeconfig(), g.ns, "replica", fastLease, profiles)
			env := g.waitReady(t, "env")
			if env.Status.Pod == nil || env.Status.Pod.Name != members[0] || env.Status.PVC == nil || env.Status.PVC.Name != members[0] {
				t.Fatalf("the environment records pod %v, claim %v; the claimed pair was %s", env.Status.Pod, env.Status.PVC, members[0])
			}
			pods := g.pods(t, "env")
			claims, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironmentUID + "=" + string(created.UID)})
			if err != nil {
				t.Fatal(err)
			}
			if len(pods) != 1 || pods[0].UID != env.Status.Pod.UID || len(claims.Items) != 1 || claims.Items[0].UID != env.Status.PVC.UID {
				t.Fatalf("%d pods and %d claims of the environment; recorded %v and %v", len(pods), len(claims.Items), env.Status.Pod, env.Status.PVC)
			}
			if refilled := g.waitPool(t, 1, g.entry.Digest); refilled[0] == members[0] {
				t.Fatalf("the adopted pair is pooled again")
			}
		})
	}
}

// Ensure through a store whose Provisioner is the reconciler: a pool hit is recorded and
// answered Ready by Ensure's own status write — the reference, the adopted pair and the
// conditions in one compare-and-swap, which no pass writes after; with no pool, the same
// write records the cold path's claim and Pod, created in place.
func TestEnsureProvisionsInItsOwnWrite(t *testing.T) {
	for _, size := range []int{1, 0} {
		t.Run(fmt.Sprintf("pool-%d", size), func(t *testing.T) {
			g := newRig(t)
			profiles := pooledYAML(size, "")
			g.runReconciler(t, profiles)
			members := g.waitPool(t, size, g.entry.Digest)
			reg, _ := profiletest.Registry(t, profiles)
			st, err := store.New(store.Config{Execution: g.exec, Kube: g.c.Kube(), Environments: g.r.Environments(), Namespace: g.ns, Profiles: reg,
				Finalizer: controller.EnvironmentFinalizer, Provisioner: g.r})
			if err != nil {
				t.Fatal(err)
			}
			r, err := st.Ensure(g.ctx, store.EnsureInput{Caller: store.Caller{Client: "spiffe://execplane.test/agent", Capabilities: store.Capabilities{MayAttestOwner: true}},
				OperationID: "ensure-1", Owner: store.Owner{Issuer: "https://issuer.example", Subject: "alice"}, BindingID: "conv-1", Profile: profiletest.Name})
			if err != nil {
				t.Fatal(err)
			}
			env := r.Environment
			if env.Status.Pod == nil || env.Status.PVC == nil || len(env.Status.References) != 1 || len(env.Status.Receipts) != 1 {
				t.Fatalf("Ensure's own write does not record the reference, the workspace and the executor: %+v", env.Status)
			}
			pods, err := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironmentUID + "=" + string(env.UID)})
			if err != nil || len(pods.Items) != 1 || pods.Items[0].UID != env.Status.Pod.UID {
				t.Fatalf("pods of the environment: %v %v (recorded %v)", pods, err, env.Status.Pod)
			}
			if size == 0 {
				if want := executor.PodName(env, 0); env.Status.Pod.Name != want {
					t.Fatalf("the cold path's executor is %s, want %s", env.Status.Pod.Name, want)
				}
				return
			}
			if !meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady) || !slices.Contains(members, env.Status.Pod.Name) {
				t.Fatalf("Ensure's answer on a pool hit is not the adopted, Ready environment: %+v (pool %v)", env.Status, members)
			}
			if idle := g.idlePass(t, env.Name); idle.ResourceVersion != env.ResourceVersion {
				t.Fatalf("a pass wrote after Ensure's own write (-ensure +now):\n%s", cmp.Diff(env.Status, idle.Status))
			}
		})
	}
}
