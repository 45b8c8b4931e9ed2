package integration_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// usageArgs are fast usage intervals: a kubelet sample a second, a checkpoint every two.
var usageArgs = []string{"--usage-sample-interval", "1s", "--usage-checkpoint-interval", "2s"}

// The usage ledger through its whole life on a fake node: commands and bytes counted by the
// gateways, CPU and memory read from the node, ready and suspended time from the lifecycle;
// the same counts after a controller failover, a gateway restart, a Suspend/Resume and a
// Replace (never twice, never going back); no write while the environment is suspended and
// idle; a windowed total equal to the totals; and read only by the client that created it
// or its administrators.
func TestUsageLedger(t *testing.T) {
	route := routeToLeader(t)
	sys := startSystemWith(t, systemOptions{gateways: 2, controllers: 2, controllerArgs: usageArgs, gatewayArgs: route.args})
	route.follow(t, sys)
	api := sys.dial(t, "caller", 0)
	s := ensureReady(t, api, "alice", "conv-usage")
	ctx := t.Context()

	payload := strings.Repeat("x", 100_000)
	if _, err := s.files(callCtx(t), write("data.txt", payload)); err != nil {
		t.Fatalf("write: %v", err)
	}
	// A command that burns some CPU in the helper's process tree (the fake node counts its
	// exec calls' rusage).
	burn := shell("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done; echo done")
	for range 2 {
		if r, err := s.command(callCtx(t), burn); err != nil || r.GetExitCode() != 0 {
			t.Fatalf("command: %v %v", r, err)
		}
	}
	get := func(api executionv1grpc.ExecutionProviderServiceClient) (*executionv1.GetUsageResponse, error) {
		return api.GetUsage(callCtx(t), &executionv1.GetUsageRequest{Environment: s.envRef,
			Granularity: executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL})
	}
	var u *executionv1.GetUsageResponse
	var seen string
	clustertest.Eventually(t, time.Minute, "the ledger's counts of two commands and a write", func() bool {
		var err error
		if u, err = get(api); err != nil {
			t.Fatalf("get usage: %v", err)
		}
		c := u.GetTotals()
		if last := c.String(); last != seen {
			t.Logf("usage: %s", last)
			seen = last
		}
		return c.GetCommands() == 2 && c.GetBytesIn() >= int64(len(payload)) && c.GetCpuNanoseconds() > 0 && c.GetReadyMilliseconds() > 0 &&
			c.GetStorageKibSeconds() > 0
	})
	if u.GetBindingId() != s.binding || u.GetEnvironment().GetRevision() != s.envRef.GetRevision() {
		t.Fatalf("the ledger of %v (binding %q)", u.GetEnvironment(), u.GetBindingId())
	}
	// The written ledger is in the API (the leader's answer may include what it has not
	// written yet).
	cs, err := versioned.NewForConfig(clustertest.Cluster(t).RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	usages := cs.ExecutionV1alpha1().ExecutionUsages(sys.executors)
	clustertest.Eventually(t, 30*time.Second, "the written ledger", func() bool {
		l, err := usages.Get(ctx, s.envRef.GetId()+"-"+s.envRef.GetRevision(), metav1.GetOptions{})
		return err == nil && l.Status.Totals.Commands == 2
	})
	cpuBefore := u.GetTotals().GetCpuNanoseconds()

	// A controller failover and a gateway restart: the counts go on, none twice.
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
	other := sys.dial(t, "caller", 1)
	s.api = other
	if r, err := s.command(callCtx(t), burn); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("command through the second gateway: %v %v", r, err)
	}
	waitCommands := func(n int64) {
		t.Helper()
		clustertest.Eventually(t, time.Minute, fmt.Sprintf("%d commands", n), func() bool {
			u, err := get(api)
			return err == nil && u.GetTotals().GetCommands() == n
		})
	}
	waitCommands(3) // the new leader took the first gateway's series again, and the second's
	// The second gateway killed and started again: a new process, a new series; the old
	// one's counts were taken (what a killed gateway had not reported yet is the stated loss).
	restarted, err := sys.Restart(sys.Gateways[1])
	if err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "the restarted gateway ready", func() bool { return restarted.Ready(ctx) })
	s.api = sys.dial(t, "caller", 1)
	if r, err := s.command(callCtx(t), burn); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("command through the restarted gateway: %v %v", r, err)
	}
	s.api = api
	waitCommands(4)
	// Held for several checkpoints: nothing reported again counts again.
	for range 4 {
		afterCheckpoints(t, sys, 1)
		u, err := get(api)
		if err != nil {
			t.Fatalf("get usage: %v", err)
		}
		if c := u.GetTotals(); c.GetCommands() != 4 || c.GetCpuNanoseconds() < cpuBefore {
			t.Fatalf("after the failover: %d commands (want 4), CPU %d ns (was %d)", c.GetCommands(), c.GetCpuNanoseconds(), cpuBefore)
		}
	}

	// The windows of the whole range sum to the totals.
	u, err = get(api)
	if err != nil {
		t.Fatal(err)
	}
	var sum executionv1.UsageCounters
	for _, w := range u.GetWindows() {
		sum.Commands += w.GetUsage().GetCommands()
		sum.BytesIn += w.GetUsage().GetBytesIn()
		sum.CpuNanoseconds += w.GetUsage().GetCpuNanoseconds()
	}
	if sum.Commands != u.GetTotals().GetCommands() || sum.BytesIn != u.GetTotals().GetBytesIn() || sum.CpuNanoseconds != u.GetTotals().GetCpuNanoseconds() {
		t.Fatalf("windows sum to %v, totals are %v", &sum, u.GetTotals())
	}

	// Suspended and idle: suspended time accrues with no write.
	if _, err := api.ReleaseRun(callCtx(t), &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release: %v", err)
	}
	target := &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: s.binding}
	if _, err := api.SuspendEnvironment(callCtx(t), &executionv1.SuspendEnvironmentRequest{OperationId: op(), Target: target}); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	name := s.envRef.GetId() + "-" + s.envRef.GetRevision()
	var written *v1alpha1.ExecutionUsage
	clustertest.Eventually(t, time.Minute, "the ledger accruing suspended time", func() bool {
		written, err = usages.Get(ctx, name, metav1.GetOptions{})
		return err == nil && written.Status.Accrual.State == v1alpha1.UsageSuspended
	})
	afterCheckpoints(t, sys, 2) // a Pod's last samples and the state change folded
	written, err = usages.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	suspendedAt := time.Now()
	afterCheckpoints(t, sys, 4)
	idle := time.Since(suspendedAt)
	after, err := usages.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.ResourceVersion != written.ResourceVersion {
		t.Fatalf("an idle suspended environment's ledger was written (resourceVersion %s → %s)", written.ResourceVersion, after.ResourceVersion)
	}
	u, err = get(api)
	if err != nil {
		t.Fatal(err)
	}
	if ms := u.GetTotals().GetSuspendedMilliseconds(); ms < idle.Milliseconds() {
		t.Fatalf("suspended %d ms, want at least the %v it has been idle", ms, idle)
	}

	// Resumed, then its executor replaced: a new Pod each time, whose CPU counts from its
	// own zero, and commands that count once each — the totals go on from where they were.
	if _, err := api.ResumeEnvironment(callCtx(t), &executionv1.ResumeEnvironmentRequest{OperationId: op(), Target: target}); err != nil {
		t.Fatalf("resume: %v", err)
	}
	s.waitReady(t)
	s.acquire(t, "run-2")
	if r, err := s.command(callCtx(t), burn); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("command after the resume: %v %v", r, err)
	}
	waitCommands(5)
	before, err := get(api)
	if err != nil {
		t.Fatal(err)
	}
	admin := sys.dial(t, "admin", 0)
	env := s.latest(t)
	rp, err := admin.ReplaceExecutor(callCtx(t), &executionv1.ReplaceExecutorRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{Epoch: ptr(env.GetEpoch()), PodUid: ptr(env.GetPodUid())}, Reason: "usage test"})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	clustertest.Eventually(t, time.Minute, "the replacement ready", func() bool {
		env = s.latest(t)
		return env.GetReady() && env.GetEpoch() > rp.GetEnvironment().GetEpoch()
	})
	s.acquire(t, "run-3")
	if r, err := s.command(callCtx(t), burn); err != nil || r.GetExitCode() != 0 {
		t.Fatalf("command after the replacement: %v %v", r, err)
	}
	waitCommands(6)
	for range 3 {
		afterCheckpoints(t, sys, 1)
		after, err := get(api)
		if err != nil {
			t.Fatal(err)
		}
		a, b := after.GetTotals(), before.GetTotals()
		if a.GetCommands() != 6 || a.GetCpuNanoseconds() < b.GetCpuNanoseconds() || a.GetSuspendedMilliseconds() < b.GetSuspendedMilliseconds() ||
			a.GetBytesIn() < b.GetBytesIn() || a.GetStorageKibSeconds() < b.GetStorageKibSeconds() {
			t.Fatalf("after the replacement: %v, before it %v", a, b)
		}
	}
	u, err = get(api)
	if err != nil {
		t.Fatal(err)
	}

	// Who may read it: not another client (absent, as for everything not yours), not an
	// administrator of another client; the caller's listing by owner, and an administrator
	// of every client.
	if _, err := get(sys.dial(t, otherClient, 0)); err == nil {
		t.Fatal("another client read the usage")
	} else {
		wantCode(t, "another client's GetUsage", err, codes.NotFound, "NOT_FOUND")
	}
	if _, err := get(sys.dial(t, scopedAdmin, 0)); err == nil {
		t.Fatal("an administrator of another client read the usage")
	}
	list := func(api executionv1grpc.ExecutionProviderServiceClient, r *executionv1.ListUsageRequest) []*executionv1.UsageRecord {
		t.Helper()
		resp, err := api.ListUsage(callCtx(t), r)
		if err != nil {
			t.Fatalf("list usage: %v", err)
		}
		return resp.GetRecords()
	}
	total := executionv1.UsageGranularity_USAGE_GRANULARITY_TOTAL
	mine := list(api, &executionv1.ListUsageRequest{Owner: s.owner, Granularity: total})
	if len(mine) != 1 || mine[0].GetEnvironment().GetId() != s.envRef.GetId() || mine[0].GetWindow().GetUsage().GetCommands() != 6 {
		t.Fatalf("the owner's usage: %v", mine)
	}
	if bob := list(api, &executionv1.ListUsageRequest{Owner: ownerOf("bob"), Granularity: total}); len(bob) != 0 {
		t.Fatalf("another owner's usage: %v", bob)
	}
	byClient := list(sys.dial(t, "admin", 0), &executionv1.ListUsageRequest{AllClients: true, Granularity: total,
		GroupBy: executionv1.UsageGroupBy_USAGE_GROUP_BY_CLIENT})
	if len(byClient) != 1 || byClient[0].GetClientHash() != u.GetClientHash() || byClient[0].GetWindow().GetUsage().GetCommands() != 6 {
		t.Fatalf("the administrator's usage by client: %v", byClient)
	}
	if _, err := sys.dial(t, "caller", 0).ListUsage(callCtx(t), &executionv1.ListUsageRequest{AllClients: true}); err == nil {
		t.Fatal("a client that is no administrator listed every client's usage")
	}
}

// afterCheckpoints waits until the leading controller has run n more usage checkpoints.
func afterCheckpoints(t *testing.T, sys *system, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := sys.AwaitLeaderMetric(ctx, "execplane_usage_checkpoints_total ", float64(n)); err != nil {
		t.Fatal(err)
	}
}
