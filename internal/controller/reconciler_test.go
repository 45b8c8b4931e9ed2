package controller_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

type rig struct {
	c     *devcluster.Cluster
	ns    string
	exec  *versioned.Clientset
	entry profile.Entry
	ctx   context.Context
}

// newRig installs the CRDs into a fresh namespace, with no controller running.
func newRig(t *testing.T) *rig {
	t.Helper()
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := clustertest.Context(t, 3*time.Minute)
	if _, err := c.InstallCRDs(ctx, "../../deploy/helm/execplane/crds"); err != nil {
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
	return g
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

func (g *rig) get(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	env, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).Get(g.ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// A new environment gets its claim and executor Pod, recorded by UID, and becomes Ready; once
// idle, the reconciler writes nothing more.
func TestReconcileProvisionsAndThenStaysQuiet(t *testing.T) {
	g := startReconciler(t, "")
	g.create(t, "env-a")
	var env *v1alpha1.ExecutionEnvironment
	clustertest.Eventually(t, 30*time.Second, "Ready", func() bool {
		env = g.get(t, "env-a")
		return meta.IsStatusConditionTrue(env.Status.Conditions, v1alpha1.ConditionReady)
	})
	if env.Status.PVC == nil || env.Status.Pod == nil || env.Status.Phase != v1alpha1.PhaseReady || env.Status.FenceState != v1alpha1.FenceHealthy {
		t.Fatalf("status %+v", env.Status)
	}
	pvc, err := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).Get(g.ctx, env.Status.PVC.Name, metav1.GetOptions{})
	if err != nil || pvc.UID != env.Status.PVC.UID || len(pvc.OwnerReferences) != 0 {
		t.Fatalf("claim %v %v", pvc, err)
	}
	pod, err := g.c.Kube().CoreV1().Pods(g.ns).Get(g.ctx, env.Status.Pod.Name, metav1.GetOptions{})
	if err != nil || pod.UID != env.Status.Pod.UID || metav1.GetControllerOf(pod).UID != env.UID {
		t.Fatalf("pod %v %v", pod, err)
	}
	rv := env.ResourceVersion
	time.Sleep(3 * time.Second)
	if now := g.get(t, "env-a").ResourceVersion; now != rv {
		t.Fatalf("the reconciler kept writing while idle (resourceVersion %s -> %s)", rv, now)
	}
	pods, _ := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{})
	pvcs, _ := g.c.Kube().CoreV1().PersistentVolumeClaims(g.ns).List(g.ctx, metav1.ListOptions{})
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
	time.Sleep(2 * time.Second)
	list, _ := pods.List(g.ctx, metav1.ListOptions{})
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
	if env.Status.PVC != nil || env.Status.Pod != nil || env.Status.Phase != v1alpha1.PhaseDegraded {
		t.Fatalf("objects created for a removed profile: %+v", env.Status)
	}
	pods, _ := g.c.Kube().CoreV1().Pods(g.ns).List(g.ctx, metav1.ListOptions{LabelSelector: executor.LabelEnvironment + "=env-c"})
	if len(pods.Items) != 0 {
		t.Fatal("an executor was created for a removed profile")
	}
}
