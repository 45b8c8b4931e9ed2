package gateway

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/ident"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// dataRPC is one data call, with a well-formed operation.
type dataRPC struct {
	name string
	call func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error
	// admitted is the answer of a call that passed admission (the executor answering OK),
	// after execs executor calls.
	admitted answer
	execs    int
	// quota: a call that passed admission asks the controller to count it against its
	// quotas (a detached start), one control call; nothing else on the data path does.
	quota bool
}

func statOp(path string) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Stat{Stat: &executionv1.StatFile{Path: []byte(path)}}}
}

func argv(args ...string) *executionv1.CommandSpec {
	return &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: args}}}
}

var dataRPCs = []dataRPC{
	{"Files", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error {
		_, err := h.Files(ctx, &executionv1.FilesRequest{RunGrant: g, Environment: ref, Operation: statOp("a.txt")})
		return err
	}, ok, 1, false},
	{"StartCommand", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error {
		_, err := h.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: g, Environment: ref, Command: argv("true")})
		return err
	}, ok, 1, false},
	{"CommandStatus", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error {
		_, err := h.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: g, Environment: ref, CommandId: "cmd-1"})
		return err
	}, ok, 1, false},
	{"CancelCommand", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error {
		_, err := h.CancelCommand(ctx, &executionv1.CancelCommandRequest{RunGrant: g, Environment: ref, CommandId: "cmd-1"})
		return err
	}, ok, 1, false},
	{"StartCommand detached", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error {
		_, err := h.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: g, Environment: ref, Command: argv("true"), Detach: true, CommandId: "cmd-1"})
		return err
	}, ok, 1, true},
	{"ListCommands", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) error {
		_, err := h.ListCommands(ctx, &executionv1.ListCommandsRequest{RunGrant: g, Environment: ref})
		return err
	}, ok, 1, false},
}

// admissionCase is one class of refusal of a data call's grant, environment or claim.
type admissionCase struct {
	name string
	// ctx is the call's context (callerCtx when nil).
	ctx func(*testing.T) context.Context
	// grant is the presented grant (a run grant of the current claim when nil).
	grant func(*testing.T, *keys) *executionv1.Grant
	// ref is the environment named (testRef when nil).
	ref   func() *executionv1.EnvironmentRef
	setup setup
	// want is the answer; admitted means the call passed (dataRPC.admitted).
	want     answer
	admitted bool
	// msg, when set, is the exact message.
	msg string
}

