package integration_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/controller"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/executor"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Profiles with warm pools: the profiletest shape on the fake nodes, the example image on
// the real node.
const (
	pooledProfile         = "pooled"
	pooledRealNodeProfile = "real-node-pooled"
)

// pooledProfilesYAML is the two pooled profiles with pools of the given sizes (0: none);
// capacity 300 environments each.
func pooledProfilesYAML(kwok, real int) string {
	pool := func(size int) string { return fmt.Sprintf("    warmPool:\n      size: %d\n", size) }
	return profileYAML(pooledProfile, "registry.example/python:3.13", "kwok-volume", 300, pool(kwok)) +
		profileYAML(pooledRealNodeProfile, devimage.ExecutorRef, devcluster.StorageClassName, 300, pool(real)+devcluster.RealNodePlacement)
}

// waitPool waits until profile's pool holds n ready members (Pod running, claim bound) and
// returns their names.
func waitPool(t *testing.T, sys *system, profile string, n int) []string {
	t.Helper()
	kube := clustertest.Cluster(t).Kube()
	sel := metav1.ListOptions{LabelSelector: executor.LabelPool + "=" + profile}
	var names []string
	clustertest.Eventually(t, 2*time.Minute, fmt.Sprintf("a pool of %d ready %s members", n, profile), func() bool {
		pods, err := kube.CoreV1().Pods(sys.ExecutorNamespace()).List(callCtx(t), sel)
		if err != nil {
			t.Fatal(err)
		}
		claims, err := kube.CoreV1().PersistentVolumeClaims(sys.ExecutorNamespace()).List(callCtx(t), sel)
		if err != nil {
			t.Fatal(err)
		}
		bound := map[string]bool{}
		for _, c := range claims.Items {
			bound[c.Name] = c.Status.Phase == corev1.ClaimBound
		}
		names = names[:0]
		for _, p := range pods.Items {
			ready := false
			for _, c := range p.Status.Conditions {
				ready = ready || (c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue)
			}
			if !ready || !bound[p.Name] || p.DeletionTimestamp != nil {
				return false
			}
			names = append(names, p.Name)
		}
		return len(names) == n
	})
	return names
}

// environment reads an environment object of the system.
func (s *system) environment(t *testing.T, name string) *v1alpha1.ExecutionEnvironment {
	t.Helper()
	cs, err := versioned.NewForConfig(clustertest.Cluster(t).RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	env, err := cs.ExecutionV1alpha1().ExecutionEnvironments(s.ExecutorNamespace()).Get(callCtx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// 200 concurrent Ensures through a gateway over a warm pool of 50: exactly 200 environments,
// every one Ready; all 50 members adopted, each by one environment; no pair (Pod or claim)
// serves two; the controller's hit and miss counts say the same; and the pool refills to
// 50 members none of which was adopted.
func TestWarmPoolServesConcurrentEnsures(t *testing.T) {
	const ensures, pool = 200, 50
	sys := startSystemProfiles(t, pooledProfilesYAML(pool, 0), 1)
	api := sys.dial(t, "caller", 0)
	originals := waitPool(t, sys, pooledProfile, pool)

	names := make([]string, ensures)
	var wg sync.WaitGroup
	errs := make(chan error, ensures)
	for i := range ensures {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := clustertest.Context(t, 2*time.Minute)
			owner, binding := ownerOf("alice"), fmt.Sprintf("pooled-%03d", i)
			r, err := api.EnsureEnvironment(ctx, &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: owner, BindingId: binding, Profile: pooledProfile})
			if err != nil {
				errs <- fmt.Errorf("ensure %s: %w", binding, err)
				return
			}
			names[i] = r.GetEnvironment().GetRef().GetId()
			for !r.GetEnvironment().GetReady() {
				a, err := api.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: owner, BindingId: binding,
					Environment: r.GetEnvironment().GetRef(), WaitReady: durationpb.New(20 * time.Second)})
				if err != nil {
					errs <- fmt.Errorf("attach %s: %w", binding, err)
					return
				}
				r.Environment = a.GetEnvironment()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	cs, err := versioned.NewForConfig(clustertest.Cluster(t).RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ExecutionV1alpha1().ExecutionEnvironments(sys.ExecutorNamespace()).List(callCtx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != ensures {
		t.Fatalf("%d environments for %d distinct Ensures", len(list.Items), ensures)
	}
	pods, claims := map[string]string{}, map[string]string{}
	fromPool := 0
	for _, env := range list.Items {
		if env.Status.Pod == nil || env.Status.PVC == nil {
			t.Fatalf("%s records pod %v, claim %v", env.Name, env.Status.Pod, env.Status.PVC)
		}
		if other, dup := pods[env.Status.Pod.Name]; dup {
			t.Fatalf("executor Pod %s serves %s and %s", env.Status.Pod.Name, other, env.Name)
		}
		if other, dup := claims[env.Status.PVC.Name]; dup {
			t.Fatalf("claim %s serves %s and %s", env.Status.PVC.Name, other, env.Name)
		}
		pods[env.Status.Pod.Name], claims[env.Status.PVC.Name] = env.Name, env.Name
		if strings.HasPrefix(env.Status.Pod.Name, controller.PoolPairPrefix) {
			fromPool++
			if env.Status.PVC.Name != env.Status.Pod.Name {
				t.Fatalf("%s adopted Pod %s with claim %s", env.Name, env.Status.Pod.Name, env.Status.PVC.Name)
			}
		}
	}
	for _, m := range originals {
		if pods[m] == "" {
			t.Errorf("pool member %s was not adopted", m)
		}
	}
	hits := sys.controller.metric(t, `execplane_controller_pool_adoptions_total{profile="pooled",result="hit"}`)
	misses := sys.controller.metric(t, `execplane_controller_pool_adoptions_total{profile="pooled",result="miss"}`)
	t.Logf("%d environments, %d from the pool (%d of them refills), %d cold; controller counted %v hits, %v misses",
		ensures, fromPool, fromPool-pool, ensures-fromPool, hits, misses)
	if fromPool < pool || int(hits) != fromPool || int(misses) != ensures-fromPool {
		t.Fatalf("%d adopted, the controller counted %v hits and %v misses", fromPool, hits, misses)
	}
	refilled := waitPool(t, sys, pooledProfile, pool)
	for _, m := range refilled {
		if pods[m] != "" || slices.Contains(originals, m) {
			t.Fatalf("pool member %s was adopted before", m)
		}
	}
}
