package integration_test

import (
	"encoding/json"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/faultproxy"
	"github.com/execplane/execplane/internal/dev/precondition"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// ttlProfile is the real node's profile with a suspendedTTL of 5 s.
const ttlProfile = "real-node-ttl"

// holdFinalizer is the test's own finalizer on a claim, holding its deletion.
const holdFinalizer = "execplane.test/hold"

// leaderPoll is how often the test's control proxy looks for the leading controller.
const leaderPoll = 200 * time.Millisecond

// The owner deletes a Ready environment on the real node while a detached command runs in
// it: every grant dies, the command's processes are gone from the node, the executor's end
// is recorded in the tombstone, the Pod and the claim are gone from the API; a second delete
// (another operation id) and a replay answer DELETED; another owner's and another client's
// answer NOT_FOUND, as an absent environment; the binding's next Ensure makes a new one.
func TestOwnerDeleteOnTheRealNode(t *testing.T) {
	if realNodeMissing != nil {
		precondition.Missing(t, "the real node: %v", realNodeMissing)
	}
	sys := startSystem(t, 1)
	api := sys.dial(t, "caller", 0)
	kube := clustertest.Cluster(t).Kube()
	s := ensureReadyOn(t, api, "alice", "conv-delete", realNodeProfile)
	ctx := clustertest.Context(t, 4*time.Minute)

	const token = "execplane-delete-test-7d1c"
	if _, err := s.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef,
		Command: shell("sleep 3600; : " + token), Detach: true, CommandId: "long-job"}); err != nil {
		t.Fatalf("detached start: %v", err)
	}
	clustertest.Eventually(t, 10*time.Second, "the detached command running on the node", func() bool { return len(processesWith(t, token)) > 0 })
	before := sys.environment(t, s.envRef.GetId())
	pod, claim := before.Status.Pod, before.Status.PVC

	target := &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: s.binding}
	del := func(api executionv1grpc.ExecutionProviderServiceClient, id string, target *executionv1.ReferenceTarget, wait time.Duration) (*executionv1.Environment, error) {
		r, err := api.DeleteEnvironment(callCtx(t), &executionv1.DeleteEnvironmentRequest{OperationId: id, Target: target, Wait: durationpb.New(wait)})
		return r.GetEnvironment(), err
	}

	// Another owner's and another client's deletes answer as for an absent environment.
	other := &executionv1.ReferenceTarget{Owner: ownerOf("bob"), Environment: s.envRef, BindingId: s.binding}
	_, err := del(api, op(), other, 0)
	wantCode(t, "another owner's delete", err, codes.NotFound, "NOT_FOUND")
	_, err = del(sys.dial(t, otherClient, 0), op(), target, 0)
	wantCode(t, "another client's delete", err, codes.NotFound, "NOT_FOUND")

	id := op()
	env, err := del(api, id, target, 30*time.Second)
	if err != nil {
		t.Fatalf("delete: %v", err)
	}
	if env.GetLifecycle() != executionv1.LifecycleState_LIFECYCLE_STATE_DELETED || env.GetGrantGeneration() != uint64(before.Status.GrantGeneration)+1 || env.GetPodUid() != "" || env.GetPvcUid() != "" {
		t.Fatalf("delete answered %v", env)
	}
	// The command ended with its executor: nothing of it is left on the node, and the
	// tombstone records how that executor ended.
	if left := processesWith(t, token); len(left) > 0 {
		t.Fatalf("the deleted environment's command still runs: %v", left)
	}
	tomb := sys.environment(t, s.envRef.GetId())
	if proof := tomb.Status.TerminationProof; proof == nil || proof.PodUID != pod.UID {
		t.Fatalf("the tombstone's termination proof %+v, want the executor %s", proof, pod.UID)
	}
	if _, err := kube.CoreV1().Pods(sys.executors).Get(ctx, pod.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the executor Pod after the delete: %v", err)
	}
	if _, err := kube.CoreV1().PersistentVolumeClaims(sys.executors).Get(ctx, claim.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the workspace claim after the delete: %v", err)
	}
	// Grants issued before are dead.
	_, err = s.files(ctx, read("anything.txt"))
	wantCode(t, "a file call with the run grant of before the delete", err, codes.Aborted, "REVOKED")

	// The same outcome again: a second delete, and a replay of the first.
	for what, id := range map[string]string{"a second delete": op(), "a replay": id} {
		again, err := del(api, id, target, 0)
		if err != nil || again.GetLifecycle() != executionv1.LifecycleState_LIFECYCLE_STATE_DELETED || again.GetRef().GetRevision() != s.envRef.GetRevision() {
			t.Fatalf("%s: %v %v", what, again, err)
		}
	}
	_, err = api.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: s.owner, BindingId: s.binding, Environment: s.envRef})
	wantCode(t, "attach to the deleted environment", err, codes.NotFound, "NOT_FOUND")
	_, err = del(api, op(), other, 0)
	wantCode(t, "another owner's delete of the tombstone", err, codes.NotFound, "NOT_FOUND")

	// The binding's next Ensure: a new environment under the same id.
	next := ensureReadyOn(t, api, "alice", "conv-delete", realNodeProfile)
	if next.envRef.GetId() != s.envRef.GetId() || next.envRef.GetRevision() == s.envRef.GetRevision() {
		t.Fatalf("ensure after the delete: %v, was %v", next.envRef, s.envRef)
	}
}