// grantCases are the refusals shared by every call that presents a run grant (the data
// calls, RenewRun and ReleaseRun).
func grantCases() []admissionCase {
	return []admissionCase{
		{name: "no client in context", ctx: noClientCtx, want: unauth},
		{name: "no grant", grant: func(*testing.T, *keys) *executionv1.Grant { return nil }, want: invalid},
		{name: "empty token", grant: func(*testing.T, *keys) *executionv1.Grant { return &executionv1.Grant{} }, want: invalid},
		{name: "no environment", ref: func() *executionv1.EnvironmentRef { return nil }, want: invalid},
		{name: "environment id not a DNS label", ref: func() *executionv1.EnvironmentRef {
			return &executionv1.EnvironmentRef{Id: "Xenv_A", Revision: testUID}
		}, want: invalid},
		{name: "revision not a UUID", ref: func() *executionv1.EnvironmentRef {
			return &executionv1.EnvironmentRef{Id: testEnv, Revision: "not-a-uuid"}
		}, want: invalid},
		{name: "revision not canonical", ref: func() *executionv1.EnvironmentRef {
			return &executionv1.EnvironmentRef{Id: testEnv, Revision: strings.ToUpper(testUID)}
		}, want: invalid},
		{name: "token not a JWS", grant: func(*testing.T, *keys) *executionv1.Grant { return &executionv1.Grant{Token: "not.a-token"} }, want: grantInvalid},
		{name: "token over the size bound", grant: func(*testing.T, *keys) *executionv1.Grant {
			return &executionv1.Grant{Token: strings.Repeat("a", grant.MaxTokenBytes+1)}
		}, want: grantInvalid},
		{name: "signed by another key", grant: func(t *testing.T, k *keys) *executionv1.Grant { return k.forged(t) }, want: grantInvalid},
		{name: "expired grant", grant: func(t *testing.T, k *keys) *executionv1.Grant { return k.expired(t) }, want: grantInvalid},
		{name: "environment grant where a run grant is needed", grant: func(t *testing.T, k *keys) *executionv1.Grant { return k.env(t, nil) }, want: grantInvalid},
		{name: "another client's grant", grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.run(t, func(b *grant.RunBinding) { b.Client = otherID })
		}, want: grantInvalid},
		{name: "another owner's grant", grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.run(t, func(b *grant.RunBinding) { b.OwnerHash = strings.Repeat("cd", 32) })
		}, want: grantInvalid},
		{name: "grant for another environment", grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.run(t, func(b *grant.RunBinding) { b.Environment = ident.EnvironmentRef{Name: otherEnv, UID: otherUID} })
		}, want: notFound, msg: "not found"},
		{name: "another client's environment", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Spec.ClientHash = ident.ClientHash(otherID)
		}}, want: notFound, msg: "not found"},
		{name: "absent environment", setup: setup{absent: true}, want: notFound, msg: "not found"},
		{name: "re-created environment", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.UID = otherUID }}, want: notFound, msg: "not found"},
		{name: "view not synced", setup: setup{viewErr: errNotSynced}, want: unavailable},
		{name: "view not proven current", setup: setup{stale: errStale}, want: unavailable},
		{name: "grant generation newer than the view", grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.run(t, func(b *grant.RunBinding) { b.GrantGeneration = testGen + 1 })
		}, want: unavailable},
		{name: "epoch newer than the view", grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.run(t, func(b *grant.RunBinding) { b.Epoch = testEpoch + 1 })
		}, want: unavailable},
		{name: "revoked generation", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.GrantGeneration++ }}, want: revoked},
		{name: "stale epoch", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.Epoch++ }}, want: stale},
		{name: "released claim", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.ActiveRun = nil }}, want: stale},
		{name: "claim taken by another run", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.ActiveRun.RunID, e.Status.ActiveRun.ClaimID = "run-2", "claim-2"
		}}, want: stale},
		{name: "claim re-acquired by the same run", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.ActiveRun.ClaimID = "claim-2"
		}}, want: stale},
		{name: "another binding's claim", grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.run(t, func(b *grant.RunBinding) { b.BindingID = "binding-2" })
		}, want: stale},
		{name: "security material unavailable", setup: setup{noMaterial: true}, want: unavailable},
	}
}

// admissionCases are grantCases plus what a data call checks beyond the grant.
func admissionCases() []admissionCase {
	return append(grantCases(), []admissionCase{
		{name: "expired claim", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.ActiveRun.ExpiresAt = metav1.NewTime(time.Now().Add(-time.Minute))
		}}, want: stale},
		{name: "fenced", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.FenceState = v1alpha1.FenceUnknown }}, want: fenced},
		{name: "not ready", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.Conditions[0].Status = metav1.ConditionFalse
		}}, want: notReady},
		{name: "being deleted", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			now := metav1.Now()
			e.DeletionTimestamp = &now
		}}, want: notReady},
		{name: "replacement in progress", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.LifecycleOperation = &v1alpha1.LifecycleOperation{Kind: v1alpha1.LifecycleReplace, Phase: v1alpha1.PhaseStoppingExecutor, OperationID: "op-1"}
		}}, want: notReady},
		{name: "retired", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.LifecycleOperation = &v1alpha1.LifecycleOperation{Kind: v1alpha1.LifecycleRetire, Phase: v1alpha1.PhaseCompleted, OperationID: "op-1"}
		}}, want: notReady},
		{name: "reference pending delete", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Status.References[0].State = v1alpha1.ReferencePendingDelete
		}}, want: notReady},
		{name: "binding holds no reference", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.References = nil }}, want: notReady},
		{name: "no executor Pod", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.Pod = nil }}, want: notReady},
		{name: "profile withdrawn", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Spec.Profile = "withdrawn" }}, want: notReady},
		{name: "admitted", admitted: true},
	}...)
}

