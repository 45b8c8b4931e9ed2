package integration_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/precondition"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

var opSeq atomic.Int64

// op returns a fresh operation id.
func op() string { return fmt.Sprintf("op-%d-%d", time.Now().UnixNano(), opSeq.Add(1)) }

func ownerOf(subject string) *executionv1.Owner {
	return &executionv1.Owner{Issuer: "https://idp.example", Subject: subject}
}

// session is one binding's environment as a caller sees it.
type session struct {
	api     executionv1grpc.ExecutionProviderServiceClient
	owner   *executionv1.Owner
	binding string
	env     *executionv1.Environment
	envRef  *executionv1.EnvironmentRef
	envG    *executionv1.Grant
	runG    *executionv1.Grant
	run     *executionv1.RunClaim
}

// ensureReady ensures the binding's environment, waits until it is ready and acquires a run.
func ensureReady(t *testing.T, api executionv1grpc.ExecutionProviderServiceClient, subject, binding string) *session {
	t.Helper()
	return ensureReadyOn(t, api, subject, binding, profiletest.Name)
}

// ensureReadyOn is ensureReady with the environment built from profile.
func ensureReadyOn(t *testing.T, api executionv1grpc.ExecutionProviderServiceClient, subject, binding, profile string) *session {
	t.Helper()
	s := &session{api: api, owner: ownerOf(subject), binding: binding}
	resp, err := api.EnsureEnvironment(callCtx(t), &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: s.owner, BindingId: binding, Profile: profile})
	if err != nil {
		t.Fatalf("ensure: %v", err)
	}
	s.env, s.envRef, s.envG = resp.GetEnvironment(), resp.GetEnvironment().GetRef(), resp.GetEnvironmentGrant()
	if _, err := api.CommitReference(callCtx(t), &executionv1.CommitReferenceRequest{OperationId: op(),
		Target: &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: binding}}); err != nil {
		t.Fatalf("commit the binding's reference: %v", err)
	}
	s.waitReady(t)
	s.acquire(t, "run-1")
	return s
}

func (s *session) waitReady(t *testing.T) {
	t.Helper()
	clustertest.Eventually(t, 60*time.Second, "environment ready", func() bool {
		a, err := s.api.AttachEnvironment(callCtx(t), &executionv1.AttachEnvironmentRequest{Owner: s.owner, BindingId: s.binding, Environment: s.envRef})
		if err != nil {
			t.Fatalf("attach: %v", err)
		}
		s.env, s.envG = a.GetEnvironment(), a.GetEnvironmentGrant()
		return s.env.GetReady()
	})
}

func (s *session) acquire(t *testing.T, runID string) {
	t.Helper()
	r, err := s.api.AcquireRun(callCtx(t), &executionv1.AcquireRunRequest{OperationId: op(), EnvironmentGrant: s.envG, Environment: s.envRef, RunId: runID})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	s.env, s.run, s.runG = r.GetEnvironment(), r.GetRun(), r.GetRunGrant()
}

func (s *session) files(ctx context.Context, o *executionv1.FileOperation) (*executionv1.FileResult, error) {
	r, err := s.api.Files(ctx, &executionv1.FilesRequest{RunGrant: s.runG, Environment: s.envRef, Operation: o})
	return r.GetResult(), err
}

func (s *session) command(ctx context.Context, spec *executionv1.CommandSpec) (*executionv1.CommandResult, error) {
	r, err := s.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Command: spec})
	return r.GetResult(), err
}

func write(path, content string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(path), Content: []byte(content), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE, CreateParents: true}}}
}

func read(path string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(path)}}}
}

func shell(script string) *executionv1.CommandSpec {
	return &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: script}}
}

// wantCode fails unless err is a status with code and reason.
func wantCode(t *testing.T, what string, err error, code codes.Code, reason string) {
	t.Helper()
	if status.Code(err) != code || apierror.Reason(err) != reason {
		t.Fatalf("%s: got %v (reason %q), want %s/%s", what, err, apierror.Reason(err), code, reason)
	}
}

