package gateway

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// The caller's environment as the fixture builds it: Ready, healthy, the caller's binding
// holding a published reference and the current run claim, an executor Pod.
const (
	testEnv     = "xenv-a"
	testUID     = "6f1c1f3e-2b7a-4c1d-9e8f-0a1b2c3d4e5f"
	otherEnv    = "xenv-b"
	otherUID    = "0d9e8f7a-6b5c-4d3e-8f2a-1b0c9d8e7f6a"
	testPod     = "xenv-a-executor"
	testPodUID  = "11111111-2222-4333-8444-555555555555"
	testBinding = "binding-1"
	testRun     = "run-1"
	testClaim   = "claim-1"
	testEpoch   = 3
	testGen     = 2
	testReqID   = "req-test-1"
	callerID    = "spiffe://execplane.test/client/caller"
	otherID     = "spiffe://execplane.test/client/other"
	// testObserve is the handler's ObserveWait: short, so that a view that never catches up
	// costs a test little.
	testObserve = 50 * time.Millisecond
)

var testOwner = strings.Repeat("ab", 32)

// The test profile's limits (profiletest.YAML), as the helper must receive them.
var profileLimits = &helperv1.Limits{MaxFileBytes: 1 << 20, MaxCommandBytes: 64 << 10, MaxCommandMillis: 5 * 60 * 1000,
	// The durable commands' defaults (profile.DefaultCommands).
	MaxSpoolBytes: 64 << 20, MaxDetached: 4, MaxDetachedMillis: 24 * 60 * 60 * 1000, RetainRecords: 100, RetainMillis: 7 * 24 * 60 * 60 * 1000}

// internalMessage is what Status answers for anything outside the vocabulary.
const internalMessage = "internal error (request " + testReqID + ")"

// answer is what a caller reads of a refusal.
type answer struct {
	Code      codes.Code
	Reason    string
	Retryable bool
}

var (
	ok            = answer{Code: codes.OK}
	invalid       = answer{codes.InvalidArgument, "INVALID_ARGUMENT", false}
	unauth        = answer{codes.Unauthenticated, "UNAUTHENTICATED", false}
	grantInvalid  = answer{codes.Unauthenticated, "GRANT_INVALID", false}
	notFound      = answer{codes.NotFound, "NOT_FOUND", false}
	revoked       = answer{codes.Aborted, "REVOKED", false}
	stale         = answer{codes.Aborted, "STALE_EPOCH", false}
	fenced        = answer{codes.FailedPrecondition, "FENCED", false}
	notReady      = answer{codes.FailedPrecondition, "NOT_READY", false}
	unavailable   = answer{codes.Unavailable, "UNAVAILABLE", true}
	limitExceeded = answer{codes.ResourceExhausted, "LIMIT_EXCEEDED", false}
	busy          = answer{codes.ResourceExhausted, "LIMIT_EXCEEDED", true}
	internal      = answer{codes.Internal, "INTERNAL", false}
	unknown       = answer{codes.Unknown, "OUTCOME_UNKNOWN", false}
)

// read translates a handler's error as the server's edge does, once.
func read(err error) (answer, string) {
	if err == nil {
		return ok, ""
	}
	st := apierror.Status(err, testReqID)
	return answer{status.Code(st), apierror.Reason(st), apierror.Retryable(st)}, status.Convert(st).Message()
}

// packagePrefix matches a Go package's error prefix ("grant: ...") at the start of a message
// or of one of its ": "-separated parts; a class text such as "invalid grant: expired" or a
// field name such as "run_grant: " is not one.
var packagePrefix = regexp.MustCompile(`(^|: )(store|grant|security|gateway|fileops|process|protocol|authority): |apierror`)

// expect compares err's answer with want (and its message with msg when msg is set) and
// checks that the message names no Go package.
func expect(t *testing.T, err error, want answer, msg string) {
	t.Helper()
	got, gotMsg := read(err)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answer (-want +got):\n%s\nerror: %v", diff, err)
	}
	if msg != "" && gotMsg != msg {
		t.Errorf("message %q, want %q", gotMsg, msg)
	}
	if m := packagePrefix.FindString(gotMsg); m != "" {
		t.Errorf("the caller's message %q names a Go package (%q)", gotMsg, m)
	}
}

// keys is a development bundle with its grant signing key, shared by one test's cases.
type keys struct {
	bundle *security.Bundle
	priv   ed25519.PrivateKey
}

