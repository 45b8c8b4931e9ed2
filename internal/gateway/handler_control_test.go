package gateway

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/pkg/apierror"
	v1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/grant"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// fixtureReply is the controller's answer about the caller's environment and claim.
func fixtureReply() *controlv1.EnvironmentReply {
	return &controlv1.EnvironmentReply{
		Environment: &executionv1.Environment{
			Ref: testRef(), BindingId: testBinding, Profile: profiletest.Name, Ready: true,
			Epoch: testEpoch, GrantGeneration: testGen,
		},
		OwnerHash: testOwner, ClientHash: ident.ClientHash(callerID),
		Run: &executionv1.RunClaim{BindingId: testBinding, RunId: testRun, ClaimId: testClaim, Epoch: testEpoch, GrantGeneration: testGen},
	}
}

func testCaller() *controlv1.Caller {
	return &controlv1.Caller{ClientUri: callerID, RequestId: testReqID}
}

// refusedByController is a status the controller answers; the gateway passes it on unchanged.
var refusedByController = apierror.Status(fmt.Errorf("%w: the client may not administer this environment", apierror.ErrPermissionDenied), "ctl-1")

var permissionDenied = answer{codes.PermissionDenied, "PERMISSION_DENIED", false}

// verifyEnvironmentGrant fails unless g is an environment grant of the fixture's binding.
func verifyEnvironmentGrant(t *testing.T, k *keys, g *executionv1.Grant) {
	t.Helper()
	if _, err := k.bundle.Verifier().VerifyEnvironment(g.GetToken(), envBinding()); err != nil {
		t.Errorf("the environment grant issued does not verify: %v", err)
	}
}

// verifyRunGrant fails unless g is a run grant of the fixture's claim.
func verifyRunGrant(t *testing.T, k *keys, g *executionv1.Grant) {
	t.Helper()
	if _, err := k.bundle.Verifier().VerifyRun(g.GetToken(), runBinding()); err != nil {
		t.Errorf("the run grant issued does not verify: %v", err)
	}
}

// controlCase is one case of a control RPC.
type controlCase struct {
	name  string
	ctx   func(*testing.T) context.Context
	setup setup
	want  answer
	// controlled: the call reaches the controller (once).
	controlled bool
}

func TestHandlerEnsureAndAttach(t *testing.T) {
	k := newKeys(t)
	ensureIn := &executionv1.EnsureEnvironmentRequest{
		OperationId: "op-1", Owner: &executionv1.Owner{Issuer: "https://idp.example", Subject: "alice"},
		BindingId: testBinding, Profile: profiletest.Name,
	}
	attachIn := &executionv1.AttachEnvironmentRequest{
		Owner: &executionv1.Owner{Issuer: "https://idp.example", Subject: "alice"}, BindingId: testBinding, Environment: testRef(),
	}
	rpcs := []struct {
		name string
		call func(ctx context.Context, h *Handler) (*executionv1.Environment, *executionv1.Grant, error)
		sent proto.Message
	}{
		{"EnsureEnvironment", func(ctx context.Context, h *Handler) (*executionv1.Environment, *executionv1.Grant, error) {
			r, err := h.EnsureEnvironment(ctx, proto.CloneOf(ensureIn))
			return r.GetEnvironment(), r.GetEnvironmentGrant(), err
		}, &controlv1.EnsureRequest{Caller: testCaller(), Request: ensureIn}},
		{"AttachEnvironment", func(ctx context.Context, h *Handler) (*executionv1.Environment, *executionv1.Grant, error) {
			r, err := h.AttachEnvironment(ctx, proto.CloneOf(attachIn))
			return r.GetEnvironment(), r.GetEnvironmentGrant(), err
		}, &controlv1.AttachRequest{Caller: testCaller(), Request: attachIn}},
	}
	cases := []controlCase{
		{name: "no client in context", ctx: noClientCtx, want: unauth},
		{name: "controller refuses", setup: setup{controlErr: refusedByController}, want: permissionDenied, controlled: true},
		{name: "security material unavailable", setup: setup{noMaterial: true}, want: unavailable},
		{name: "controller answers without an environment", setup: setup{reply: &controlv1.EnvironmentReply{OwnerHash: testOwner}}, want: internal, controlled: true},
		{name: "issued", want: ok, controlled: true},
	}
	for _, rpc := range rpcs {
		for _, c := range cases {
			t.Run(rpc.name+"/"+c.name, func(t *testing.T) {
				w := newWorld(t, k, c.setup)
				ctx := callerCtx(t)
				if c.ctx != nil {
					ctx = c.ctx(t)
				}
				env, g, err := rpc.call(ctx, w.h)
				expect(t, err, c.want, "")
				w.execCalls(t, 0)
				if !c.controlled {
					w.controlCalls(t, 0)
					return
				}
				if diff := cmp.Diff([]controlCall{{Method: strings.TrimSuffix(rpc.name, "Environment"), Request: rpc.sent}}, w.control.recorded(), protocmp.Transform()); diff != "" {
					t.Errorf("sent to the controller (-want +got):\n%s", diff)
				}
				if err != nil {
					return
				}
				if diff := cmp.Diff(fixtureReply().GetEnvironment(), env, protocmp.Transform()); diff != "" {
					t.Errorf("environment (-want +got):\n%s", diff)
				}
				verifyEnvironmentGrant(t, k, g)
			})
		}
	}
}

