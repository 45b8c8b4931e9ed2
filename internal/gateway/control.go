package gateway

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/security"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// The control RPCs: authenticated here, authorised and applied by the controller leader from
// its own copy of the policy (a gateway cannot widen a client's rights), answered with the
// controller's status unchanged. Grants are verified here and never forwarded: the embedded
// request's token is cleared and the verified claims travel instead.

// EnsureEnvironment implements ExecutionProviderService.
func (h *Handler) EnsureEnvironment(ctx context.Context, in *executionv1.EnsureEnvironmentRequest) (*executionv1.EnsureEnvironmentResponse, error) {
	c, cl, err := h.beginGranting(ctx, in)
	if err != nil {
		return nil, err
	}
	reply, err := h.b.Control.Ensure(ctx, &controlv1.EnsureRequest{Caller: c, Request: in})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, reply.GetEnvironment().GetRef(), atLeast(reply.GetEnvironment()))
	g, err := h.issueEnvironmentGrant(cl, in.GetBindingId(), reply)
	if err != nil {
		return nil, err
	}
	return &executionv1.EnsureEnvironmentResponse{Environment: reply.GetEnvironment(), EnvironmentGrant: g, Created: reply.GetChanged()}, nil
}

// AttachEnvironment implements ExecutionProviderService.
func (h *Handler) AttachEnvironment(ctx context.Context, in *executionv1.AttachEnvironmentRequest) (*executionv1.AttachEnvironmentResponse, error) {
	c, cl, err := h.beginGranting(ctx, in)
	if err != nil {
		return nil, err
	}
	reply, err := h.b.Control.Attach(ctx, &controlv1.AttachRequest{Caller: c, Request: in})
	if err != nil {
		return nil, err
	}
	g, err := h.issueEnvironmentGrant(cl, in.GetBindingId(), reply)
	if err != nil {
		return nil, err
	}
	return &executionv1.AttachEnvironmentResponse{Environment: reply.GetEnvironment(), EnvironmentGrant: g}, nil
}