func newKeys(t *testing.T) *keys {
	t.Helper()
	r, err := devbundle.Generate(filepath.Join(t.TempDir(), "bundle"), devbundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := security.LoadBundle(r.Manifest, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(r.GrantPrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(data)
	if block == nil {
		t.Fatal("grant key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	priv, isEd := k.(ed25519.PrivateKey)
	if !isEd {
		t.Fatalf("grant key is a %T", k)
	}
	return &keys{bundle: b, priv: priv}
}

func envBinding() grant.EnvironmentBinding {
	return grant.EnvironmentBinding{
		Client: callerID, OwnerHash: testOwner, BindingID: testBinding,
		Environment: ident.EnvironmentRef{Name: testEnv, UID: testUID}, GrantGeneration: testGen,
	}
}

func runBinding() grant.RunBinding {
	return grant.RunBinding{EnvironmentBinding: envBinding(), Epoch: testEpoch, RunID: testRun, ClaimID: testClaim}
}

func token(t *testing.T, issued grant.Issued, err error) *executionv1.Grant {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	return &executionv1.Grant{Token: issued.Token}
}

// run signs a run grant of the fixture's claim, edited by edit, with the bundle's signer.
func (k *keys) run(t *testing.T, edit func(*grant.RunBinding)) *executionv1.Grant {
	b := runBinding()
	if edit != nil {
		edit(&b)
	}
	issued, err := k.bundle.Signer(grant.PurposeRun).SignRun(b)
	return token(t, issued, err)
}

// env signs an environment grant of the fixture's binding, edited by edit.
func (k *keys) env(t *testing.T, edit func(*grant.EnvironmentBinding)) *executionv1.Grant {
	b := envBinding()
	if edit != nil {
		edit(&b)
	}
	issued, err := k.bundle.Signer(grant.PurposeEnvironment).SignEnvironment(b)
	return token(t, issued, err)
}

// signer is a run-grant signer with the bundle's kid, issuer and audience but the given key
// and clock.
func signer(t *testing.T, key ed25519.PrivateKey, now func() time.Time) *grant.Signer {
	t.Helper()
	s, err := grant.NewSigner(grant.SignerConfig{
		KeyID: devbundle.GrantKeyID, PrivateKey: key, Issuer: devbundle.DefaultIssuer, Audience: devbundle.DefaultIssuer,
		Lifetime: devbundle.RunGrantLifetime, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// expired is a run grant of the current claim signed an hour ago.
func (k *keys) expired(t *testing.T) *executionv1.Grant {
	issued, err := signer(t, k.priv, func() time.Time { return time.Now().Add(-time.Hour) }).SignRun(runBinding())
	return token(t, issued, err)
}

// forged is a run grant of the current claim under the bundle's kid, signed by another key.
func (k *keys) forged(t *testing.T) *executionv1.Grant {
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	issued, err := signer(t, other, nil).SignRun(runBinding())
	return token(t, issued, err)
}

func testRef() *executionv1.EnvironmentRef {
	return &executionv1.EnvironmentRef{Id: testEnv, Revision: testUID}
}

// readyEnv is the caller's environment, serving its current claim.
func readyEnv() *v1alpha1.ExecutionEnvironment {
	return &v1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: testEnv, Namespace: "execplane", UID: types.UID(testUID)},
		Spec: v1alpha1.ExecutionEnvironmentSpec{
			SchemaVersion: v1alpha1.CurrentSchemaVersion, OwnerHash: testOwner, ClientHash: ident.ClientHash(callerID),
			BindingID: testBinding, Profile: profiletest.Name,
		},
		Status: v1alpha1.ExecutionEnvironmentStatus{
			Phase: v1alpha1.PhaseReady, Epoch: testEpoch, GrantGeneration: testGen, FenceState: v1alpha1.FenceHealthy,
			References: []v1alpha1.Reference{{BindingID: testBinding, State: v1alpha1.ReferencePublished, OperationID: "op-0"}},
			ActiveRun: &v1alpha1.RunClaim{
				BindingID: testBinding, RunID: testRun, ClaimID: testClaim, Epoch: testEpoch, GrantGeneration: testGen,
				ClientHash: ident.ClientHash(callerID), AcquiredAt: metav1.Now(), ExpiresAt: metav1.NewTime(time.Now().Add(time.Hour)),
			},
			Pod:        &v1alpha1.ObjectIdentity{Name: testPod, UID: testPodUID},
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Ready", LastTransitionTime: metav1.Now()}},
		},
	}
}

// setup describes the world a case runs in; the zero value is the fixture.
type setup struct {
	// env edits the caller's environment; absent removes it from the view.
	env    func(*v1alpha1.ExecutionEnvironment)
	absent bool
	// viewErr is what the view answers every Await with.
	viewErr error
	// stale is what the view's Fresh answers (a view not proven current).
	stale error
	// noMaterial: the gateway holds no security material.
	noMaterial bool
	// maxCalls is HandlerConfig.MaxEnvironmentCalls.
	maxCalls int
	// exec answers the executor's calls (okResponse when nil).
	exec func(ctx context.Context, w *world, req *helperv1.Request) (*helperv1.Response, error)
	// control is the controller's answer (the fixture's reply when both are nil).
	reply      *controlv1.EnvironmentReply
	controlErr error
}

// world is a Handler over fakes.
type world struct {
	keys     *keys
	envs     *fakeEnvironments
	exec     *fakeExecutor
	control  *fakeControl
	profiles *profile.Registry
	h        *Handler
}

func newWorld(t *testing.T, k *keys, s setup) *world {
	t.Helper()
	// Every goroutine a call starts (the fencing watch, the executor's) ends with it.
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
	env := readyEnv()
	if s.env != nil {
		s.env(env)
	}
	w := &world{keys: k, envs: newFakeEnvironments(), exec: newFakeExecutor(), control: &fakeControl{reply: s.reply, err: s.controlErr}}
	if !s.absent {
		w.envs.set(env.Name, env)
	}
	w.envs.err, w.envs.stale = s.viewErr, s.stale
	if w.control.reply == nil {
		w.control.reply = fixtureReply()
	}
	w.exec.do = func(ctx context.Context, req *helperv1.Request) (*helperv1.Response, error) {
		if s.exec != nil {
			return s.exec(ctx, w, req)
		}
		return okResponse(req), nil
	}
	w.profiles, _ = profiletest.Registry(t, profiletest.YAML(10))
	h, err := NewHandler(HandlerConfig{ObserveWait: testObserve, MaxEnvironmentCalls: s.maxCalls}, Backend{
		Control: w.control, Environments: w.envs, Executor: w.exec, Profiles: w.profiles,
		Material: func() (*security.Bundle, bool) {
			if s.noMaterial {
				return nil, false
			}
			return k.bundle, true
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	w.h = h
	return w
}

// edit replaces the caller's environment in the view with an edited copy.
func (w *world) edit(edit func(*v1alpha1.ExecutionEnvironment)) {
	cur, _ := w.envs.get(testEnv)
	next := cur.DeepCopy()
	edit(next)
	w.envs.set(testEnv, next)
}

// noCalls fails unless nothing reached the executor or the controller.
func (w *world) noCalls(t *testing.T) {
	t.Helper()
	w.execCalls(t, 0)
	w.controlCalls(t, 0)
}

func (w *world) execCalls(t *testing.T, n int) {
	t.Helper()
	if got := w.exec.recorded(); len(got) != n {
		t.Errorf("%d executor calls, want %d", len(got), n)
	}
}

func (w *world) controlCalls(t *testing.T, n int) {
	t.Helper()
	if got := w.control.recorded(); len(got) != n {
		t.Errorf("%d control calls (%v), want %d", len(got), got, n)
	}
}

func ctxAs(t *testing.T, identity string) context.Context {
	ctx := security.ContextWithClient(t.Context(), security.Client{Identity: security.ClientIdentity(identity), Policy: security.ClientPolicy{MayAttestOwner: true}})
	return ContextWithRequestID(ctx, testReqID)
}

// callerCtx is a call of the environment's client; noClientCtx one that never passed
// authentication.
func callerCtx(t *testing.T) context.Context   { return ctxAs(t, callerID) }
func noClientCtx(t *testing.T) context.Context { return ContextWithRequestID(t.Context(), testReqID) }

// okResponse is a helper's successful answer of the request's kind.
func okResponse(req *helperv1.Request) *helperv1.Response {
	if req.GetDurable() != nil {
		return defaultAnswer(req)
	}
	resp := &helperv1.Response{RequestId: req.GetRequestId()}
	if req.GetCommand() != nil {
		resp.Outcome = &helperv1.Response_Command{Command: &executionv1.CommandResult{State: executionv1.CommandState_COMMAND_STATE_SUCCEEDED}}
		return resp
	}
	info := &executionv1.FileInfo{Path: []byte("a.txt"), Type: executionv1.FileType_FILE_TYPE_REGULAR, Size: 5}
	res := &executionv1.FileResult{}
	switch op := req.GetFile(); {
	case op.GetRead() != nil:
		res.Result = &executionv1.FileResult_Read{Read: &executionv1.ReadFileResult{Content: []byte("hello"), Info: info}}
	case op.GetWrite() != nil:
		res.Result = &executionv1.FileResult_Write{Write: &executionv1.WriteFileResult{Info: info}}
	case op.GetList() != nil:
		res.Result = &executionv1.FileResult_List{List: &executionv1.ListDirectoryResult{Entries: []*executionv1.FileInfo{info}}}
	case op.GetRename() != nil:
		res.Result = &executionv1.FileResult_Rename{Rename: &executionv1.RenamePathResult{}}
	default:
		res.Result = &executionv1.FileResult_Stat{Stat: &executionv1.StatFileResult{Info: info}}
	}
	resp.Outcome = &helperv1.Response_File{File: res}
	return resp
}

// helperRefuses answers every call with the helper's refusal.
func helperRefuses(code helperv1.ErrorCode, msg string) func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
	return func(_ context.Context, _ *world, req *helperv1.Request) (*helperv1.Response, error) {
		return &helperv1.Response{RequestId: req.GetRequestId(), Outcome: &helperv1.Response_Error{Error: &helperv1.Error{Code: code, Message: msg}}}, nil
	}
}

// answers answers every call with resp.
func answers(resp *helperv1.Response) func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
	return func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
		return proto.CloneOf(resp), nil
	}
}

// fails answers every call with err.
func fails(err error) func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
	return func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) { return nil, err }
}

// duringCall changes the environment while the command runs, then waits for the gateway to
// close the stream (as podexec.Exec does when its context ends).
func duringCall(edit func(*v1alpha1.ExecutionEnvironment)) func(context.Context, *world, *helperv1.Request) (*helperv1.Response, error) {
	return func(ctx context.Context, w *world, _ *helperv1.Request) (*helperv1.Response, error) {
		w.edit(edit)
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: stream closed", podexec.ErrOutcomeUnknown)
		case <-time.After(10 * time.Second):
			return nil, errors.New("the gateway did not close the stream when the claim ended")
		}
	}
}

// blocks holds every call until the gateway ends it.
func blocks(ctx context.Context, _ *world, _ *helperv1.Request) (*helperv1.Response, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// ---------------------------------------------------------------------------------------
// Admission: the checks every data call passes before anything reaches the executor.

func TestHandlerValidateProfile(t *testing.T) {
	k := newKeys(t)
	w := newWorld(t, k, setup{})
	p, _ := w.profiles.Profile(profiletest.Name)
	for _, c := range []struct {
		name string
		ctx  func(*testing.T) context.Context
		in   *executionv1.ValidateProfileRequest
		want answer
	}{
		{"no client in context", noClientCtx, &executionv1.ValidateProfileRequest{Profile: profiletest.Name}, unauth},
		{"name not a DNS label", nil, &executionv1.ValidateProfileRequest{Profile: "Python"}, invalid},
		{"malformed digest", nil, &executionv1.ValidateProfileRequest{Profile: profiletest.Name, ExpectedDigest: "sha256:XYZ"}, invalid},
		{"no such profile", nil, &executionv1.ValidateProfileRequest{Profile: "withdrawn"}, notFound},
		{"other digest", nil, &executionv1.ValidateProfileRequest{Profile: profiletest.Name, ExpectedDigest: "sha256:" + strings.Repeat("0", 64)},
			answer{codes.FailedPrecondition, "PRECONDITION_MISMATCH", false}},
		{"valid", nil, &executionv1.ValidateProfileRequest{Profile: profiletest.Name, ExpectedDigest: p.Digest}, ok},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := callerCtx(t)
			if c.ctx != nil {
				ctx = c.ctx(t)
			}
			resp, err := w.h.ValidateProfile(ctx, c.in)
			expect(t, err, c.want, "")
			if err == nil && resp.GetProfile().GetMaxFileBytes() != profileLimits.GetMaxFileBytes() {
				t.Errorf("profile %v", resp.GetProfile())
			}
		})
	}
	w.noCalls(t)
}

func TestHandlerRefusesIncompleteBackend(t *testing.T) {
	if _, err := NewHandler(HandlerConfig{}, Backend{Control: &fakeControl{}}); err == nil {
		t.Fatal("a backend without environments, executor, profiles and material was accepted")
	}
}