func (c admissionCase) build(t *testing.T, k *keys) (context.Context, *executionv1.Grant, *executionv1.EnvironmentRef) {
	ctx, g, ref := callerCtx, k.run(t, nil), testRef()
	if c.ctx != nil {
		ctx = c.ctx
	}
	if c.grant != nil {
		g = c.grant(t, k)
	}
	if c.ref != nil {
		ref = c.ref()
	}
	return ctx(t), g, ref
}

func TestHandlerDataAdmission(t *testing.T) {
	k := newKeys(t)
	for _, rpc := range dataRPCs {
		t.Run(rpc.name, func(t *testing.T) {
			for _, c := range admissionCases() {
				t.Run(c.name, func(t *testing.T) {
					w := newWorld(t, k, c.setup)
					ctx, g, ref := c.build(t, k)
					err := rpc.call(ctx, w.h, g, ref)
					want, execs, controls := c.want, 0, 0
					if c.admitted {
						want, execs = rpc.admitted, rpc.execs
						if rpc.quota {
							controls = 1
						}
					}
					expect(t, err, want, c.msg)
					w.execCalls(t, execs)
					w.controlCalls(t, controls)
				})
			}
		})
	}
}

// TestHandlerNotFoundIsIndistinguishable: whether an environment is absent, re-created,
// another client's or simply not the one the grant names, the caller reads the same status,
// details included.
func TestHandlerNotFoundIsIndistinguishable(t *testing.T) {
	k := newKeys(t)
	var first *status.Status
	for _, c := range admissionCases() {
		if c.want != notFound {
			continue
		}
		for _, rpc := range dataRPCs {
			w := newWorld(t, k, c.setup)
			ctx, g, ref := c.build(t, k)
			got := status.Convert(apierror.Status(rpc.call(ctx, w.h, g, ref), testReqID))
			if first == nil {
				first = got
				continue
			}
			if diff := cmp.Diff(first.Proto(), got.Proto(), protocmp.Transform()); diff != "" {
				t.Errorf("%s/%s differs from the first NOT_FOUND (-first +got):\n%s", rpc.name, c.name, diff)
			}
		}
	}
	if first == nil {
		t.Fatal("no NOT_FOUND case")
	}
}

// ---------------------------------------------------------------------------------------
// Files.

func readOp(path string, length uint64) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Read{Read: &executionv1.ReadFile{Path: []byte(path), Length: length}}}
}

func writeOp(path string, content []byte) *executionv1.FileOperation {
	return &executionv1.FileOperation{Operation: &executionv1.FileOperation_Write{Write: &executionv1.WriteFile{
		Path: []byte(path), Content: content, Mode: executionv1.WriteMode_WRITE_MODE_OVERWRITE,
	}}}
}

// sentFile is what the executor must receive for op.
func sentFile(op *executionv1.FileOperation, responseCap int) execCall {
	return execCall{
		Pod: podexec.PodRef{Name: testPod, UID: testPodUID},
		Request: &helperv1.Request{
			Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: testReqID, Limits: profileLimits,
			Operation: &helperv1.Request_File{File: op},
		},
		ResponseCap: responseCap,
	}
}

var ignoreDeadline = cmpopts.IgnoreFields(execCall{}, "Deadline")