// Every RPC's happy path through a gateway process, against the controller process and the
// real helper — in a KWOK executor (the helper a process of this machine) and in a container
// of the example executor image on the real node: ensure → ready → acquire → every file
// operation → a command reading a file → renew → references → release → retire →
// delete-retired.
//
// Each runs twice: with helper sessions (the default: one exec stream per executor Pod
// carries the data calls) and with --sessions=false (one exec per operation); the
// gateway's metrics prove which way the calls went.
func TestSessionEveryRPC(t *testing.T) {
	for _, node := range []struct{ name, profile string }{{"kwok", profiletest.Name}, {"real-node", realNodeProfile}} {
		for _, mode := range []struct {
			name string
			args []string
		}{{"sessions", []string{"--sessions=true"}}, {"per-exec", []string{"--sessions=false"}}} {
			t.Run(node.name+"/"+mode.name, func(t *testing.T) {
				if node.profile == realNodeProfile && realNodeMissing != nil {
					precondition.Missing(t, "the real node: %v", realNodeMissing)
				}
				sys := startSystem(t, 1, mode.args...)
				sessionEveryRPC(t, sys, node.profile)
				g := sys.gateways[0]
				opened, avoided := g.metric(t, "execplane_gateway_sessions_opened_total"), g.metric(t, "execplane_gateway_exec_upgrades_avoided_total")
				switch {
				case mode.name == "sessions" && (opened < 2 || avoided < 10):
					// Two at least: one per executor Pod (the replacement's is new).
					t.Fatalf("with sessions: %v opened, %v exec upgrades avoided", opened, avoided)
				case mode.name == "per-exec" && (opened != 0 || avoided != 0):
					t.Fatalf("with sessions off: %v opened, %v exec upgrades avoided", opened, avoided)
				}
				t.Logf("sessions opened %v, exec upgrades avoided %v", opened, avoided)
			})
		}
	}
}