// A suspendedTTL of 5 s deletes a suspended environment's workspace on the real node, once,
// with an Expired Event, although the leader that began the deletion is killed in its
// middle (the claim held by a finalizer of the test's until then): the next leader, another
// controller, finishes it.
func TestSuspendedTTLAcrossALeaderChange(t *testing.T) {
	if realNodeMissing != nil {
		precondition.Missing(t, "the real node: %v", realNodeMissing)
	}
	route := routeToLeader(t)
	sys := startSystemWith(t, systemOptions{gateways: 1, controllers: 2, gatewayArgs: route.args,
		profiles: profileYAML(ttlProfile, devimage.ExecutorRef, devcluster.StorageClassName, 10, devcluster.RealNodePlacement+"    suspendedTTL: 5s\n")})
	route.follow(t, sys)
	api := sys.dial(t, "caller", 0)
	kube := clustertest.Cluster(t).Kube()
	s := ensureReadyOn(t, api, "alice", "conv-ttl", ttlProfile)
	ctx := clustertest.Context(t, 4*time.Minute)
	if _, err := api.ReleaseRun(ctx, &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := api.SuspendEnvironment(ctx, &executionv1.SuspendEnvironmentRequest{OperationId: op(),
		Target: &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: s.binding}}); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	var claim string
	clustertest.Eventually(t, time.Minute, "suspended", func() bool {
		env := sys.environment(t, s.envRef.GetId())
		if env.Status.PVC != nil {
			claim = env.Status.PVC.Name
		}
		return env.Status.Suspended()
	})
	// A finalizer of the test's holds the claim, so the deletion waits in DeletingWorkspace
	// until the leader that began it is dead.
	claims := kube.CoreV1().PersistentVolumeClaims(sys.executors)
	hold := func(finalizers []string) {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": finalizers}})
		if _, err := claims.Patch(ctx, claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatalf("the test's finalizer on the claim: %v", err)
		}
	}
	pvc, err := claims.Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hold(append(slices.Clone(pvc.Finalizers), holdFinalizer))
	events := func(reason string) int32 {
		list, err := kube.CoreV1().Events(sys.executors).List(ctx, metav1.ListOptions{FieldSelector: fields.Set{
			"involvedObject.name": s.envRef.GetId(), "reason": reason}.String()})
		if err != nil {
			t.Fatal(err)
		}
		var n int32
		for _, e := range list.Items {
			n += max(e.Count, 1)
		}
		return n
	}
	clustertest.Eventually(t, time.Minute, "the time limit's Delete deleting the claim", func() bool {
		pvc, err := claims.Get(ctx, claim, metav1.GetOptions{})
		op := sys.environment(t, s.envRef.GetId()).Status.LifecycleOperation
		return err == nil && pvc.DeletionTimestamp != nil && op.Kind == v1alpha1.LifecycleDelete && op.Phase == v1alpha1.PhaseDeletingWorkspace && events("Expired") > 0
	})
	var leader, next *process
	for _, c := range sys.Controllers {
		if c.Leads(ctx) {
			leader = &process{Process: c}
		} else {
			next = &process{Process: c}
		}
	}
	if leader == nil || next == nil {
		t.Fatal("no controller leads")
	}
	leader.Kill()
	clustertest.Eventually(t, time.Minute, "the other controller leading", func() bool { return next.Leads(ctx) })
	pvc, err = claims.Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hold(slices.DeleteFunc(slices.Clone(pvc.Finalizers), func(f string) bool { return f == holdFinalizer }))
	clustertest.Eventually(t, 90*time.Second, "the tombstone, completed by the next leader", func() bool {
		return sys.environment(t, s.envRef.GetId()).Status.Deleted()
	})
	if _, err := claims.Get(ctx, claim, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the workspace claim %q after the time limit: %v", claim, err)
	}
	env := sys.environment(t, s.envRef.GetId())
	if op := env.Status.LifecycleOperation; op.OperationID != "expired-suspendedTTL" {
		t.Fatalf("deleted by %+v", op)
	}
	if n := events("Expired"); n != 1 {
		t.Fatalf("%d Expired Events, want 1", n)
	}
	clustertest.Eventually(t, 30*time.Second, "the deletion's Event", func() bool { return events("EnvironmentDeleted") > 0 })
	if n := events("EnvironmentDeleted"); n != 1 {
		t.Fatalf("%d EnvironmentDeleted Events, want 1", n)
	}
}

// leaderRoute leads the gateways to whichever controller leads, as the chart's Service does.
type leaderRoute struct {
	args    []string
	leading *atomic.Pointer[string]
}

// routeToLeader starts the route's proxy; its args go to the gateways, follow to the system.
func routeToLeader(t *testing.T) leaderRoute {
	t.Helper()
	r := leaderRoute{leading: &atomic.Pointer[string]{}}
	r.leading.Store(new(string))
	control, err := faultproxy.Start(func() string { return *r.leading.Load() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(control.Close)
	r.args = []string{"--controller-address", control.Addr()}
	return r
}

// follow keeps the route on the system's leading controller until the test ends.
func (r leaderRoute) follow(t *testing.T, sys *system) {
	go func() {
		for ctx := t.Context(); ctx.Err() == nil; {
			addr := ""
			for _, c := range sys.Controllers {
				if c.Exited() == nil && c.Leads(ctx) {
					addr = c.Listen
				}
			}
			r.leading.Store(&addr)
			select {
			case <-ctx.Done():
			case <-time.After(leaderPoll):
			}
		}
	}()
}