// ReleaseReference implements ExecutionProviderService.
func (h *Handler) ReleaseReference(ctx context.Context, in *executionv1.ReleaseReferenceRequest) (*executionv1.ReleaseReferenceResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.ReleaseReference, func(c *controlv1.Caller) *controlv1.ReleaseReferenceRequest {
		return &controlv1.ReleaseReferenceRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.ReleaseReferenceResponse{Environment: reply.GetEnvironment()}, nil
}

// ReserveSuccessor implements ExecutionProviderService.
func (h *Handler) ReserveSuccessor(ctx context.Context, in *executionv1.ReserveSuccessorRequest) (*executionv1.ReserveSuccessorResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.ReserveSuccessor, func(c *controlv1.Caller) *controlv1.ReserveSuccessorRequest {
		return &controlv1.ReserveSuccessorRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.ReserveSuccessorResponse{Environment: reply.GetEnvironment(), Reference: reply.GetReference()}, nil
}

// CommitReference implements ExecutionProviderService.
func (h *Handler) CommitReference(ctx context.Context, in *executionv1.CommitReferenceRequest) (*executionv1.CommitReferenceResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.CommitReference, func(c *controlv1.Caller) *controlv1.CommitReferenceRequest {
		return &controlv1.CommitReferenceRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.CommitReferenceResponse{Environment: reply.GetEnvironment(), Reference: reply.GetReference()}, nil
}

// AbortReference implements ExecutionProviderService.
func (h *Handler) AbortReference(ctx context.Context, in *executionv1.AbortReferenceRequest) (*executionv1.AbortReferenceResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.AbortReference, func(c *controlv1.Caller) *controlv1.AbortReferenceRequest {
		return &controlv1.AbortReferenceRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.AbortReferenceResponse{Environment: reply.GetEnvironment()}, nil
}

// PrepareReferenceDelete implements ExecutionProviderService.
func (h *Handler) PrepareReferenceDelete(ctx context.Context, in *executionv1.PrepareReferenceDeleteRequest) (*executionv1.PrepareReferenceDeleteResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.PrepareReferenceDelete, func(c *controlv1.Caller) *controlv1.PrepareReferenceDeleteRequest {
		return &controlv1.PrepareReferenceDeleteRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.PrepareReferenceDeleteResponse{Environment: reply.GetEnvironment(), Reference: reply.GetReference()}, nil
}

// ConfirmReferenceDelete implements ExecutionProviderService.
func (h *Handler) ConfirmReferenceDelete(ctx context.Context, in *executionv1.ConfirmReferenceDeleteRequest) (*executionv1.ConfirmReferenceDeleteResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.ConfirmReferenceDelete, func(c *controlv1.Caller) *controlv1.ConfirmReferenceDeleteRequest {
		return &controlv1.ConfirmReferenceDeleteRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.ConfirmReferenceDeleteResponse{Environment: reply.GetEnvironment()}, nil
}

// CancelReferenceDelete implements ExecutionProviderService.
func (h *Handler) CancelReferenceDelete(ctx context.Context, in *executionv1.CancelReferenceDeleteRequest) (*executionv1.CancelReferenceDeleteResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.CancelReferenceDelete, func(c *controlv1.Caller) *controlv1.CancelReferenceDeleteRequest {
		return &controlv1.CancelReferenceDeleteRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.CancelReferenceDeleteResponse{Environment: reply.GetEnvironment(), Reference: reply.GetReference()}, nil
}

// ListReferenceIntents implements ExecutionProviderService.
func (h *Handler) ListReferenceIntents(ctx context.Context, in *executionv1.ListReferenceIntentsRequest) (*executionv1.ListReferenceIntentsResponse, error) {
	return forward(ctx, h, in, h.b.Control.ListReferenceIntents, func(c *controlv1.Caller) *controlv1.ListReferenceIntentsRequest {
		return &controlv1.ListReferenceIntentsRequest{Caller: c, Request: in}
	})
}

// AcquireRun implements ExecutionProviderService: the environment grant is verified here,
// the claim taken by the controller, and the run grant signed here.
func (h *Handler) AcquireRun(ctx context.Context, in *executionv1.AcquireRunRequest) (*executionv1.AcquireRunResponse, error) {
	c, cl, err := h.begin(ctx, in)
	if err != nil {
		return nil, err
	}
	token, err := checkToken("environment_grant", in.GetEnvironmentGrant())
	if err != nil {
		return nil, err
	}
	ref, err := checkRef("environment", in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	v, err := h.verifyEnvironmentGrant(ctx, cl, token, ref)
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(in)
	req.EnvironmentGrant = nil
	reply, err := h.b.Control.AcquireRun(ctx, &controlv1.AcquireRunRequest{Caller: c, Request: req, Grant: verifiedGrant(v)})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, reply.GetEnvironment().GetRef(), func(env *executionv1alpha1.ExecutionEnvironment) bool {
		return env.Status.ActiveRun != nil && env.Status.ActiveRun.ClaimID == reply.GetRun().GetClaimId()
	})
	g, err := h.issueRunGrant(cl, reply)
	if err != nil {
		return nil, err
	}
	return &executionv1.AcquireRunResponse{Environment: reply.GetEnvironment(), Run: reply.GetRun(), RunGrant: g}, nil
}

// RenewRun implements ExecutionProviderService.
func (h *Handler) RenewRun(ctx context.Context, in *executionv1.RenewRunRequest) (*executionv1.RenewRunResponse, error) {
	c, cl, err := h.begin(ctx, in)
	if err != nil {
		return nil, err
	}
	token, err := checkToken("run_grant", in.GetRunGrant())
	if err != nil {
		return nil, err
	}
	ref, err := checkRef("environment", in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	_, v, err := h.verifyRunGrant(ctx, cl, token, ref)
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(in)
	req.RunGrant = nil
	reply, err := h.b.Control.RenewRun(ctx, &controlv1.RenewRunRequest{Caller: c, Request: req, Grant: verifiedGrant(v)})
	if err != nil {
		return nil, err
	}
	g, err := h.issueRunGrant(cl, reply)
	if err != nil {
		return nil, err
	}
	return &executionv1.RenewRunResponse{Run: reply.GetRun(), RunGrant: g}, nil
}

// ReleaseRun implements ExecutionProviderService.
func (h *Handler) ReleaseRun(ctx context.Context, in *executionv1.ReleaseRunRequest) (*executionv1.ReleaseRunResponse, error) {
	c, cl, err := h.begin(ctx, in)
	if err != nil {
		return nil, err
	}
	token, err := checkToken("run_grant", in.GetRunGrant())
	if err != nil {
		return nil, err
	}
	ref, err := checkRef("environment", in.GetEnvironment())
	if err != nil {
		return nil, err
	}
	_, v, err := h.verifyRunGrant(ctx, cl, token, ref)
	if err != nil {
		return nil, err
	}
	req := proto.CloneOf(in)
	req.RunGrant = nil
	reply, err := h.b.Control.ReleaseRun(ctx, &controlv1.ReleaseRunRequest{Caller: c, Request: req, Grant: verifiedGrant(v)})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, in.GetEnvironment(), func(env *executionv1alpha1.ExecutionEnvironment) bool {
		return env.Status.ActiveRun == nil || env.Status.ActiveRun.ClaimID != v.Binding.ClaimID
	})
	return &executionv1.ReleaseRunResponse{Environment: reply.GetEnvironment()}, nil
}

// RetireEnvironment implements ExecutionProviderService.
func (h *Handler) RetireEnvironment(ctx context.Context, in *executionv1.RetireEnvironmentRequest) (*executionv1.RetireEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Retire, func(c *controlv1.Caller) *controlv1.RetireRequest {
		return &controlv1.RetireRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, reply.GetEnvironment().GetRef(), atLeast(reply.GetEnvironment()))
	return &executionv1.RetireEnvironmentResponse{Environment: reply.GetEnvironment()}, nil
}

// ReplaceExecutor implements ExecutionProviderService.
func (h *Handler) ReplaceExecutor(ctx context.Context, in *executionv1.ReplaceExecutorRequest) (*executionv1.ReplaceExecutorResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Replace, func(c *controlv1.Caller) *controlv1.ReplaceRequest {
		return &controlv1.ReplaceRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, reply.GetEnvironment().GetRef(), atLeast(reply.GetEnvironment()))
	return &executionv1.ReplaceExecutorResponse{Environment: reply.GetEnvironment()}, nil
}

// RevokeEnvironment implements ExecutionProviderService.
func (h *Handler) RevokeEnvironment(ctx context.Context, in *executionv1.RevokeEnvironmentRequest) (*executionv1.RevokeEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Revoke, func(c *controlv1.Caller) *controlv1.RevokeRequest {
		return &controlv1.RevokeRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, reply.GetEnvironment().GetRef(), atLeast(reply.GetEnvironment()))
	return &executionv1.RevokeEnvironmentResponse{Environment: reply.GetEnvironment()}, nil
}

// RecoverEnvironment implements ExecutionProviderService.
func (h *Handler) RecoverEnvironment(ctx context.Context, in *executionv1.RecoverEnvironmentRequest) (*executionv1.RecoverEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Recover, func(c *controlv1.Caller) *controlv1.RecoverRequest {
		return &controlv1.RecoverRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	h.observe(ctx, reply.GetEnvironment().GetRef(), atLeast(reply.GetEnvironment()))
	return &executionv1.RecoverEnvironmentResponse{Environment: reply.GetEnvironment()}, nil
}

// MigrateEnvironment implements ExecutionProviderService.
func (h *Handler) MigrateEnvironment(ctx context.Context, in *executionv1.MigrateEnvironmentRequest) (*executionv1.MigrateEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Migrate, func(c *controlv1.Caller) *controlv1.MigrateRequest {
		return &controlv1.MigrateRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.MigrateEnvironmentResponse{Environment: reply.GetEnvironment(), Migrated: reply.GetChanged()}, nil
}

// DeleteRetiredEnvironment implements ExecutionProviderService.
func (h *Handler) DeleteRetiredEnvironment(ctx context.Context, in *executionv1.DeleteRetiredEnvironmentRequest) (*executionv1.DeleteRetiredEnvironmentResponse, error) {
	_, err := forward(ctx, h, in, h.b.Control.DeleteRetired, func(c *controlv1.Caller) *controlv1.DeleteRetiredRequest {
		return &controlv1.DeleteRetiredRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.DeleteRetiredEnvironmentResponse{}, nil
}

// SuspendEnvironment implements ExecutionProviderService.
func (h *Handler) SuspendEnvironment(ctx context.Context, in *executionv1.SuspendEnvironmentRequest) (*executionv1.SuspendEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Suspend, func(c *controlv1.Caller) *controlv1.SuspendRequest {
		return &controlv1.SuspendRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.SuspendEnvironmentResponse{Environment: reply.GetEnvironment()}, nil
}

// DeleteEnvironment implements ExecutionProviderService.
func (h *Handler) DeleteEnvironment(ctx context.Context, in *executionv1.DeleteEnvironmentRequest) (*executionv1.DeleteEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Delete, func(c *controlv1.Caller) *controlv1.DeleteRequest {
		return &controlv1.DeleteRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.DeleteEnvironmentResponse{Environment: reply.GetEnvironment()}, nil
}

// SetEnvironmentRetention implements ExecutionProviderService.
func (h *Handler) SetEnvironmentRetention(ctx context.Context, in *executionv1.SetEnvironmentRetentionRequest) (*executionv1.SetEnvironmentRetentionResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.SetRetention, func(c *controlv1.Caller) *controlv1.SetRetentionRequest {
		return &controlv1.SetRetentionRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.SetEnvironmentRetentionResponse{Environment: reply.GetEnvironment()}, nil
}

// SetEnvironmentDeadline implements ExecutionProviderService.
func (h *Handler) SetEnvironmentDeadline(ctx context.Context, in *executionv1.SetEnvironmentDeadlineRequest) (*executionv1.SetEnvironmentDeadlineResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.SetDeadline, func(c *controlv1.Caller) *controlv1.SetDeadlineRequest {
		return &controlv1.SetDeadlineRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.SetEnvironmentDeadlineResponse{Environment: reply.GetEnvironment()}, nil
}

// ListEnvironments implements ExecutionProviderService.
func (h *Handler) ListEnvironments(ctx context.Context, in *executionv1.ListEnvironmentsRequest) (*executionv1.ListEnvironmentsResponse, error) {
	return forward(ctx, h, in, h.b.Control.ListEnvironments, func(c *controlv1.Caller) *controlv1.ListEnvironmentsRequest {
		return &controlv1.ListEnvironmentsRequest{Caller: c, Request: in}
	})
}

// GetUsage implements ExecutionProviderService.
func (h *Handler) GetUsage(ctx context.Context, in *executionv1.GetUsageRequest) (*executionv1.GetUsageResponse, error) {
	return forward(ctx, h, in, h.b.Control.GetUsage, func(c *controlv1.Caller) *controlv1.GetUsageRequest {
		return &controlv1.GetUsageRequest{Caller: c, Request: in}
	})
}

// ListUsage implements ExecutionProviderService.
func (h *Handler) ListUsage(ctx context.Context, in *executionv1.ListUsageRequest) (*executionv1.ListUsageResponse, error) {
	return forward(ctx, h, in, h.b.Control.ListUsage, func(c *controlv1.Caller) *controlv1.ListUsageRequest {
		return &controlv1.ListUsageRequest{Caller: c, Request: in}
	})
}

// ResumeEnvironment implements ExecutionProviderService.
func (h *Handler) ResumeEnvironment(ctx context.Context, in *executionv1.ResumeEnvironmentRequest) (*executionv1.ResumeEnvironmentResponse, error) {
	reply, err := forward(ctx, h, in, h.b.Control.Resume, func(c *controlv1.Caller) *controlv1.ResumeRequest {
		return &controlv1.ResumeRequest{Caller: c, Request: in}
	})
	if err != nil {
		return nil, err
	}
	return &executionv1.ResumeEnvironmentResponse{Environment: reply.GetEnvironment()}, nil
}

// begin returns the control API's caller and the authenticated client.
func (h *Handler) begin(ctx context.Context, in proto.Message) (*controlv1.Caller, security.Client, error) {
	cl, err := client(ctx)
	if err != nil {
		return nil, cl, err
	}
	if err := checkFields(in); err != nil {
		return nil, cl, err
	}
	return &controlv1.Caller{ClientUri: string(cl.Identity), RequestId: RequestID(ctx)}, cl, nil
}

// beginGranting is begin for a call that answers with a grant it signs: without security
// material it could sign none, so it refuses before the controller acts (a refusal leaves
// nothing behind).
func (h *Handler) beginGranting(ctx context.Context, in proto.Message) (*controlv1.Caller, security.Client, error) {
	c, cl, err := h.begin(ctx, in)
	if err == nil {
		_, err = h.material()
	}
	return c, cl, err
}

// forward makes one control call for the authenticated caller.
func forward[Req, Reply any](ctx context.Context, h *Handler, in proto.Message, call func(context.Context, Req, ...grpc.CallOption) (Reply, error), build func(*controlv1.Caller) Req) (Reply, error) {
	c, _, err := h.begin(ctx, in)
	if err != nil {
		var zero Reply
		return zero, err
	}
	return call(ctx, build(c))
}