func sessionEveryRPC(t *testing.T, sys *system, profile string) {
	api := sys.dial(t, "caller", 0)
	admin := sys.dial(t, "admin", 0)
	ctx := callCtx(t)

	vp, err := api.ValidateProfile(ctx, &executionv1.ValidateProfileRequest{Profile: profile})
	if err != nil || vp.GetProfile().GetMaxFileBytes() != 1<<20 || len(vp.GetProfile().GetDigest()) != 71 {
		t.Fatalf("validate profile: %v %v", vp, err)
	}
	_, err = api.ValidateProfile(ctx, &executionv1.ValidateProfileRequest{Profile: profile, ExpectedDigest: vp.GetProfile().GetDigest()})
	if err != nil {
		t.Fatalf("validate profile with its digest: %v", err)
	}

	s := ensureReadyOn(t, api, "alice", "conv-1", profile)
	if s.run.GetEpoch() != s.env.GetEpoch() || s.runG.GetToken() == "" {
		t.Fatalf("run %v on environment epoch %d", s.run, s.env.GetEpoch())
	}

	// Files: every operation.
	steps := []struct {
		name string
		op   *executionv1.FileOperation
		ok   func(*executionv1.FileResult) bool
	}{
		{"write", write("src/hello.txt", "hello, workspace\n"), func(r *executionv1.FileResult) bool { return r.GetWrite().GetInfo().GetVersion() != "" }},
		{"read", read("src/hello.txt"), func(r *executionv1.FileResult) bool { return string(r.GetRead().GetContent()) == "hello, workspace\n" }},
		{"stat", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte("src/hello.txt")}}},
			func(r *executionv1.FileResult) bool { return r.GetStat().GetInfo().GetSize() == 17 }},
		{"mkdir", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Mkdir{Mkdir: &executionv1.MakeDirectory{Path: []byte("out/a"), Parents: true}}},
			func(r *executionv1.FileResult) bool {
				return r.GetMkdir().GetInfo().GetType() == executionv1.FileType_FILE_TYPE_DIRECTORY
			}},
		{"copy", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Copy{Copy: &executionv1.CopyPath{From: []byte("src/hello.txt"), To: []byte("out/copy.txt")}}},
			func(r *executionv1.FileResult) bool { return r.GetCopy().GetCopiedBytes() == 17 }},
		{"rename", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Rename{Rename: &executionv1.RenamePath{From: []byte("out/copy.txt"), To: []byte("out/moved.txt")}}},
			func(r *executionv1.FileResult) bool { return r.GetRename().GetInfo() != nil }},
		{"list", &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte("out")}}},
			func(r *executionv1.FileResult) bool { return len(r.GetList().GetEntries()) == 2 }},
		{"glob", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Glob{Glob: &executionv1.Glob{Pattern: []byte("**/*.txt")}}},
			func(r *executionv1.FileResult) bool { return len(r.GetGlob().GetPaths()) == 2 }},
		{"grep", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Grep{Grep: &executionv1.Grep{Pattern: "work.pace"}}},
			func(r *executionv1.FileResult) bool { return len(r.GetGrep().GetMatches()) == 2 }},
		{"remove", &executionv1.FileOperation{Operation: &executionv1.FileOperation_Remove{Remove: &executionv1.RemovePath{Path: []byte("out"), Recursive: true}}},
			func(r *executionv1.FileResult) bool { return r.GetRemove().GetRemoved() == 3 }},
	}
	for _, st := range steps {
		r, err := s.files(ctx, st.op)
		if err != nil || !st.ok(r) {
			t.Fatalf("%s: %v %v", st.name, r, err)
		}
	}
	streamFiles(t, s)

	// A command reading the file.
	res, err := s.command(ctx, shell("wc -c < src/hello.txt; cat src/hello.txt >&2; exit 3"))
	if err != nil || res.GetState() != executionv1.CommandState_COMMAND_STATE_FAILED || res.GetExitCode() != 3 ||
		string(res.GetStdout().GetHead()) != "17\n" || string(res.GetStderr().GetHead()) != "hello, workspace\n" || res.GetReceipt() == "" {
		t.Fatalf("command: %v %v", res, err)
	}

	durableCommands(t, s, sys.perExec)
	terminals(t, s)

	// Renew: a new grant for the same claim, which keeps working.
	rn, err := api.RenewRun(ctx, &executionv1.RenewRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef, Ttl: durationpb.New(2 * time.Minute)})
	if err != nil || rn.GetRun().GetClaimId() != s.run.GetClaimId() || !rn.GetRun().GetExpiresAt().AsTime().After(s.run.GetExpiresAt().AsTime()) {
		t.Fatalf("renew: %v %v", rn, err)
	}
	s.runG = rn.GetRunGrant()
	if _, err := s.files(ctx, read("src/hello.txt")); err != nil {
		t.Fatalf("read with the renewed grant: %v", err)
	}

	// References: a successor reserved, committed, then released through prepare/confirm.
	rs, err := api.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: op(), Owner: s.owner, Environment: s.envRef,
		SourceBindingId: "conv-1", SuccessorBindingId: "conv-2"})
	if err != nil || rs.GetReference().GetState() != executionv1.ReferenceState_REFERENCE_STATE_RESERVED_SUCCESSOR {
		t.Fatalf("reserve successor: %v %v", rs, err)
	}
	// The intents list is read from the leader's cache: the reservation shows up within its
	// watch latency.
	clustertest.Eventually(t, 5*time.Second, "the reservation listed as an intent", func() bool {
		intents, err := api.ListReferenceIntents(ctx, &executionv1.ListReferenceIntentsRequest{Owner: s.owner})
		if err != nil {
			t.Fatalf("intents: %v", err)
		}
		return len(intents.GetIntents()) == 1 && intents.GetIntents()[0].GetReference().GetBindingId() == "conv-2"
	})
	target := &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: "conv-2"}
	if _, err := api.CommitReference(ctx, &executionv1.CommitReferenceRequest{OperationId: op(), Target: target}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	pd, err := api.PrepareReferenceDelete(ctx, &executionv1.PrepareReferenceDeleteRequest{OperationId: op(), Target: target})
	if err != nil || pd.GetReference().GetState() != executionv1.ReferenceState_REFERENCE_STATE_PENDING_DELETE {
		t.Fatalf("prepare delete: %v %v", pd, err)
	}
	if _, err := api.CancelReferenceDelete(ctx, &executionv1.CancelReferenceDeleteRequest{OperationId: op(), Target: target}); err != nil {
		t.Fatalf("cancel delete: %v", err)
	}
	if _, err := api.PrepareReferenceDelete(ctx, &executionv1.PrepareReferenceDeleteRequest{OperationId: op(), Target: target}); err != nil {
		t.Fatalf("prepare delete again: %v", err)
	}
	if _, err := api.ConfirmReferenceDelete(ctx, &executionv1.ConfirmReferenceDeleteRequest{OperationId: op(), Target: target}); err != nil {
		t.Fatalf("confirm delete: %v", err)
	}
	// A pending reference aborted.
	if _, err := api.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: op(), Owner: s.owner, Environment: s.envRef,
		SourceBindingId: "conv-1", SuccessorBindingId: "conv-3"}); err != nil {
		t.Fatalf("reserve: %v", err)
	}
	if _, err := api.AbortReference(ctx, &executionv1.AbortReferenceRequest{OperationId: op(),
		Target: &executionv1.ReferenceTarget{Owner: s.owner, Environment: s.envRef, BindingId: "conv-3"}}); err != nil {
		t.Fatalf("abort: %v", err)
	}

	// A detached command that will still run when the executor is replaced.
	token := survivorToken()
	if _, err := api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: s.runG, Environment: s.envRef, Detach: true, CommandId: "survivor",
		Command: shell("echo before-replace; sleep 300; : " + token)}); err != nil {
		t.Fatalf("start survivor: %v", err)
	}
	clustertest.Eventually(t, 10*time.Second, "the survivor runs on the node", func() bool { return len(processesWith(t, token)) > 0 })

	// Release the run; its grant is dead.
	if _, err := api.ReleaseRun(ctx, &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release run: %v", err)
	}
	_, err = s.files(ctx, read("src/hello.txt"))
	wantCode(t, "read after release", err, codes.Aborted, "STALE_EPOCH")

	// Administration: migrate (already current), revoke, replace, retire, delete-retired.
	a, err := admin.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: s.owner, BindingId: s.binding, Environment: s.envRef})
	if status.Code(err) != codes.PermissionDenied && status.Code(err) != codes.NotFound {
		t.Fatalf("an administrator without MayAttestOwner attached: %v %v", a, err)
	}
	env := s.latest(t)
	mg, err := admin.MigrateEnvironment(ctx, &executionv1.MigrateEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{Epoch: ptr(env.GetEpoch())}, TargetSchemaVersion: 1})
	if err != nil || mg.GetMigrated() {
		t.Fatalf("migrate: %v %v", mg, err)
	}
	// The replacement first: a revoke would end the detached command itself (below, and
	// TestRevocationEndsDetachedCommands).
	rp, err := admin.ReplaceExecutor(ctx, &executionv1.ReplaceExecutorRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{Epoch: ptr(env.GetEpoch()), PodUid: ptr(env.GetPodUid())}, Reason: "test"})
	if err != nil {
		t.Fatalf("replace: %v", err)
	}
	clustertest.Eventually(t, 60*time.Second, "the replacement done and ready", func() bool {
		env = s.latest(t)
		return env.GetReady() && env.GetEpoch() > rp.GetEnvironment().GetEpoch()
	})
	rv, err := admin.RevokeEnvironment(ctx, &executionv1.RevokeEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{GrantGeneration: ptr(env.GetGrantGeneration())}, Reason: "test"})
	if err != nil || rv.GetEnvironment().GetGrantGeneration() != env.GetGrantGeneration()+1 {
		t.Fatalf("revoke: %v %v", rv, err)
	}
	env = rv.GetEnvironment()
	s.latest(t) // an environment grant of the new generation
	// The workspace survived the replacement.
	s.acquire(t, "run-2")
	if r, err := s.files(ctx, read("src/hello.txt")); err != nil || string(r.GetRead().GetContent()) != "hello, workspace\n" {
		t.Fatalf("read after replace: %v %v", r, err)
	}
	// The detached command died with its Pod; the next holder finds it recorded as ended by
	// the replacement, its output kept.
	if left := processesWith(t, token); len(left) > 0 {
		t.Fatalf("the replaced executor's command still runs: %v", left)
	}
	sv, err := api.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: s.runG, Environment: s.envRef, CommandId: "survivor"})
	if err != nil || sv.GetCommand().GetState() != executionv1.CommandState_COMMAND_STATE_ABANDONED || sv.GetCommand().GetRunId() != "run-1" ||
		len(sv.GetOutput()) != 1 || string(sv.GetOutput()[0].GetData()) != "before-replace\n" {
		t.Fatalf("the survivor after the replacement: %v %v", sv, err)
	}
	if _, err := api.ReleaseRun(ctx, &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: s.runG, Environment: s.envRef}); err != nil {
		t.Fatalf("release run: %v", err)
	}
	env = s.latest(t)
	if _, err := admin.RetireEnvironment(ctx, &executionv1.RetireEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{Epoch: ptr(env.GetEpoch())}, Reason: "test"}); err != nil {
		t.Fatalf("retire: %v", err)
	}
	clustertest.Eventually(t, 60*time.Second, "retired", func() bool {
		env = s.latest(t)
		return env.GetLifecycle() == executionv1.LifecycleState_LIFECYCLE_STATE_RETIRED
	})
	if _, err := admin.DeleteRetiredEnvironment(ctx, &executionv1.DeleteRetiredEnvironmentRequest{OperationId: op(), Environment: s.envRef,
		Preconditions: &executionv1.AdminPreconditions{PvcUid: ptr(env.GetPvcUid())}, Reason: "test"}); err != nil {
		t.Fatalf("delete retired: %v", err)
	}
	clustertest.Eventually(t, 60*time.Second, "the environment gone", func() bool {
		_, err := api.AttachEnvironment(callCtx(t), &executionv1.AttachEnvironmentRequest{Owner: s.owner, BindingId: s.binding, Environment: s.envRef})
		return status.Code(err) == codes.NotFound
	})
}

// latest is the environment as its owner's client sees it now.
func (s *session) latest(t *testing.T) *executionv1.Environment {
	t.Helper()
	a, err := s.api.AttachEnvironment(callCtx(t), &executionv1.AttachEnvironmentRequest{Owner: s.owner, BindingId: s.binding, Environment: s.envRef})
	if err != nil {
		t.Fatalf("attach: %v", err)
	}
	s.envG = a.GetEnvironmentGrant()
	return a.GetEnvironment()
}

func ptr[T any](v T) *T { return &v }
