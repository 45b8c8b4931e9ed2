package controller_test

import (
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// controlClient dials a replica's control API as the namespace's gateway.
func controlClient(t *testing.T, material *devbundle.Result, addr string) controlv1.ControlServiceClient {
	t.Helper()
	cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: material.Gateway.CertFile, KeyFile: material.Gateway.KeyFile,
		CAFile: material.CACert, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return controlv1.NewControlServiceClient(conn)
}

// The leader killed (SIGKILL) between a reference's prepare and its commit: after failover
// the new leader lists the pending intent, and it can be finished. The same for a delete
// prepared before the crash. A replica that does not lead answers UNAVAILABLE.
func TestFailoverBetweenPrepareAndCommit(t *testing.T) {
	g := newRig(t)
	a := startReplica(t, g.c.Kubeconfig(), g.ns, "replica-a")
	clustertest.Eventually(t, 20*time.Second, "replica-a leads", a.leads)
	b := startReplica(t, g.c.Kubeconfig(), g.ns, "replica-b")
	material := securityMaterial(t, g.c.Kubeconfig(), g.ns)
	caller := &controlv1.Caller{ClientUri: material.Caller.Identity, RequestId: "failover"}
	owner := &executionv1.Owner{Issuer: "https://issuer.example", Subject: "alice"}

	if _, err := controlClient(t, material, b.listen).Ensure(g.ctx, &controlv1.EnsureRequest{Caller: caller,
		Request: &executionv1.EnsureEnvironmentRequest{OperationId: "ensure-0", Owner: owner, BindingId: "conv-0", Profile: "python"}}); status.Code(err) != codes.Unavailable {
		t.Fatalf("the follower answered %v, want UNAVAILABLE", err)
	}
	leader := controlClient(t, material, a.listen)
	ensured, err := leader.Ensure(g.ctx, &controlv1.EnsureRequest{Caller: caller,
		Request: &executionv1.EnsureEnvironmentRequest{OperationId: "ensure-1", Owner: owner, BindingId: "conv-1", Profile: "python"}})
	if err != nil {
		t.Fatal(err)
	}
	env := ensured.GetEnvironment().GetRef()
	target := &executionv1.ReferenceTarget{Owner: owner, Environment: env, BindingId: "conv-1"}
	// A second binding's reference, published, then its delete prepared.
	if _, err := leader.CommitReference(g.ctx, &controlv1.CommitReferenceRequest{Caller: caller,
		Request: &executionv1.CommitReferenceRequest{OperationId: "commit-1", Target: target}}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.ReserveSuccessor(g.ctx, &controlv1.ReserveSuccessorRequest{Caller: caller,
		Request: &executionv1.ReserveSuccessorRequest{OperationId: "reserve-2", Owner: owner, Environment: env, SourceBindingId: "conv-1", SuccessorBindingId: "conv-2"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := leader.PrepareReferenceDelete(g.ctx, &controlv1.PrepareReferenceDeleteRequest{Caller: caller,
		Request: &executionv1.PrepareReferenceDeleteRequest{OperationId: "prepare-1", Target: target}}); err != nil {
		t.Fatal(err)
	}

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 20*time.Second, "replica-b leads", b.leads)
	next := controlClient(t, material, b.listen)
	var intents *executionv1.ListReferenceIntentsResponse
	clustertest.Eventually(t, 20*time.Second, "both intents listed by the new leader", func() bool {
		intents, err = next.ListReferenceIntents(g.ctx, &controlv1.ListReferenceIntentsRequest{Caller: caller,
			Request: &executionv1.ListReferenceIntentsRequest{Owner: owner}})
		return err == nil && len(intents.GetIntents()) == 2
	})
	states := map[string]executionv1.ReferenceState{}
	for _, it := range intents.GetIntents() {
		states[it.GetReference().GetBindingId()] = it.GetReference().GetState()
	}
	if states["conv-1"] != executionv1.ReferenceState_REFERENCE_STATE_PENDING_DELETE || states["conv-2"] != executionv1.ReferenceState_REFERENCE_STATE_RESERVED_SUCCESSOR {
		t.Fatalf("intents after failover: %v", states)
	}
	// Finish both, and replay the prepare with its original id: the first outcome, no
	// second transition.
	if _, err := next.CommitReference(g.ctx, &controlv1.CommitReferenceRequest{Caller: caller,
		Request: &executionv1.CommitReferenceRequest{OperationId: "commit-2", Target: &executionv1.ReferenceTarget{Owner: owner, Environment: env, BindingId: "conv-2"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := next.ConfirmReferenceDelete(g.ctx, &controlv1.ConfirmReferenceDeleteRequest{Caller: caller,
		Request: &executionv1.ConfirmReferenceDeleteRequest{OperationId: "confirm-1", Target: target}}); err != nil {
		t.Fatal(err)
	}
	final, err := next.ReleaseReference(g.ctx, &controlv1.ReleaseReferenceRequest{Caller: caller,
		Request: &executionv1.ReleaseReferenceRequest{OperationId: "confirm-1", Target: target}})
	if status.Code(err) != codes.Aborted {
		t.Fatalf("an operation id reused for another call: %v %v", final, err)
	}
	got := g.get(t, env.GetId())
	if len(got.Status.References) != 1 || got.Status.References[0].BindingID != "conv-2" {
		t.Fatalf("references %+v", got.Status.References)
	}
}

// A thousand concurrent Ensure calls for one binding through a real controller process's
// control API: one environment, every caller gets it; and a retry of a committed call with
// its operation id returns the same outcome without a second write.
func TestThousandEnsuresThroughTheControlAPI(t *testing.T) {
	g := newRig(t)
	a := startReplicaWith(t, g.c.Kubeconfig(), g.ns, "replica-a", steadyLease)
	clustertest.Eventually(t, 20*time.Second, "replica-a leads", a.leads)
	material := securityMaterial(t, g.c.Kubeconfig(), g.ns)
	client := controlClient(t, material, a.listen)
	owner := &executionv1.Owner{Issuer: "https://issuer.example", Subject: "alice"}
	const callers = 1000
	revisions := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() {
			// The controller bounds one gateway's in-flight calls (RESOURCE_EXHAUSTED,
			// retryable): retried with a pause, as a gateway does.
			for {
				reply, err := client.Ensure(g.ctx, &controlv1.EnsureRequest{Caller: &controlv1.Caller{ClientUri: material.Caller.Identity},
					Request: &executionv1.EnsureEnvironmentRequest{OperationId: "ensure-" + strconv.Itoa(i), Owner: owner, BindingId: "shared", Profile: "python"}})
				if status.Code(err) == codes.ResourceExhausted {
					time.Sleep(20 * time.Millisecond)
					continue
				}
				errs[i] = err
				revisions[i] = reply.GetEnvironment().GetRef().GetRevision()
				return
			}
		})
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
	}
	// Every caller answered with the one environment's revision.
	answered := map[string]int{}
	for _, r := range revisions {
		answered[r]++
	}
	if diff := cmp.Diff(map[string]int{revisions[0]: callers}, answered); diff != "" || revisions[0] == "" {
		t.Fatalf("callers by revision answered (-want +got):\n%s", diff)
	}
	list, err := g.exec.ExecutionV1alpha1().ExecutionEnvironments(g.ns).List(g.ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d environments for one binding", len(list.Items))
	}
	// The caller timed out after its Acquire committed, and retries with the same id.
	env := list.Items[0]
	clustertest.Eventually(t, 30*time.Second, "Ready", func() bool {
		e := g.get(t, env.Name)
		return meta.IsStatusConditionTrue(e.Status.Conditions, v1alpha1.ConditionReady)
	})
	ref := &executionv1.EnvironmentRef{Id: env.Name, Revision: string(env.UID)}
	acquire := &controlv1.AcquireRunRequest{Caller: &controlv1.Caller{ClientUri: material.Caller.Identity},
		Request: &executionv1.AcquireRunRequest{OperationId: "acquire-1", Environment: ref, RunId: "run-1"},
		Grant:   &controlv1.VerifiedGrant{BindingId: "shared", Environment: ref}}
	first, err := client.AcquireRun(g.ctx, acquire)
	if err != nil {
		t.Fatal(err)
	}
	rv := g.get(t, env.Name).ResourceVersion
	retry, err := client.AcquireRun(g.ctx, acquire)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	// The replay answers the first outcome: its claim at epoch 1.
	type claim struct {
		ID    string
		Epoch uint64
	}
	if diff := cmp.Diff(claim{first.GetRun().GetClaimId(), 1}, claim{retry.GetRun().GetClaimId(), retry.GetRun().GetEpoch()}); diff != "" {
		t.Fatalf("retry (-want +got):\n%s", diff)
	}
	if g.get(t, env.Name).ResourceVersion != rv {
		t.Fatal("the retry wrote")
	}
}