// helperCodeCases are the helper's refusals and the answers they map to; the helper's own
// text is kept (behind the class's) when the code is in the vocabulary.
var helperCodeCases = []struct {
	code helperv1.ErrorCode
	want answer
}{
	{helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, invalid},
	{helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, notFound},
	{helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, answer{codes.AlreadyExists, "ALREADY_EXISTS", false}},
	{helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH, answer{codes.Aborted, "VERSION_MISMATCH", false}},
	{helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE, answer{codes.PermissionDenied, "PATH_ESCAPE", false}},
	{helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED, answer{codes.PermissionDenied, "PERMISSION_DENIED", false}},
	{helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, limitExceeded},
	{helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, answer{codes.FailedPrecondition, "WRONG_TYPE", false}},
	{helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, notReady},
	{helperv1.ErrorCode_ERROR_CODE_INTERNAL, internal},
	{helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION, internal},
	{helperv1.ErrorCode_ERROR_CODE_UNSPECIFIED, internal},
	{helperv1.ErrorCode(99), internal},
}

// classText is the vocabulary's text of an answer mapped from a helper code.
var classText = map[helperv1.ErrorCode]string{
	helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:   "invalid argument",
	helperv1.ErrorCode_ERROR_CODE_NOT_FOUND:          "not found",
	helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS:     "already exists",
	helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH:   "content version mismatch",
	helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE:        "path escapes the workspace",
	helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED:  "permission denied",
	helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED: "limit exceeded",
	helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE:         "wrong file type",
	helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE:        "not ready",
}

// hostileHelperText is a helper message with control bytes, non-ASCII and more than the
// caller may read; sanitisedHelperText is what of it reaches the caller.
var (
	hostileHelperText   = "\x1b[2Jopen: caf\u00e9\n" + strings.Repeat("x", 400) + "TAIL"
	sanitisedHelperText = func() string {
		s := "?[2Jopen: caf???"
		return s + strings.Repeat("x", podexec.MaxHelperMessage-len(s))
	}()
)

type filesCase struct {
	name  string
	op    *executionv1.FileOperation
	setup setup
	// inflight data calls already run in the environment (held in the executor).
	inflight int
	want     answer
	msg      string
	execs    int
	// check inspects a successful answer and the executor's calls.
	check func(t *testing.T, w *world, resp *executionv1.FilesResponse)
}

