package integration_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/pkg/store"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// 100 concurrent Ensures of one owner whose quota is 10 environments, through two gateways,
// the leading controller killed in their middle: exactly 10 environments exist, and the 90
// others were refused RESOURCE_EXHAUSTED QUOTA_EXCEEDED naming the quota, its limit and its
// use. Then a quota edit is picked up without a restart.
func TestQuotaAdmissionAcrossGatewaysAndALeaderChange(t *testing.T) {
	quotas := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(quotas, []byte("defaults:\n  owner:\n    environments: 10\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	route := routeToLeader(t)
	sys := startSystemWith(t, systemOptions{gateways: 2, controllers: 2, controllerArgs: []string{"--quotas", quotas}, gatewayArgs: route.args})
	route.follow(t, sys)
	apis := []executionv1grpc.ExecutionProviderServiceClient{sys.dial(t, "caller", 0), sys.dial(t, "caller", 1)}
	ctx := t.Context()
	owner := ownerOf("quota-alice")

	const n = 100
	var done atomic.Int64
	var mu sync.Mutex
	admitted, refused := map[string]bool{}, 0
	var wg sync.WaitGroup
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		clustertest.Eventually(t, 2*time.Minute, "a third of the Ensures answered", func() bool { return done.Load() >= n/3 })
		for _, c := range sys.Controllers {
			if c.Leads(ctx) {
				c.Kill()
				return
			}
		}
		t.Error("no controller leads")
	}()
	for i := range n {
		wg.Go(func() {
			defer done.Add(1)
			binding := fmt.Sprintf("quota-%03d", i)
			req := &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: owner, BindingId: binding, Profile: profiletest.Name}
			for {
				callCtx, cancel := context.WithTimeout(ctx, 45*time.Second)
				_, err := apis[i%2].EnsureEnvironment(callCtx, req)
				cancel()
				if err != nil && apierror.Retryable(err) && ctx.Err() == nil {
					continue // a leader change: the same operation again
				}
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					admitted[binding] = true
				case status.Code(err) == codes.ResourceExhausted && apierror.Reason(err) == "QUOTA_EXCEEDED":
					refused++
					md := apierror.Info(err).GetMetadata()
					if md["quota"] != "environments" || md["scope"] != "owner" || md["limit"] != "10" || md["used"] != "10" {
						t.Errorf("refusal metadata %v", md)
					}
				default:
					t.Errorf("ensure %s: %v", binding, err)
				}
				return
			}
		})
	}
	wg.Wait()
	<-killed
	if len(admitted) != 10 || refused != n-10 {
		t.Fatalf("%d admitted, %d refused; want 10 and %d", len(admitted), refused, n-10)
	}
	// What exists is what was admitted: 10 environments of the owner, each one answered.
	cs, err := versioned.NewForConfig(clustertest.Cluster(t).RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ExecutionV1alpha1().ExecutionEnvironments(sys.executors).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ownerHash := store.OwnerHash(store.Owner{Issuer: owner.GetIssuer(), Subject: owner.GetSubject()})
	var exist int
	for _, env := range list.Items {
		if env.Spec.OwnerHash == ownerHash {
			exist++
			if !admitted[env.Spec.BindingID] {
				t.Errorf("environment of binding %s exists, its Ensure was refused", env.Spec.BindingID)
			}
		}
	}
	if exist != 10 {
		t.Fatalf("%d environments of the owner exist, want 10", exist)
	}

	// The quota raised in the file: the next Ensure passes once the controller read it.
	if err := os.WriteFile(quotas, []byte("defaults:\n  owner:\n    environments: 11\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "an Ensure admitted under the raised quota", func() bool {
		_, err := apis[0].EnsureEnvironment(callCtx(t), &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: owner,
			BindingId: "quota-raised", Profile: profiletest.Name})
		return err == nil
	})

	// Two detached commands per owner: a third is refused until one is cancelled.
	if err := os.WriteFile(quotas, []byte("defaults:\n  owner:\n    environments: 11\n    detachedCommands: 2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := ensureReady(t, apis[0], "quota-bob", "quota-commands")
	// The longest claim: waiting for the quota under load may outlast the default minute.
	rn, err := apis[0].RenewRun(callCtx(t), &executionv1.RenewRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef,
		Ttl: durationpb.New(5 * time.Minute)})
	if err != nil {
		t.Fatalf("renew: %v", err)
	}
	s.runG = rn.GetRunGrant()
	start := func(id string) (*executionv1.CommandInfo, error) {
		r, err := apis[0].StartCommand(callCtx(t), &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef,
			Command: shell("sleep 300"), Detach: true, CommandId: id})
		return r.GetCommand(), err
	}
	cancel := func(id string) {
		t.Helper()
		if _, err := apis[0].CancelCommand(callCtx(t), &executionv1.CancelCommandRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: id}); err != nil {
			t.Fatalf("cancel %s: %v", id, err)
		}
	}
	quotaRefused := func(err error) bool {
		return status.Code(err) == codes.ResourceExhausted && strings.Contains(err.Error(), "detachedCommands")
	}
	var first, second string
	round := 0
	clustertest.Eventually(t, time.Minute, "the detached commands quota in force", func() bool {
		// New ids each round: a round that ran before the controller read the file
		// cancels what it started, and a slot not yet given back refuses the next round's.
		round++
		first, second = fmt.Sprintf("job-%d-a", round), fmt.Sprintf("job-%d-b", round)
		var started []string
		end := func() bool {
			for _, id := range started {
				cancel(id)
			}
			return false
		}
		for _, id := range []string{first, second} {
			if _, err := start(id); err != nil {
				if quotaRefused(err) {
					return end()
				}
				t.Fatalf("the detached command %s: %v", id, err)
			}
			started = append(started, id)
		}
		third := fmt.Sprintf("job-%d-c", round)
		_, err := start(third)
		if err == nil {
			started = append(started, third)
			return end()
		}
		wantCode(t, "a third detached command", err, codes.ResourceExhausted, "QUOTA_EXCEEDED")
		if md := apierror.Info(err).GetMetadata(); md["quota"] != "detachedCommands" || md["limit"] != "2" {
			t.Fatalf("refusal metadata %v", md)
		}
		return true
	})
	// A start replayed by command_id answers the first start's command and is counted once.
	if info, err := start(first); err != nil || info.GetState() != executionv1.CommandState_COMMAND_STATE_RUNNING {
		t.Fatalf("a replayed start of a running command, the quota full: %v %v", info, err)
	}
	cancel(first)
	// Replayed after its end it answers the ended command and keeps no slot: a new one fits.
	if info, err := start(first); err != nil || info.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED {
		t.Fatalf("a replayed start of a cancelled command: %v %v", info, err)
	}
	if _, err := start("job-4"); err != nil {
		t.Fatalf("a detached command after one ended: %v", err)
	}
	// The quota full again: the replay still answers the ended command; a new one is refused.
	if info, err := start(first); err != nil || info.GetState() != executionv1.CommandState_COMMAND_STATE_CANCELLED {
		t.Fatalf("a replayed start of a cancelled command, the quota full: %v %v", info, err)
	}
	if _, err := start("job-5"); !quotaRefused(err) {
		t.Fatalf("a third detached command beside %s and job-4: %v", second, err)
	}
}
