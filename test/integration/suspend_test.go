package integration_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// refusedAs fails unless err is the gRPC code with the ErrorInfo reason.
func refusedAs(t *testing.T, what string, err error, code codes.Code, reason executionv1.ErrorReason) {
	t.Helper()
	if status.Code(err) != code || apierror.Reason(err) != apierror.ReasonName(reason) {
		t.Fatalf("%s: answered %v, want %s/%s", what, err, code, apierror.ReasonName(reason))
	}
}

// The owner suspends its environment and resumes it: the executor Pod stops and a new one
// starts at a higher epoch, the workspace claim and its content stay, and every grant
// issued before the suspension is refused — before and after the resume. A suspension is
// refused, changing nothing, while a run claim is held; AttachEnvironment resumes a
// suspended environment as ResumeEnvironment does.
//
// On the fake node and on the real one (containerd and runc: the executor really stops and
// a new container mounts the same volume); and on each with an environment adopted from a
// warm pool, whose claim keeps its pool name (the resumed executor must mount it by that
// name).
func TestSuspendResumeKeepsTheWorkspace(t *testing.T) {
	for _, node := range []struct {
		name, profile string
		pool          int
	}{
		{"kwok", profiletest.Name, 0}, {"real-node", realNodeProfile, 0},
		{"kwok-pooled", pooledProfile, 2}, {"real-node-pooled", pooledRealNodeProfile, 1},
	} {
		t.Run(node.name, func(t *testing.T) {
			if (node.profile == realNodeProfile || node.profile == pooledRealNodeProfile) && realNodeMissing != nil {
				precondition.Missing(t, "the real node: %v", realNodeMissing)
			}
			suspendResumeKeepsTheWorkspace(t, node.profile, node.pool)
		})
	}
}

func suspendResumeKeepsTheWorkspace(t *testing.T, profile string, pool int) {
	sys := startSystemProfiles(t, pooledProfilesYAML(pool, pool), 1)
	api := sys.dial(t, "caller", 0)
	kube := clustertest.Cluster(t).Kube()
	var members []string
	if pool > 0 {
		members = waitPool(t, sys, profile, pool)
	}
	s := ensureReadyOn(t, api, "alice", "conv-suspend", profile)
	if pool > 0 {
		if env := sys.environment(t, s.envRef.GetId()); env.Status.Pod == nil || !slices.Contains(members, env.Status.Pod.Name) {
			t.Fatalf("the environment did not adopt a pool pair (%v): %v", members, env.Status.Pod)
		}
	}
	target := &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: s.binding}
	suspend := func(id string) (*executionv1.Environment, error) {
		r, err := api.SuspendEnvironment(callCtx(t), &executionv1.SuspendEnvironmentRequest{OperationId: id, Target: target})
		return r.GetEnvironment(), err
	}

	if _, err := s.files(callCtx(t), write("keep/notes.txt", "kept across a suspension\n")); err != nil {
		t.Fatalf("write: %v", err)
	}
	oldPod, oldPVC, oldEpoch, oldGen := s.env.GetPodUid(), s.env.GetPvcUid(), s.env.GetEpoch(), s.env.GetGrantGeneration()
	oldRunG, oldEnvG := s.runG, s.envG

	// Refused while the run claim is held, and nothing changed.
	_, err := suspend(op())
	refusedAs(t, "suspend while a run claim is held", err, codes.Aborted, executionv1.ErrorReason_ERROR_REASON_RUN_CLAIM_HELD)
	if _, err := s.files(callCtx(t), read("keep/notes.txt")); err != nil {
		t.Fatalf("the run's grant after a refused suspension: %v", err)
	}
	// A detached command still running when the environment is suspended: the suspension
	// revokes the grants it ran under, so it ends (docs/commands.md "Revocation").
	token := survivorToken()
	if _, err := api.StartCommand(callCtx(t), &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Detach: true, CommandId: "job",
		Command: shell("sleep 300; : " + token)}); err != nil {
		t.Fatalf("start a detached command: %v", err)
	}
	if _, err := api.ReleaseRun(callCtx(t), &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release: %v", err)
	}

	id := op()
	env, err := suspend(id)
	if err != nil {
		t.Fatalf("suspend: %v", err)
	}
	if env.GetGrantGeneration() != oldGen+1 || env.GetReady() {
		t.Fatalf("suspend answered generation %d (was %d), ready %v", env.GetGrantGeneration(), oldGen, env.GetReady())
	}
	if again, err := suspend(id); err != nil || again.GetGrantGeneration() != oldGen+1 {
		t.Fatalf("the suspension replayed: %v %v", again, err)
	}
	// A suspended environment answers a further Suspend as it is: that is how this test
	// watches it without attaching (which would resume it).
	clustertest.Eventually(t, 60*time.Second, "the environment suspended", func() bool {
		env, err := suspend(op())
		if err != nil {
			t.Fatalf("suspend a suspending environment: %v", err)
		}
		return env.GetLifecycle() == executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDED
	})
	pods, err := kube.CoreV1().Pods(sys.ExecutorNamespace()).List(callCtx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if string(p.UID) == oldPod {
			t.Fatalf("the suspended environment's executor %s is still there", p.Name)
		}
	}
	claims, err := kube.CoreV1().PersistentVolumeClaims(sys.ExecutorNamespace()).List(callCtx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	kept := false
	for _, c := range claims.Items {
		kept = kept || string(c.UID) == oldPVC
	}
	if !kept {
		t.Fatal("the workspace claim went with the suspension")
	}

	// Every grant from before is dead: the run grant, and the environment grant.
	oldGrants := func(when string) {
		t.Helper()
		_, err := api.Files(callCtx(t), &executionv1.FilesRequest{RunGrant: oldRunG, Environment: s.envRef, Operation: read("keep/notes.txt")})
		refusedAs(t, when+": a file read with the old run grant", err, codes.Aborted, executionv1.ErrorReason_ERROR_REASON_REVOKED)
		_, err = api.AcquireRun(callCtx(t), &executionv1.AcquireRunRequest{OperationId: op(), EnvironmentGrant: oldEnvG, Environment: s.envRef, RunId: "run-old"})
		refusedAs(t, when+": acquire with the old environment grant", err, codes.Aborted, executionv1.ErrorReason_ERROR_REASON_REVOKED)
	}
	oldGrants("suspended")

	r, err := api.ResumeEnvironment(callCtx(t), &executionv1.ResumeEnvironmentRequest{OperationId: op(), Target: target})
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	if l := r.GetEnvironment().GetLifecycle(); l != executionv1.LifecycleState_LIFECYCLE_STATE_RESUMING {
		t.Fatalf("resume answered %s", l)
	}
	s.waitReady(t)
	if s.env.GetPodUid() == oldPod || s.env.GetPodUid() == "" || s.env.GetEpoch() <= oldEpoch || s.env.GetPvcUid() != oldPVC {
		t.Fatalf("resumed: pod %s (was %s), epoch %d (was %d), claim %s (was %s)", s.env.GetPodUid(), oldPod, s.env.GetEpoch(), oldEpoch, s.env.GetPvcUid(), oldPVC)
	}
	oldGrants("resumed")
	s.acquire(t, "run-2")
	got, err := s.files(callCtx(t), read("keep/notes.txt"))
	if err != nil || string(got.GetRead().GetContent()) != "kept across a suspension\n" {
		t.Fatalf("the workspace after the resume: %q %v", got.GetRead().GetContent(), err)
	}
	// The detached command ended with the suspension and says how: cancelled by the
	// revocation, or — when the executor stopped before a gateway reached it — abandoned.
	if left := processesWith(t, token); len(left) > 0 {
		t.Fatalf("the detached command outlived the suspension: %v", left)
	}
	job, err := api.CommandStatus(callCtx(t), &executionv1.CommandStatusRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "job"})
	if st := job.GetCommand().GetState(); err != nil || (st != executionv1.CommandState_COMMAND_STATE_CANCELLED && st != executionv1.CommandState_COMMAND_STATE_ABANDONED) {
		t.Fatalf("the detached command after the suspension: %v %v", job, err)
	}
	t.Logf("the detached command running at the suspension: %s (%s)", job.GetCommand().GetState(), job.GetCommand().GetMessage())

	// Attaching resumes a suspended environment too.
	if _, err := api.ReleaseRun(callCtx(t), &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release: %v", err)
	}
	if _, err := suspend(op()); err != nil {
		t.Fatalf("suspend again: %v", err)
	}
	clustertest.Eventually(t, 60*time.Second, "suspended again", func() bool {
		env, err := suspend(op())
		return err == nil && env.GetLifecycle() == executionv1.LifecycleState_LIFECYCLE_STATE_SUSPENDED
	})
	s.waitReady(t)
	s.acquire(t, "run-3")
	if got, err := s.files(callCtx(t), read("keep/notes.txt")); err != nil || string(got.GetRead().GetContent()) != "kept across a suspension\n" {
		t.Fatalf("the workspace after attach resumed it: %q %v", got.GetRead().GetContent(), err)
	}
}