func filesCases() []filesCase {
	cases := []filesCase{
		{name: "no operation", op: nil, want: invalid},
		{name: "empty operation", op: &executionv1.FileOperation{}, want: invalid},
		{name: "empty path", op: statOp(""), want: invalid},
		{name: "path with NUL", op: statOp("a\x00b"), want: invalid},
		{name: "path over the bound", op: statOp(strings.Repeat("a", protocol.MaxPathBytes+1)), want: invalid},
		{name: "rename to an empty path", op: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Rename{
			Rename: &executionv1.RenamePath{From: []byte("a"), To: nil},
		}}, want: invalid},
		{name: "glob base with NUL", op: &executionv1.FileOperation{Operation: &executionv1.FileOperation_Glob{
			Glob: &executionv1.Glob{Base: []byte("a\x00"), Pattern: []byte("*")},
		}}, want: invalid},
		{name: "malformed path refused before any lookup", op: statOp("a\x00b"), setup: setup{noMaterial: true, viewErr: errNotSynced}, want: invalid},
		{name: "write over max_file_bytes", op: writeOp("a.txt", make([]byte, 1<<20+1)), want: limitExceeded},
		{name: "read over max_file_bytes", op: readOp("a.txt", 1<<20+1), want: limitExceeded},
		{name: "per-environment call limit", op: statOp("a.txt"), setup: setup{maxCalls: 1, exec: blocks}, inflight: 1, want: busy, execs: 1},
		{name: "result of another kind", op: readOp("a.txt", 10), setup: setup{exec: answers(&helperv1.Response{RequestId: testReqID,
			Outcome: &helperv1.Response_File{File: &executionv1.FileResult{Result: &executionv1.FileResult_Write{Write: &executionv1.WriteFileResult{}}}}})},
			want: internal, msg: internalMessage, execs: 1},
		{name: "no result", op: readOp("a.txt", 10), setup: setup{exec: answers(&helperv1.Response{RequestId: testReqID})},
			want: internal, msg: internalMessage, execs: 1},
		{name: "command result for a file operation", op: statOp("a.txt"), setup: setup{exec: answers(&helperv1.Response{RequestId: testReqID,
			Outcome: &helperv1.Response_Command{Command: &executionv1.CommandResult{}}})},
			want: internal, msg: internalMessage, execs: 1},
		{name: "executor protocol violation", op: statOp("a.txt"), setup: setup{exec: fails(fmt.Errorf("%w: frame over the cap", podexec.ErrProtocol))},
			want: internal, msg: internalMessage, execs: 1},
		{name: "executor breaks mid-call", op: writeOp("a.txt", []byte("x")), setup: setup{exec: fails(fmt.Errorf("%w: read tcp 10.0.0.1:443: connection reset", podexec.ErrOutcomeUnknown))},
			want: unknown, msg: apierror.ErrOutcomeUnknown.Error(), execs: 1},
		{name: "executor unreachable", op: statOp("a.txt"), setup: setup{exec: fails(fmt.Errorf("%w: dial https://10.0.0.1:6443: refused", podexec.ErrExecutorUnreachable))},
			want: unavailable, msg: apierror.ErrExecutorUnreachable.Error(), execs: 1},
		{name: "executor fails otherwise", op: statOp("a.txt"), setup: setup{exec: fails(errors.New(`pods "xenv-a-executor" is forbidden: secret detail`))},
			want: internal, msg: internalMessage, execs: 1},
		{name: "claim fenced during the call", op: writeOp("a.txt", []byte("x")), setup: setup{exec: duringCall(func(e *v1alpha1.ExecutionEnvironment) { e.Status.Epoch++ })},
			want: unknown, msg: apierror.ErrOutcomeUnknown.Error(), execs: 1},
		{name: "grants revoked during the call", op: writeOp("a.txt", []byte("x")), setup: setup{exec: duringCall(func(e *v1alpha1.ExecutionEnvironment) { e.Status.GrantGeneration++ })},
			want: unknown, execs: 1},
		{name: "claim expires during the call, unrenewed", op: writeOp("a.txt", []byte("x")), setup: setup{
			env: func(e *v1alpha1.ExecutionEnvironment) {
				e.Status.ActiveRun.ExpiresAt = metav1.NewTime(time.Now().Add(300 * time.Millisecond))
			},
			exec: duringCall(func(*v1alpha1.ExecutionEnvironment) {}), // no event: only the clock
		}, want: unknown, msg: apierror.ErrOutcomeUnknown.Error(), execs: 1},
		{name: "environment deleted during the call", op: writeOp("a.txt", []byte("x")), setup: setup{exec: func(ctx context.Context, w *world, req *helperv1.Request) (*helperv1.Response, error) {
			w.envs.set(testEnv, nil)
			<-ctx.Done()
			return nil, fmt.Errorf("%w: stream closed", podexec.ErrOutcomeUnknown)
		}}, want: unknown, execs: 1},
		{name: "helper text sanitised and cut", op: statOp("a.txt"), setup: setup{exec: helperRefuses(helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, hostileHelperText)},
			want: notFound, msg: "not found: " + sanitisedHelperText, execs: 1},
		{name: "read", op: readOp("a.txt", 5), want: ok, execs: 1, check: func(t *testing.T, w *world, resp *executionv1.FilesResponse) {
			if diff := cmp.Diff([]execCall{sentFile(readOp("a.txt", 5), 2<<20)}, w.exec.recorded(), protocmp.Transform(), ignoreDeadline); diff != "" {
				t.Errorf("sent to the executor (-want +got):\n%s", diff)
			}
			want := okResponse(&helperv1.Request{Operation: &helperv1.Request_File{File: readOp("a.txt", 5)}}).GetFile()
			if diff := cmp.Diff(want, resp.GetResult(), protocmp.Transform()); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
		}},
		{name: "write at max_file_bytes", op: writeOp("a.txt", make([]byte, 1<<20)), want: ok, execs: 1, check: func(t *testing.T, w *world, resp *executionv1.FilesResponse) {
			if got := w.exec.recorded(); len(got) == 1 && got[0].ResponseCap != 1<<20 {
				t.Errorf("response cap %d, want %d", got[0].ResponseCap, 1<<20)
			}
			if resp.GetResult().GetWrite() == nil {
				t.Errorf("result %v, want a write result", resp.GetResult())
			}
		}},
		{name: "list", op: &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte(".")}}},
			want: ok, execs: 1, check: func(t *testing.T, w *world, resp *executionv1.FilesResponse) {
				op := &executionv1.FileOperation{Operation: &executionv1.FileOperation_List{List: &executionv1.ListDirectory{Path: []byte(".")}}}
				if diff := cmp.Diff([]execCall{sentFile(op, protocol.TreeResultCap)}, w.exec.recorded(), protocmp.Transform(), ignoreDeadline); diff != "" {
					t.Errorf("sent to the executor (-want +got):\n%s", diff)
				}
			}},
	}
	for _, hc := range helperCodeCases {
		msg := internalMessage
		if text, found := classText[hc.code]; found {
			msg = text + ": open: no such file or directory"
		}
		cases = append(cases, filesCase{
			name: "helper answers " + hc.code.String(), op: statOp("a.txt"),
			setup: setup{exec: helperRefuses(hc.code, "open: no such file or directory")}, want: hc.want, msg: msg, execs: 1,
		})
	}
	return cases
}