func TestHandlerAcquireRun(t *testing.T) {
	k := newKeys(t)
	type acquireCase struct {
		controlCase
		grant func(*testing.T, *keys) *executionv1.Grant
		ref   func() *executionv1.EnvironmentRef
	}
	cases := []acquireCase{
		{controlCase: controlCase{name: "no client in context", ctx: noClientCtx, want: unauth}},
		{controlCase: controlCase{name: "no environment grant", want: invalid}, grant: func(*testing.T, *keys) *executionv1.Grant { return nil }},
		{controlCase: controlCase{name: "malformed environment", want: invalid}, ref: func() *executionv1.EnvironmentRef {
			return &executionv1.EnvironmentRef{Id: testEnv, Revision: "x"}
		}},
		{controlCase: controlCase{name: "token not a JWS", want: grantInvalid}, grant: func(*testing.T, *keys) *executionv1.Grant { return &executionv1.Grant{Token: "x.y.z"} }},
		{controlCase: controlCase{name: "run grant where an environment grant is needed", want: grantInvalid}, grant: func(t *testing.T, k *keys) *executionv1.Grant { return k.run(t, nil) }},
		{controlCase: controlCase{name: "another client's grant", want: grantInvalid}, grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.env(t, func(b *grant.EnvironmentBinding) { b.Client = otherID })
		}},
		{controlCase: controlCase{name: "grant for another environment", want: notFound}, grant: func(t *testing.T, k *keys) *executionv1.Grant {
			return k.env(t, func(b *grant.EnvironmentBinding) { b.Environment = ident.EnvironmentRef{Name: otherEnv, UID: otherUID} })
		}},
		{controlCase: controlCase{name: "absent environment", setup: setup{absent: true}, want: notFound}},
		{controlCase: controlCase{name: "another client's environment", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) {
			e.Spec.ClientHash = ident.ClientHash(otherID)
		}}, want: notFound}},
		{controlCase: controlCase{name: "re-created environment", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.UID = otherUID }}, want: notFound}},
		{controlCase: controlCase{name: "revoked generation", setup: setup{env: func(e *v1alpha1.ExecutionEnvironment) { e.Status.GrantGeneration++ }}, want: revoked}},
		{controlCase: controlCase{name: "security material unavailable", setup: setup{noMaterial: true}, want: unavailable}},
		// A view not proven current judges no environment grant: nothing reaches the controller.
		{controlCase: controlCase{name: "view not proven current", setup: setup{stale: errStale}, want: unavailable}},
		{controlCase: controlCase{name: "controller refuses", setup: setup{controlErr: refusedByController}, want: permissionDenied, controlled: true}},
		{controlCase: controlCase{name: "controller answers without the claim", setup: setup{reply: &controlv1.EnvironmentReply{
			Environment: fixtureReply().GetEnvironment(), OwnerHash: testOwner,
		}}, want: internal, controlled: true}},
		{controlCase: controlCase{name: "acquired", want: ok, controlled: true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, k, c.setup)
			ctx := callerCtx(t)
			if c.ctx != nil {
				ctx = c.ctx(t)
			}
			g, ref := k.env(t, nil), testRef()
			if c.grant != nil {
				g = c.grant(t, k)
			}
			if c.ref != nil {
				ref = c.ref()
			}
			in := &executionv1.AcquireRunRequest{OperationId: "op-2", EnvironmentGrant: g, Environment: ref, RunId: testRun, Ttl: durationpb.New(time.Minute)}
			resp, err := w.h.AcquireRun(ctx, in)
			expect(t, err, c.want, "")
			w.execCalls(t, 0)
			if !c.controlled {
				w.controlCalls(t, 0)
				return
			}
			forwarded := proto.CloneOf(in)
			forwarded.EnvironmentGrant = nil // grants are verified here, never forwarded
			want := []controlCall{{Method: "AcquireRun", Request: &controlv1.AcquireRunRequest{
				Caller: testCaller(), Request: forwarded,
				Grant: &controlv1.VerifiedGrant{BindingId: testBinding, Environment: testRef(), GrantGeneration: testGen, KeyId: devbundle.GrantKeyID},
			}}}
			got := w.control.recorded()
			if diff := cmp.Diff(want, got, protocmp.Transform(), protocmp.IgnoreFields(&controlv1.VerifiedGrant{}, "expires_at")); diff != "" {
				t.Errorf("sent to the controller (-want +got):\n%s", diff)
			}
			if err != nil {
				return
			}
			if exp := got[0].Request.(*controlv1.AcquireRunRequest).GetGrant().GetExpiresAt().AsTime(); !exp.After(time.Now()) {
				t.Errorf("verified grant expires at %s, in the past", exp)
			}
			verifyRunGrant(t, k, resp.GetRunGrant())
			if diff := cmp.Diff(fixtureReply().GetRun(), resp.GetRun(), protocmp.Transform()); diff != "" {
				t.Errorf("run (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHandlerRenewAndReleaseRun(t *testing.T) {
	k := newKeys(t)
	rpcs := []struct {
		name string
		call func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) (proto.Message, *executionv1.Grant, error)
	}{
		{"RenewRun", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) (proto.Message, *executionv1.Grant, error) {
			in := &executionv1.RenewRunRequest{OperationId: "op-3", RunGrant: g, Environment: ref, Ttl: durationpb.New(time.Minute)}
			resp, err := h.RenewRun(ctx, in)
			in.RunGrant = nil
			return &controlv1.RenewRunRequest{Caller: testCaller(), Request: in}, resp.GetRunGrant(), err
		}},
		{"ReleaseRun", func(ctx context.Context, h *Handler, g *executionv1.Grant, ref *executionv1.EnvironmentRef) (proto.Message, *executionv1.Grant, error) {
			in := &executionv1.ReleaseRunRequest{OperationId: "op-3", RunGrant: g, Environment: ref}
			_, err := h.ReleaseRun(ctx, in)
			in.RunGrant = nil
			return &controlv1.ReleaseRunRequest{Caller: testCaller(), Request: in}, nil, err
		}},
	}
	verified := &controlv1.VerifiedGrant{
		BindingId: testBinding, Environment: testRef(), Epoch: testEpoch, GrantGeneration: testGen,
		RunId: testRun, ClaimId: testClaim, KeyId: devbundle.GrantKeyID,
	}
	cases := append(grantCases(),
		admissionCase{name: "controller refuses", setup: setup{controlErr: refusedByController}, want: permissionDenied},
		admissionCase{name: "forwarded", admitted: true},
	)
	for _, rpc := range rpcs {
		for _, c := range cases {
			t.Run(rpc.name+"/"+c.name, func(t *testing.T) {
				w := newWorld(t, k, c.setup)
				ctx, g, ref := c.build(t, k)
				sent, issued, err := rpc.call(ctx, w.h, g, ref)
				want := c.want
				if c.admitted {
					want = ok
				}
				expect(t, err, want, c.msg)
				w.execCalls(t, 0)
				if !c.admitted && c.setup.controlErr == nil {
					w.controlCalls(t, 0)
					return
				}
				switch m := sent.(type) {
				case *controlv1.RenewRunRequest:
					m.Grant = verified
				case *controlv1.ReleaseRunRequest:
					m.Grant = verified
				}
				if diff := cmp.Diff([]controlCall{{Method: rpc.name, Request: sent}}, w.control.recorded(),
					protocmp.Transform(), protocmp.IgnoreFields(&controlv1.VerifiedGrant{}, "expires_at")); diff != "" {
					t.Errorf("sent to the controller (-want +got):\n%s", diff)
				}
				if err == nil && rpc.name == "RenewRun" {
					verifyRunGrant(t, k, issued)
				}
			})
		}
	}
}

