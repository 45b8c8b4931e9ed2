package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/profile/profiletest"
)

type rig struct {
	c     *devcluster.Cluster
	ns    string
	exec  *versioned.Clientset
	entry profile.Entry
	ctx   context.Context
	// r is the reconciler startReconciler runs in this process (nil when the test runs
	// controller processes instead).
	r *controller.Reconciler
}

// newRig installs the CRDs into a fresh namespace, with no controller running.
func newRig(t *testing.T) *rig {
	t.Helper()
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, 3*time.Minute)
	if _, err := c.InstallCRDs(ctx, "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	exec, err := versioned.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	return &rig{c: c, ns: ns, exec: exec, entry: pythonProfile(t), ctx: ctx}
}

// profilesYAML is the test profile, capacity 10.
var profilesYAML = profiletest.YAML(10)

// pythonProfile is profilesYAML's profile, whose digest environments record.
func pythonProfile(t *testing.T) profile.Entry {
	t.Helper()
	_, entry := profiletest.Registry(t, profilesYAML)
	return entry
}

// startReconciler runs a reconciler in this process with the given profiles (default:
// profilesYAML).
func startReconciler(t *testing.T, profiles string) *rig {
	t.Helper()
	g := newRig(t)
	if profiles == "" {
		profiles = profilesYAML
	}
	reg, _ := profiletest.Registry(t, profiles)
	r, err := controller.NewReconciler(controller.ReconcilerConfig{Kube: g.c.Kube(), Execution: g.exec, Namespace: g.ns, Profiles: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Initialize(g.ctx); err != nil {
		t.Fatal(err)
	}
	go r.Run(g.ctx, 2)
	g.r = r
	return g
}

// cacheCatchUp bounds the wait for the reconciler's informer to show what the API server
// holds: a watch event normally arrives within milliseconds.
const cacheCatchUp = 10 * time.Second

// idlePass proves that the reconciler, processing the environment now, does nothing —
// observed, not waited for. Once the reconciler's cache holds the API server's current
// version of the environment, the test runs one pass itself: the same Reconcile the workers
// run for an event or a resync, on the same caches. A pass is synchronous, so whatever it
// writes or creates has landed when it returns. idlePass fails the test if the pass wrote
// the environment (the status it computed differed from the one it read) and returns the
// environment as the pass read it; what the pass may have created the caller lists.
// Only the environment cache is visible from here; the Pod and claim caches are shown
// current by what the caller waited for — a status the reconciler wrote from them.
func (g *rig) idlePass(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	var read *v1alpha1.ExecutionEnvironment
	err := wait.PollUntilContextTimeout(g.ctx, 20*time.Millisecond, cacheCatchUp, true, func(context.Context) (bool, error) {
		read = g.get(t, name)
		cached, err := g.r.Environments().ExecutionEnvironments(g.ns).Get(name)
		return err == nil && cached.ResourceVersion == read.ResourceVersion, nil
	})
	if err != nil {
		t.Fatalf("the reconciler's cache never showed %s at resourceVersion %s: %v", name, read.ResourceVersion, err)
	}
	err = g.r.Reconcile(g.ctx, g.ns+"/"+name)
	after := g.get(t, name)
	switch {
	case apierrors.IsConflict(err):
		// Our pass tried to write and a worker's pass wrote first: not idle either.
		t.Fatalf("the environment was written during a pass over it (resourceVersion %s -> %s); status (-read +written):\n%s",
			read.ResourceVersion, after.ResourceVersion, cmp.Diff(read.Status, after.Status))
	case err != nil:
		t.Fatalf("reconcile %s: %v", name, err)
	case after.ResourceVersion != read.ResourceVersion:
		t.Fatalf("a pass over an idle environment wrote it (resourceVersion %s -> %s); status (-read +written):\n%s",
			read.ResourceVersion, after.ResourceVersion, cmp.Diff(read.Status, after.Status))
	}
	return read
}

// provisioned is what the provisioning tests check of a status: the printer column, the
// fence, and whether a claim and an executor are recorded.
type provisioned struct {
	Phase                    v1alpha1.Phase
	Fence                    v1alpha1.FenceState
	PVCRecorded, PodRecorded bool
}

func provisionedOf(st v1alpha1.ExecutionEnvironmentStatus) provisioned {
	return provisioned{Phase: st.Phase, Fence: st.FenceState, PVCRecorded: st.PVC != nil, PodRecorded: st.Pod != nil}
}

func (g *rig) create(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	hex := strings.Repeat("0a", 32)
	env := &v1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.ExecutionEnvironmentSpec{SchemaVersion: 1, OwnerHash: hex, ClientHash: hex, BindingID: "b-" + name,
			RequestFingerprint: hex, Profile: "python", ProfileDigest: g.entry.Digest},
	}
	created, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Create(g.ctx, env, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return created
}

func phases(statuses []v1alpha1.ExecutionEnvironmentStatus) []v1alpha1.Phase {
	var out []v1alpha1.Phase
	for _, st := range statuses {
		out = append(out, st.Phase)
	}
	return out
}

func (g *rig) get(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	env, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Get(g.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// A new environment gets its claim and executor Pod, recorded by UID, and becomes Ready in
// one status write (a quiet start: nothing recorded on the way, no Event); once idle, the
// reconciler writes nothing more.
func TestReconcileProvisionsAndThenStaysQuiet(t *testing.T) {
	g := startReconciler(t, "")
	created := g.create(t, "env-a")
	w, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Watch(g.ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=env-a", ResourceVersion: created.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var env *v1alpha1.ExecutionEnvironment
	statuses := []v1alpha1.ExecutionEnvironmentStatus{created.Status}
	timeout := time.After(30 * time.Second)
	for env == nil {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("the watch ended before Ready")
			}
			cur, isEnv := ev.Object.(*v1alpha1.ExecutionEnvironment)
			if !isEnv {
				t.Fatalf("watch: %v", ev.Object)
			}
			if !equality.Semantic.DeepEqual(cur.Status, statuses[len(statuses)-1]) {
				statuses = append(statuses, cur.Status)
			}
			if meta.IsStatusConditionTrue(cur.Status.Conditions, v1alpha1.ConditionReady) {
				env = cur
			}
		case <-timeout:
			t.Fatalf("not Ready in 30 s; statuses written: %d", len(statuses)-1)
		}
	}
	if len(statuses) != 2 {
		t.Errorf("%d status writes from creation to Ready, want 1 (the one that says Ready); phases: %v", len(statuses)-1, phases(statuses))
	}
	if reasons := g.eventReasons(t, env); len(reasons) != 0 {
		t.Errorf("Events for a start that went as planned: %v, want none", reasons)
	}
	want := provisioned{Phase: v1alpha1.PhaseReady, Fence: v1alpha1.FenceHealthy, PVCRecorded: true, PodRecorded: true}
	if diff := cmp.Diff(want, provisionedOf(env.Status)); diff != "" {
		t.Fatalf("status (-want +got):\n%s", diff)
	}
	// The recorded objects are the live ones: the claim outlives the environment (no owner),
	// the Pod is controlled by it.
	type objects struct {
		PVCUID, PodUID, PodController types.UID
		PVCOwners                     int
	}
	pvc, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, env.Status.PVC.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	pod, err := g.c.Kube().CoreV1().Pods(g.ns).Get(g.ctx, env.Status.Pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod: %v", err)
	}
	got := objects{PVCUID: pvc.UID, PodUID: pod.UID, PVCOwners: len(pvc.OwnerReferences)}
	if c := metav1.GetControllerOf(pod); c != nil {
		got.PodController = c.UID
	}
	if diff := cmp.Diff(objects{PVCUID: env.Status.PVC.UID, PodUID: env.Status.Pod.UID, PodController: env.UID}, got); diff != "" {
		t.Fatalf("live objects against the record (-want +got):\n%s", diff)
	}
	// Idle: nothing was written since Ready, and a pass over the environment writes nothing
	// and creates nothing.
	if read := g.idlePass(t, "env-a"); read.ResourceVersion != env.ResourceVersion {
		t.Fatalf("the reconciler kept writing after Ready (resourceVersion %s -> %s); status (-ready +now):\n%s",
			env.ResourceVersion, read.ResourceVersion, cmp.Diff(env.Status, read.Status))
	}
	pods, err := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pvcs, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 || len(pvcs.Items) != 1 {
		t.Fatalf("%d pods and %d claims for one environment", len(pods.Items), len(pvcs.Items))
	}
}

// An executor Pod whose recorded UID vanished before any terminal state was seen (its
// finalizer stripped, then deleted by force) fences the environment; it is never silently
// recreated.
func TestVanishedExecutorFencesAndIsNotRecreated(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-b")
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, "Ready", func() bool {
		env = g.get(t, "env-b")
		return meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady)
	})
	pods := g.c.Kube().CoreV1().Pods(g.ns)
	// The finalizer removed first: the Pod goes at once, before any terminal state is seen.
	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := pods.Patch(g.ctx, env.Status.Pod.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// Deleted by force: no terminal state is ever reported (kubectl delete --force).
	if err := pods.Delete(g.ctx, env.Status.Pod.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "FenceUnknown", func() bool {
		env = g.get(t, "env-b")
		return env.Status.FenceState == v1alpha1.FenceUnknown
	})
	if !meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionFenced) || meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady) {
		t.Fatalf("conditions %+v", env.Status.Conditions)
	}
	// The fence write was the reconciler's answer to the vanished Pod; a pass now, on caches
	// that have seen both, writes nothing more and creates no executor.
	g.idlePass(t, "env-b")
	list, err := pods.List(g.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("a fenced environment got a new executor: %s", list.Items[0].Name)
	}
}

// A profile removed from the registry stops new work and says so in a condition.
func TestRemovedProfileStopsNewWork(t *testing.T) {
	g := startReconciler(t, strings.Replace(profilesYAML, "python:", "other:", 1))
	g.create(t, "env-c")
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, "ProfileCurrent=False", func() bool {
		env = g.get(t, "env-c")
		c := meta.FindStatusCondition(env.Status.Conditions, v1alpha1.ConditionProfileCurrent)
		return c != nil && c.Status == metav1.ConditionFalse
	})
	want := provisioned{Phase: v1alpha1.PhaseDegraded, Fence: v1alpha1.FenceHealthy}
	if diff := cmp.Diff(want, provisionedOf(env.Status)); diff != "" {
		t.Fatalf("objects recorded for a removed profile (-want +got):\n%s", diff)
	}
	pods, err := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironment + "=env-c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 0 {
		t.Fatal("an executor was created for a removed profile")
	}
}