// holdCalls starts n calls that the executor holds until the returned function ends them.
func holdCalls(t *testing.T, w *world, n int, call func(ctx context.Context) error) (end func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(callerCtx(t))
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { _ = call(ctx) })
	}
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-w.exec.entered:
		case <-deadline:
			t.Fatal("the held calls did not reach the executor")
		}
	}
	return func() { cancel(); wg.Wait() }
}

func TestHandlerFiles(t *testing.T) {
	k := newKeys(t)
	for _, c := range filesCases() {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, k, c.setup)
			g := k.run(t, nil)
			files := func(ctx context.Context) (*executionv1.FilesResponse, error) {
				return w.h.Files(ctx, &executionv1.FilesRequest{RunGrant: g, Environment: testRef(), Operation: c.op})
			}
			if c.inflight > 0 {
				end := holdCalls(t, w, c.inflight, func(ctx context.Context) error { _, err := files(ctx); return err })
				defer end()
			}
			resp, err := files(callerCtx(t))
			expect(t, err, c.want, c.msg)
			w.execCalls(t, c.execs)
			w.controlCalls(t, 0)
			if c.check != nil && err == nil {
				c.check(t, w, resp)
			}
		})
	}
}

// ---------------------------------------------------------------------------------------
// StartCommand.

type commandCase struct {
	name  string
	ctx   func(*testing.T) context.Context
	spec  *executionv1.CommandSpec
	setup setup
	// inflight data calls already run in the environment (held in the executor).
	inflight int
	want     answer
	msg      string
	execs    int
	// timeout is the command's effective timeout, for the deadline check of a success.
	timeout time.Duration
}

func withEnv(spec *executionv1.CommandSpec, name, value string) *executionv1.CommandSpec {
	spec.Environment = append(spec.Environment, &executionv1.EnvironmentVariable{Name: name, Value: value})
	return spec
}

func withTimeout(spec *executionv1.CommandSpec, d time.Duration) *executionv1.CommandSpec {
	spec.Timeout = durationpb.New(d)
	return spec
}