// TestHandlerForwardedRPCs: the reference and administrative RPCs decide nothing but the
// caller's authentication; the controller authorises and applies them.
func TestHandlerForwardedRPCs(t *testing.T) {
	k := newKeys(t)
	target := &executionv1.ReferenceTarget{Owner: &executionv1.Owner{Issuer: "https://idp.example", Subject: "alice"}, Environment: testRef(), BindingId: testBinding}
	type rpc struct {
		name, method string
		call         func(ctx context.Context, h *Handler) error
		sent         proto.Message
	}
	caller := testCaller()
	var (
		releaseRef  = &executionv1.ReleaseReferenceRequest{OperationId: "op-4", Target: target}
		reserve     = &executionv1.ReserveSuccessorRequest{OperationId: "op-4", Owner: target.GetOwner(), Environment: testRef(), SourceBindingId: testBinding, SuccessorBindingId: "binding-2"}
		commit      = &executionv1.CommitReferenceRequest{OperationId: "op-4", Target: target}
		abort       = &executionv1.AbortReferenceRequest{OperationId: "op-4", Target: target}
		prepareDel  = &executionv1.PrepareReferenceDeleteRequest{OperationId: "op-4", Target: target}
		confirmDel  = &executionv1.ConfirmReferenceDeleteRequest{OperationId: "op-4", Target: target}
		cancelDel   = &executionv1.CancelReferenceDeleteRequest{OperationId: "op-4", Target: target}
		listIntents = &executionv1.ListReferenceIntentsRequest{PageSize: 10}
		retire      = &executionv1.RetireEnvironmentRequest{OperationId: "op-4", Environment: testRef(), Reason: "done"}
		replace     = &executionv1.ReplaceExecutorRequest{OperationId: "op-4", Environment: testRef()}
		revoke      = &executionv1.RevokeEnvironmentRequest{OperationId: "op-4", Environment: testRef()}
		recoverEnv  = &executionv1.RecoverEnvironmentRequest{OperationId: "op-4", Environment: testRef()}
		migrate     = &executionv1.MigrateEnvironmentRequest{OperationId: "op-4", Environment: testRef(), TargetSchemaVersion: 1}
		deleteEnv   = &executionv1.DeleteRetiredEnvironmentRequest{OperationId: "op-4", Environment: testRef()}
		suspend     = &executionv1.SuspendEnvironmentRequest{OperationId: "op-4", Target: target}
		resume      = &executionv1.ResumeEnvironmentRequest{OperationId: "op-4", Target: target}
		ownerDelete = &executionv1.DeleteEnvironmentRequest{OperationId: "op-4", Target: target}
		retention   = &executionv1.SetEnvironmentRetentionRequest{OperationId: "op-4", Target: target, Retain: true}
	)
	rpcs := []rpc{
		{"SuspendEnvironment", "Suspend", func(ctx context.Context, h *Handler) error { _, err := h.SuspendEnvironment(ctx, suspend); return err },
			&controlv1.SuspendRequest{Caller: caller, Request: suspend}},
		{"ResumeEnvironment", "Resume", func(ctx context.Context, h *Handler) error { _, err := h.ResumeEnvironment(ctx, resume); return err },
			&controlv1.ResumeRequest{Caller: caller, Request: resume}},
		{"DeleteEnvironment", "Delete", func(ctx context.Context, h *Handler) error {
			_, err := h.DeleteEnvironment(ctx, ownerDelete)
			return err
		},
			&controlv1.DeleteRequest{Caller: caller, Request: ownerDelete}},
		{"SetEnvironmentRetention", "SetRetention", func(ctx context.Context, h *Handler) error {
			_, err := h.SetEnvironmentRetention(ctx, retention)
			return err
		},
			&controlv1.SetRetentionRequest{Caller: caller, Request: retention}},
		{"ReleaseReference", "ReleaseReference", func(ctx context.Context, h *Handler) error { _, err := h.ReleaseReference(ctx, releaseRef); return err },
			&controlv1.ReleaseReferenceRequest{Caller: caller, Request: releaseRef}},
		{"ReserveSuccessor", "ReserveSuccessor", func(ctx context.Context, h *Handler) error { _, err := h.ReserveSuccessor(ctx, reserve); return err },
			&controlv1.ReserveSuccessorRequest{Caller: caller, Request: reserve}},
		{"CommitReference", "CommitReference", func(ctx context.Context, h *Handler) error { _, err := h.CommitReference(ctx, commit); return err },
			&controlv1.CommitReferenceRequest{Caller: caller, Request: commit}},
		{"AbortReference", "AbortReference", func(ctx context.Context, h *Handler) error { _, err := h.AbortReference(ctx, abort); return err },
			&controlv1.AbortReferenceRequest{Caller: caller, Request: abort}},
		{"PrepareReferenceDelete", "PrepareReferenceDelete", func(ctx context.Context, h *Handler) error {
			_, err := h.PrepareReferenceDelete(ctx, prepareDel)
			return err
		},
			&controlv1.PrepareReferenceDeleteRequest{Caller: caller, Request: prepareDel}},
		{"ConfirmReferenceDelete", "ConfirmReferenceDelete", func(ctx context.Context, h *Handler) error {
			_, err := h.ConfirmReferenceDelete(ctx, confirmDel)
			return err
		},
			&controlv1.ConfirmReferenceDeleteRequest{Caller: caller, Request: confirmDel}},
		{"CancelReferenceDelete", "CancelReferenceDelete", func(ctx context.Context, h *Handler) error {
			_, err := h.CancelReferenceDelete(ctx, cancelDel)
			return err
		},
			&controlv1.CancelReferenceDeleteRequest{Caller: caller, Request: cancelDel}},
		{"ListReferenceIntents", "ListReferenceIntents", func(ctx context.Context, h *Handler) error {
			_, err := h.ListReferenceIntents(ctx, listIntents)
			return err
		},
			&controlv1.ListReferenceIntentsRequest{Caller: caller, Request: listIntents}},
		{"RetireEnvironment", "Retire", func(ctx context.Context, h *Handler) error { _, err := h.RetireEnvironment(ctx, retire); return err },
			&controlv1.RetireRequest{Caller: caller, Request: retire}},
		{"ReplaceExecutor", "Replace", func(ctx context.Context, h *Handler) error { _, err := h.ReplaceExecutor(ctx, replace); return err },
			&controlv1.ReplaceRequest{Caller: caller, Request: replace}},
		{"RevokeEnvironment", "Revoke", func(ctx context.Context, h *Handler) error { _, err := h.RevokeEnvironment(ctx, revoke); return err },
			&controlv1.RevokeRequest{Caller: caller, Request: revoke}},
		{"RecoverEnvironment", "Recover", func(ctx context.Context, h *Handler) error {
			_, err := h.RecoverEnvironment(ctx, recoverEnv)
			return err
		},
			&controlv1.RecoverRequest{Caller: caller, Request: recoverEnv}},
		{"MigrateEnvironment", "Migrate", func(ctx context.Context, h *Handler) error { _, err := h.MigrateEnvironment(ctx, migrate); return err },
			&controlv1.MigrateRequest{Caller: caller, Request: migrate}},
		{"DeleteRetiredEnvironment", "DeleteRetired", func(ctx context.Context, h *Handler) error {
			_, err := h.DeleteRetiredEnvironment(ctx, deleteEnv)
			return err
		},
			&controlv1.DeleteRetiredRequest{Caller: caller, Request: deleteEnv}},
	}
	cases := []controlCase{
		{name: "no client in context", ctx: noClientCtx, want: unauth},
		{name: "controller refuses", setup: setup{controlErr: refusedByController}, want: permissionDenied, controlled: true},
		{name: "forwarded", want: ok, controlled: true},
	}
	for _, r := range rpcs {
		for _, c := range cases {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				w := newWorld(t, k, c.setup)
				ctx := callerCtx(t)
				if c.ctx != nil {
					ctx = c.ctx(t)
				}
				err := r.call(ctx, w.h)
				expect(t, err, c.want, "")
				w.execCalls(t, 0)
				var want []controlCall
				if c.controlled {
					want = []controlCall{{Method: r.method, Request: r.sent}}
				}
				if diff := cmp.Diff(want, w.control.recorded(), protocmp.Transform()); diff != "" {
					t.Errorf("sent to the controller (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestHandlerRefusesMalformedFieldsAtTheEdge: every identifier and owner field of a control
// request is checked by the gateway before anything is forwarded — INVALID_ARGUMENT naming
// the field, with its reason — so an oversized value never meets a later hop's transport
// limit, and the controller is never called.
func TestHandlerRefusesMalformedFieldsAtTheEdge(t *testing.T) {
	k := newKeys(t)
	alice := &executionv1.Owner{Issuer: "https://idp.example", Subject: "alice"}
	huge := strings.Repeat("a", 64<<10) // over every bound, far under the gRPC message limit
	target := func(edit func(*executionv1.ReferenceTarget)) *executionv1.ReferenceTarget {
		t := &executionv1.ReferenceTarget{Owner: alice, Environment: testRef(), BindingId: testBinding}
		edit(t)
		return t
	}
	ensure := func(edit func(*executionv1.EnsureEnvironmentRequest)) *executionv1.EnsureEnvironmentRequest {
		r := &executionv1.EnsureEnvironmentRequest{OperationId: "op-1", Owner: alice, BindingId: testBinding, Profile: profiletest.Name}
		edit(r)
		return r
	}
	cases := []struct {
		name, field string
		call        func(ctx context.Context, h *Handler) error
	}{
		{"ensure: huge operation id", "operation_id", func(ctx context.Context, h *Handler) error {
			_, err := h.EnsureEnvironment(ctx, ensure(func(r *executionv1.EnsureEnvironmentRequest) { r.OperationId = huge }))
			return err
		}},
		{"ensure: huge owner subject", "owner.subject", func(ctx context.Context, h *Handler) error {
			_, err := h.EnsureEnvironment(ctx, ensure(func(r *executionv1.EnsureEnvironmentRequest) {
				r.Owner = &executionv1.Owner{Issuer: "i", Subject: huge}
			}))
			return err
		}},
		{"ensure: no owner", "owner.issuer", func(ctx context.Context, h *Handler) error {
			_, err := h.EnsureEnvironment(ctx, ensure(func(r *executionv1.EnsureEnvironmentRequest) { r.Owner = nil }))
			return err
		}},
		{"ensure: binding with a slash", "binding_id", func(ctx context.Context, h *Handler) error {
			_, err := h.EnsureEnvironment(ctx, ensure(func(r *executionv1.EnsureEnvironmentRequest) { r.BindingId = "a/b" }))
			return err
		}},
		{"ensure: profile not a label", "profile", func(ctx context.Context, h *Handler) error {
			_, err := h.EnsureEnvironment(ctx, ensure(func(r *executionv1.EnsureEnvironmentRequest) { r.Profile = "Sandbox" }))
			return err
		}},
		{"ensure: digest malformed", "expected_profile_digest", func(ctx context.Context, h *Handler) error {
			_, err := h.EnsureEnvironment(ctx, ensure(func(r *executionv1.EnsureEnvironmentRequest) { r.ExpectedProfileDigest = "md5:00" }))
			return err
		}},
		{"attach: owner with a NUL", "owner.subject", func(ctx context.Context, h *Handler) error {
			_, err := h.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: &executionv1.Owner{Issuer: "i", Subject: "a\x00b"}, BindingId: testBinding, Environment: testRef()})
			return err
		}},
		{"attach: huge environment id", "environment.id", func(ctx context.Context, h *Handler) error {
			_, err := h.AttachEnvironment(ctx, &executionv1.AttachEnvironmentRequest{Owner: alice, BindingId: testBinding, Environment: &executionv1.EnvironmentRef{Id: huge, Revision: testRef().GetRevision()}})
			return err
		}},
		{"reference: huge binding", "target.binding_id", func(ctx context.Context, h *Handler) error {
			_, err := h.CommitReference(ctx, &executionv1.CommitReferenceRequest{OperationId: "op-2", Target: target(func(t *executionv1.ReferenceTarget) { t.BindingId = huge })})
			return err
		}},
		{"reference: revision not a UUID", "target.environment.revision", func(ctx context.Context, h *Handler) error {
			_, err := h.ReleaseReference(ctx, &executionv1.ReleaseReferenceRequest{OperationId: "op-2", Target: target(func(t *executionv1.ReferenceTarget) {
				t.Environment = &executionv1.EnvironmentRef{Id: testRef().GetId(), Revision: "not-a-uuid"}
			})})
			return err
		}},
		{"successor: huge successor", "successor_binding_id", func(ctx context.Context, h *Handler) error {
			_, err := h.ReserveSuccessor(ctx, &executionv1.ReserveSuccessorRequest{OperationId: "op-2", Owner: alice, Environment: testRef(), SourceBindingId: testBinding, SuccessorBindingId: huge})
			return err
		}},
		{"intents: huge page token", "page_token", func(ctx context.Context, h *Handler) error {
			_, err := h.ListReferenceIntents(ctx, &executionv1.ListReferenceIntentsRequest{PageToken: huge})
			return err
		}},
		{"intents: page size over the bound", "page_size", func(ctx context.Context, h *Handler) error {
			_, err := h.ListReferenceIntents(ctx, &executionv1.ListReferenceIntentsRequest{PageSize: 1 << 31})
			return err
		}},
		{"acquire: huge run id", "run_id", func(ctx context.Context, h *Handler) error {
			_, err := h.AcquireRun(ctx, &executionv1.AcquireRunRequest{OperationId: "op-2", EnvironmentGrant: k.env(t, nil), Environment: testRef(), RunId: huge})
			return err
		}},
		{"renew: huge operation id", "operation_id", func(ctx context.Context, h *Handler) error {
			_, err := h.RenewRun(ctx, &executionv1.RenewRunRequest{OperationId: huge, RunGrant: k.run(t, nil), Environment: testRef()})
			return err
		}},
		{"release run: bad environment", "environment.id", func(ctx context.Context, h *Handler) error {
			_, err := h.ReleaseRun(ctx, &executionv1.ReleaseRunRequest{OperationId: "op-2", RunGrant: k.run(t, nil), Environment: &executionv1.EnvironmentRef{Id: "UPPER", Revision: testRef().GetRevision()}})
			return err
		}},
		{"retire: reason with a newline", "reason", func(ctx context.Context, h *Handler) error {
			_, err := h.RetireEnvironment(ctx, &executionv1.RetireEnvironmentRequest{OperationId: "op-2", Environment: testRef(), Reason: "a\nb"})
			return err
		}},
		{"retire: huge reason", "reason", func(ctx context.Context, h *Handler) error {
			_, err := h.RetireEnvironment(ctx, &executionv1.RetireEnvironmentRequest{OperationId: "op-2", Environment: testRef(), Reason: huge})
			return err
		}},
		{"recover: pod uid not a UUID", "preconditions.pod_uid", func(ctx context.Context, h *Handler) error {
			_, err := h.RecoverEnvironment(ctx, &executionv1.RecoverEnvironmentRequest{OperationId: "op-2", Environment: testRef(), Preconditions: &executionv1.AdminPreconditions{PodUid: proto.String(huge)}})
			return err
		}},
		{"migrate: huge operation id", "operation_id", func(ctx context.Context, h *Handler) error {
			_, err := h.MigrateEnvironment(ctx, &executionv1.MigrateEnvironmentRequest{OperationId: huge, Environment: testRef(), TargetSchemaVersion: 1})
			return err
		}},
		{"delete retired: pvc uid not a UUID", "preconditions.pvc_uid", func(ctx context.Context, h *Handler) error {
			_, err := h.DeleteRetiredEnvironment(ctx, &executionv1.DeleteRetiredEnvironmentRequest{OperationId: "op-2", Environment: testRef(), Preconditions: &executionv1.AdminPreconditions{PvcUid: proto.String("x")}})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := newWorld(t, k, setup{})
			err := c.call(callerCtx(t), w.h)
			expect(t, err, invalid, "")
			if msg := status.Convert(apierror.Status(err, testReqID)).Message(); !strings.Contains(msg, c.field+":") || len(msg) > 512 {
				t.Errorf("message %q does not name %s (or echoes the value)", msg, c.field)
			}
			w.noCalls(t)
		})
	}
}
