package integration_test

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// principal is a caller of the matrix: a client, the owner it attests, valid grants to
// present against the victim's environment (of its own environment, or the victim's own,
// stolen), and its capabilities, which decide the answer it must get.
type principal struct {
	name  string
	api   executionv1grpc.ExecutionProviderServiceClient
	owner *executionv1.Owner
	envG  *executionv1.Grant
	runG  *executionv1.Grant
	// attests: the client may attest owners; admin: an administrator (of others' scope).
	attests, admin bool
}

// The authorisation matrix: every RPC, called by every principal that is not the victim's
// owner-and-client (another owner of the same client, another client, a client with no
// capability, an administrator whose scope excludes the victim's creator) against the
// victim's environment and against an absent one. No call may succeed on the victim's
// environment, each answer must equal, code, reason and message, the answer for the absent
// environment, and the victim's environment and workspace are unchanged afterwards.
func TestAuthorisationMatrix(t *testing.T) {
	sys := startSystem(t, 1)
	ctx := callCtx(t)
	victim := ensureReady(t, sys.dial(t, "caller", 0), "alice", "conv-1")
	if _, err := victim.files(ctx, write("secret.txt", "alice's")); err != nil {
		t.Fatal(err)
	}
	// A pending intent, so that a list leaking it is visible.
	if _, err := victim.api.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: op(), Owner: victim.owner,
		Environment: victim.envRef, SourceBindingId: "conv-1", SuccessorBindingId: "conv-next"}); err != nil {
		t.Fatal(err)
	}
	before := victim.latest(t)

	otherOwner := ensureReady(t, sys.dial(t, "caller", 0), "bob", "conv-1")
	otherClient := ensureReady(t, sys.dial(t, otherClient, 0), "alice", "conv-1")
	// Every principal holds valid grants, so that no refusal is the mere absence of one: its
	// own environment's, or the victim's, stolen (bound to the victim's client, which none of
	// them is).
	principals := []principal{
		{"other owner", otherOwner.api, otherOwner.owner, otherOwner.envG, otherOwner.runG, true, false},
		{"other client", otherClient.api, otherClient.owner, otherClient.envG, otherClient.runG, true, false},
		{"no capability, stolen grants", sys.dial(t, plainClient, 0), ownerOf("alice"), victim.envG, victim.runG, false, false},
		{"admin out of scope, stolen grants", sys.dial(t, scopedAdmin, 0), ownerOf("alice"), victim.envG, victim.runG, false, true},
		{"other client, stolen grants", otherClient.api, ownerOf("alice"), victim.envG, victim.runG, true, false},
	}
	absent := &executionv1.EnvironmentRef{Id: "xenv-00000000000000000000", Revision: "00000000-0000-4000-8000-000000000000"}
	epoch, gen := ptr(before.GetEpoch()), ptr(before.GetGrantGeneration())
	pre := &executionv1.AdminPreconditions{Epoch: epoch, GrantGeneration: gen, PodUid: ptr(before.GetPodUid()), PvcUid: ptr(before.GetPvcUid())}

	type call func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error)
	target := func(p principal, ref *executionv1.EnvironmentRef, binding string) *executionv1.ReferenceTarget {
		return &executionv1.ReferenceTarget{Owner: p.owner, Environment: ref, BindingId: binding}
	}
	read := &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("secret.txt")}}}
	rpcs := map[string]call{
		"AttachEnvironment": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: p.owner, BindingId: "conv-1", Environment: ref})
		},
		"ReleaseReference": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.ReleaseReference(ctx, &executionv1.ReleaseReferenceRequest{OperationId: op(), Target: target(p, ref, "conv-1")})
		},
		"ReserveSuccessor": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: op(), Owner: p.owner, Environment: ref,
				SourceBindingId: "conv-1", SuccessorBindingId: "conv-stolen"})
		},
		"CommitReference": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.CommitReference(ctx, &executionv1.CommitReferenceRequest{OperationId: op(), Target: target(p, ref, "conv-next")})
		},
		"AbortReference": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.AbortReference(ctx, &executionv1.AbortReferenceRequest{OperationId: op(), Target: target(p, ref, "conv-next")})
		},
		"PrepareReferenceDelete": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.PrepareReferenceDelete(ctx, &executionv1.PrepareReferenceDeleteRequest{OperationId: op(), Target: target(p, ref, "conv-1")})
		},
		"ConfirmReferenceDelete": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.ConfirmReferenceDelete(ctx, &executionv1.ConfirmReferenceDeleteRequest{OperationId: op(), Target: target(p, ref, "conv-1")})
		},
		"CancelReferenceDelete": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.CancelReferenceDelete(ctx, &executionv1.CancelReferenceDeleteRequest{OperationId: op(), Target: target(p, ref, "conv-1")})
		},
		"AcquireRun": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.AcquireRun(ctx, &executionv1.AcquireRunRequest{OperationId: op(), EnvironmentGrant: p.envG, Environment: ref, RunId: "run-x"})
		},
		"RenewRun": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.RenewRun(ctx, &executionv1.RenewRunRequest{OperationId: op(), RunGrant: p.runG, Environment: ref})
		},
		"ReleaseRun": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.ReleaseRun(ctx, &executionv1.ReleaseRunRequest{OperationId: op(), RunGrant: p.runG, Environment: ref})
		},
		"Files": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.Files(ctx, &executionv1.FilesRequest{RunGrant: p.runG, Environment: ref, Operation: read})
		},
		"WriteFileStream": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			st, err := p.api.WriteFileStream(ctx)
			if err != nil {
				return nil, err
			}
			_ = st.Send(&executionv1.WriteFileStreamRequest{RunGrant: p.runG, Environment: ref, Size: 6, Content: []byte("stolen"),
				Write: &executionv1.WriteFile{Path: []byte("secret.txt"), Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE}})
			return st.CloseAndRecv()
		},
		"ReadFileStream": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			st, err := p.api.ReadFileStream(ctx, &executionv1.ReadFileStreamRequest{RunGrant: p.runG, Environment: ref, Read: read.GetRead()})
			if err != nil {
				return nil, err
			}
			for {
				m, err := st.Recv()
				if err != nil || m.GetResult() != nil {
					return m, err
				}
			}
		},
		"StartCommand": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: p.runG, Environment: ref, Command: shell("cat secret.txt")})
		},
		"CommandStatus": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: p.runG, Environment: ref, CommandId: "c-1"})
		},
		"CancelCommand": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.CancelCommand(ctx, &executionv1.CancelCommandRequest{RunGrant: p.runG, Environment: ref, CommandId: "c-1"})
		},
		"StartCommand detached": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: p.runG, Environment: ref, Command: shell("cat secret.txt"), Detach: true})
		},
		"RunCommand": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			st, err := p.api.RunCommand(ctx, &executionv1.RunCommandRequest{RunGrant: p.runG, Environment: ref, Command: shell("cat secret.txt")})
			if err != nil {
				return nil, err
			}
			return st.Recv()
		},
		"WatchCommand": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			st, err := p.api.WatchCommand(ctx, &executionv1.WatchCommandRequest{RunGrant: p.runG, Environment: ref, CommandId: "c-1"})
			if err != nil {
				return nil, err
			}
			return st.Recv()
		},
		"ListCommands": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.ListCommands(ctx, &executionv1.ListCommandsRequest{RunGrant: p.runG, Environment: ref})
		},
		"RetireEnvironment": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.RetireEnvironment(ctx, &executionv1.RetireEnvironmentRequest{OperationId: op(), Environment: ref, Preconditions: pre, Reason: "x"})
		},
		"ReplaceExecutor": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.ReplaceExecutor(ctx, &executionv1.ReplaceExecutorRequest{OperationId: op(), Environment: ref, Preconditions: pre, Reason: "x"})
		},
		"RevokeEnvironment": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.RevokeEnvironment(ctx, &executionv1.RevokeEnvironmentRequest{OperationId: op(), Environment: ref, Preconditions: pre, Reason: "x"})
		},
		"RecoverEnvironment": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.RecoverEnvironment(ctx, &executionv1.RecoverEnvironmentRequest{OperationId: op(), Environment: ref, Preconditions: pre, Reason: "x"})
		},
		"MigrateEnvironment": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.MigrateEnvironment(ctx, &executionv1.MigrateEnvironmentRequest{OperationId: op(), Environment: ref, Preconditions: pre, TargetSchemaVersion: 1})
		},
		"DeleteRetiredEnvironment": func(ctx context.Context, p principal, ref *executionv1.EnvironmentRef) (proto.Message, error) {
			return p.api.DeleteRetiredEnvironment(ctx, &executionv1.DeleteRetiredEnvironmentRequest{OperationId: op(), Environment: ref, Preconditions: pre, Reason: "x"})
		},
	}
	answer := func(err error) string {
		st := status.Convert(err)
		return fmt.Sprintf("%s/%s: %s", st.Code(), apierror.Reason(err), st.Message())
	}
	// The answer each principal must get, for the reason it names: a call presenting a valid
	// grant, of another environment or of another client, meets an environment that is not
	// the caller's — NOT_FOUND, exactly as if absent; an administrative call without the
	// capability is PERMISSION_DENIED before any lookup, with it but out of scope NOT_FOUND;
	// an owner-scoped call by a client that may not attest owners is PERMISSION_DENIED, by
	// one that may NOT_FOUND (the owner's references are not there).
	grantRPCs := map[string]bool{"AcquireRun": true, "RenewRun": true, "ReleaseRun": true, "Files": true, "WriteFileStream": true, "ReadFileStream": true,
		"StartCommand": true, "CommandStatus": true, "CancelCommand": true,
		"StartCommand detached": true, "RunCommand": true, "WatchCommand": true, "ListCommands": true}
	adminRPCs := map[string]bool{"RetireEnvironment": true, "ReplaceExecutor": true, "RevokeEnvironment": true, "RecoverEnvironment": true,
		"MigrateEnvironment": true, "DeleteRetiredEnvironment": true}
	expected := func(p principal, rpc string) codes.Code {
		switch {
		case grantRPCs[rpc]:
			return codes.NotFound
		case adminRPCs[rpc] && !p.admin, !adminRPCs[rpc] && !p.attests:
			return codes.PermissionDenied
		}
		return codes.NotFound
	}
	calls, successes := 0, 0
	for _, p := range principals {
		for name, rpc := range rpcs {
			calls++
			got, err := rpc(ctx, p, victim.envRef)
			if err == nil {
				successes++
				t.Errorf("%s × %s: succeeded on the victim's environment: %v", p.name, name, got)
				continue
			}
			if got, want := status.Code(err), expected(p, name); got != want {
				t.Errorf("%s × %s: %s, want %s", p.name, name, answer(err), want)
			}
			_, absentErr := rpc(ctx, p, absent)
			if answer(err) != answer(absentErr) {
				t.Errorf("%s × %s: distinguishable from absent:\n  victim: %s\n  absent: %s", p.name, name, answer(err), answer(absentErr))
			}
		}
		// Ensure and ListReferenceIntents answer within the caller's own scope: never the
		// victim's environment, never its intents.
		e, err := p.api.EnsureEnvironment(ctx, &executionv1.EnsureEnvironmentRequest{OperationId: op(), Owner: p.owner, BindingId: "conv-1", Profile: profiletest.Name})
		if err == nil && e.GetEnvironment().GetRef().GetId() == victim.envRef.GetId() {
			successes++
			t.Errorf("%s × EnsureEnvironment: answered with the victim's environment", p.name)
		}
		// Listing for its owner never shows another owner's intents; listing client-wide (the
		// client's own crash-recovery feed, no owner named) never shows another client's.
		lists := []*executionv1.ListReferenceIntentsRequest{{Owner: p.owner}}
		if p.name != "other owner" {
			lists = append(lists, &executionv1.ListReferenceIntentsRequest{})
		}
		for _, req := range lists {
			l, err := p.api.ListReferenceIntents(ctx, req)
			if err != nil && status.Code(err) != codes.PermissionDenied {
				// Not a refusal: nothing was listed, so nothing was checked.
				t.Errorf("%s × ListReferenceIntents(%v): %v", p.name, req, err)
			}
			for _, it := range l.GetIntents() {
				if it.GetEnvironment().GetId() == victim.envRef.GetId() {
					successes++
					t.Errorf("%s × ListReferenceIntents(%v): listed the victim's intent (%v)", p.name, req, err)
				}
			}
			calls++
		}
		calls++
	}
	t.Logf("%d calls by %d principals, %d unauthorised successes", calls, len(principals), successes)

	after := victim.latest(t)
	if !proto.Equal(before, after) {
		t.Fatalf("the victim's environment changed:\nbefore %v\nafter  %v", before, after)
	}
	if r, err := victim.files(ctx, &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte("secret.txt")}}}); err != nil ||
		string(r.GetRead().GetContent()) != "alice's" {
		t.Fatalf("the victim's workspace changed: %v %v", r, err)
	}
}