func commandCases() []commandCase {
	return []commandCase{
		{name: "no command", spec: nil, want: invalid},
		{name: "working directory with NUL", spec: &executionv1.CommandSpec{Program: argv("true").Program, WorkingDirectory: []byte("a\x00")}, want: invalid},
		{name: "working directory over the bound", spec: &executionv1.CommandSpec{Program: argv("true").Program, WorkingDirectory: []byte(strings.Repeat("a", protocol.MaxPathBytes+1))}, want: invalid},
		{name: "no program", spec: &executionv1.CommandSpec{}, want: invalid},
		{name: "empty argv", spec: argv(), want: invalid},
		{name: "argv with NUL", spec: argv("echo", "a\x00b"), want: invalid},
		{name: "empty program name", spec: argv("", "x"), want: invalid},
		{name: "shell script with NUL", spec: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: "echo \x00"}}, want: invalid},
		{name: "denied variable LD_PRELOAD", spec: withEnv(argv("true"), "LD_PRELOAD", "/tmp/x.so"), want: invalid},
		{name: "denied variable BASH_ENV", spec: withEnv(argv("true"), "BASH_ENV", "/tmp/x"), want: invalid},
		{name: "denied variable GLIBC_TUNABLES", spec: withEnv(argv("true"), "GLIBC_TUNABLES", "x"), want: invalid},
		{name: "malformed variable name", spec: withEnv(argv("true"), "1X", "x"), want: invalid},
		{name: "variable value with NUL", spec: withEnv(argv("true"), "X", "a\x00"), want: invalid},
		{name: "timeout over the profile's max", spec: withTimeout(argv("true"), 5*time.Minute+time.Second), want: invalid},
		{name: "timeout under the minimum", spec: withTimeout(argv("true"), 500*time.Millisecond), want: invalid},
		{name: "stdin over max_command_bytes", spec: &executionv1.CommandSpec{Program: argv("cat").Program, Stdin: make([]byte, 64<<10+1)}, want: limitExceeded},
		{name: "invalid command of an unauthenticated caller", ctx: noClientCtx, spec: withEnv(argv("true"), "LD_PRELOAD", "x"), want: unauth},
		{name: "per-environment call limit", spec: argv("true"), setup: setup{maxCalls: 1, exec: blocks}, inflight: 1, want: busy, execs: 1},
		{name: "file result for a command", spec: argv("true"), setup: setup{exec: answers(&helperv1.Response{RequestId: testReqID,
			Outcome: &helperv1.Response_File{File: &executionv1.FileResult{Result: &executionv1.FileResult_Stat{Stat: &executionv1.StatFileResult{}}}}})},
			want: internal, msg: internalMessage, execs: 1},
		{name: "helper refuses the working directory", spec: argv("true"), setup: setup{exec: helperRefuses(helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, "chdir: no such file or directory")},
			want: notFound, msg: "not found: chdir: no such file or directory", execs: 1},
		{name: "helper fails", spec: argv("true"), setup: setup{exec: helperRefuses(helperv1.ErrorCode_ERROR_CODE_INTERNAL, "fork: secret")},
			want: internal, msg: internalMessage, execs: 1},
		{name: "executor breaks mid-call", spec: argv("true"), setup: setup{exec: fails(fmt.Errorf("%w: EOF", podexec.ErrOutcomeUnknown))},
			want: unknown, msg: apierror.ErrOutcomeUnknown.Error(), execs: 1},
		{name: "executor unreachable", spec: argv("true"), setup: setup{exec: fails(fmt.Errorf("%w: upgrade refused", podexec.ErrExecutorUnreachable))},
			want: unavailable, msg: apierror.ErrExecutorUnreachable.Error(), execs: 1},
		{name: "claim released during the command", spec: argv("sleep", "60"), setup: setup{exec: duringCall(func(e *v1alpha1.ExecutionEnvironment) { e.Status.ActiveRun = nil })},
			want: unknown, msg: apierror.ErrOutcomeUnknown.Error(), execs: 1},
		{name: "environment fenced during the command", spec: argv("sleep", "60"), setup: setup{exec: duringCall(func(e *v1alpha1.ExecutionEnvironment) { e.Status.FenceState = v1alpha1.FenceUnknown })},
			want: unknown, execs: 1},
		{name: "command with a timeout", spec: withEnv(withTimeout(argv("echo", "hi"), 30*time.Second), "PATH", "/usr/bin"), want: ok, execs: 1, timeout: 30 * time.Second},
		{name: "command with the profile's timeout", spec: &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Shell{Shell: "echo hi"}}, want: ok, execs: 1, timeout: 5 * time.Minute},
	}
}