// Through the Go SDK: Suspend, then Acquire on the same handle resumes the environment
// (its grant was revoked: it attaches again and waits) and finds the workspace as it was.
func TestSDKSuspendThenAcquireResumes(t *testing.T) {
	sys := startSystem(t, 1)
	c := sys.sdk(t, "caller", 0)
	ctx := clustertest.Context(t, 3*time.Minute)
	env, err := c.Ensure(ctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "bob"}, BindingID: "conv-sdk-suspend", Profile: profiletest.Name})
	if err != nil {
		t.Fatalf("ensure: %v", err)
	}
	run, err := env.Acquire(ctx, client.AcquireOptions{RunID: "turn-1"})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	if _, err := run.WriteFile(ctx, "state.json", []byte(`{"turn":1}`)); err != nil {
		t.Fatalf("write: %v", err)
	}
	if err := env.Suspend(ctx); !errors.Is(err, client.ErrRunClaimHeld) {
		t.Fatalf("suspend with the run held: %v", err)
	}
	if err := run.Close(context.WithoutCancel(ctx)); err != nil {
		t.Fatalf("close the run: %v", err)
	}
	if err := env.Suspend(ctx); err != nil {
		t.Fatalf("suspend: %v", err)
	}
	epoch := env.Status().GetEpoch()
	run, err = env.Acquire(ctx, client.AcquireOptions{RunID: "turn-2"})
	if err != nil {
		t.Fatalf("acquire on the suspended environment: %v", err)
	}
	defer run.Close(context.WithoutCancel(ctx))
	if env.Status().GetEpoch() <= epoch+1 { // the resume's epoch, then the claim's
		t.Fatalf("epoch %d after resume and acquire, was %d", env.Status().GetEpoch(), epoch)
	}
	if got, err := run.ReadFile(ctx, "state.json"); err != nil || string(got) != `{"turn":1}` {
		t.Fatalf("read after the resume: %q %v", got, err)
	}
}