func TestHandlerStartCommand(t *testing.T) {
	k := newKeys(t)
	for _, c := range commandCases() {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, k, c.setup)
			g := k.run(t, nil)
			start := func(ctx context.Context) (*executionv1.StartCommandResponse, error) {
				return w.h.StartCommand(ctx, &executionv1.StartCommandRequest{RunGrant: g, Environment: testRef(), Command: c.spec})
			}
			if c.inflight > 0 {
				end := holdCalls(t, w, c.inflight, func(ctx context.Context) error { _, err := start(ctx); return err })
				defer end()
			}
			ctx := callerCtx(t)
			if c.ctx != nil {
				ctx = c.ctx(t)
			}
			before := time.Now()
			resp, err := start(ctx)
			after := time.Now()
			expect(t, err, c.want, c.msg)
			w.execCalls(t, c.execs)
			w.controlCalls(t, 0)
			if err != nil || c.want != ok {
				return
			}
			want := []execCall{{
				Pod: podexec.PodRef{Name: testPod, UID: testPodUID},
				Request: &helperv1.Request{
					Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: testReqID, Limits: profileLimits,
					Operation: &helperv1.Request_Command{Command: c.spec},
				},
				ResponseCap: 2*(64<<10) + 1<<20,
			}}
			got := w.exec.recorded()
			if diff := cmp.Diff(want, got, protocmp.Transform(), ignoreDeadline); diff != "" {
				t.Errorf("sent to the executor (-want +got):\n%s", diff)
			}
			if d := got[0].Deadline; d.Before(before.Add(c.timeout+commandSlack)) || d.After(after.Add(c.timeout+commandSlack)) {
				t.Errorf("executor deadline %s after the call, want the timeout %s plus %s", d.Sub(before), c.timeout, commandSlack)
			}
			if resp.GetResult().GetState() != executionv1.CommandState_COMMAND_STATE_SUCCEEDED {
				t.Errorf("result %v", resp.GetResult())
			}
		})
	}
}

// ---------------------------------------------------------------------------------------
// CommandStatus and CancelCommand: a malformed command id is refused before anything else.

func TestHandlerCommandID(t *testing.T) {
	k := newKeys(t)
	calls := map[string]func(ctx context.Context, h *Handler, g *executionv1.Grant, id string) error{
		"CommandStatus": func(ctx context.Context, h *Handler, g *executionv1.Grant, id string) error {
			_, err := h.CommandStatus(ctx, &executionv1.CommandStatusRequest{RunGrant: g, Environment: testRef(), CommandId: id})
			return err
		},
		"CancelCommand": func(ctx context.Context, h *Handler, g *executionv1.Grant, id string) error {
			_, err := h.CancelCommand(ctx, &executionv1.CancelCommandRequest{RunGrant: g, Environment: testRef(), CommandId: id})
			return err
		},
	}
	for name, call := range calls {
		for _, c := range []struct {
			name string
			id   string
			want answer
		}{
			{"empty command id", "", invalid},
			{"command id starting with a dash", "-x", invalid},
			{"command id with a space", "a b", invalid},
			{"command id with a colon", "a:b", invalid},
			{"command id over the bound", strings.Repeat("a", 65), invalid},
			{"well-formed command id", "cmd.1_a-b", ok},
		} {
			t.Run(name+"/"+c.name, func(t *testing.T) {
				w := newWorld(t, k, setup{})
				expect(t, call(callerCtx(t), w.h, k.run(t, nil), c.id), c.want, "")
				if c.want == ok {
					w.execCalls(t, 1)
				} else {
					w.noCalls(t)
				}
			})
		}
	}
}

// ---------------------------------------------------------------------------------------
// Control RPCs.
