package control

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/execplane/execplane/internal/allocation"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/usage"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/store"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Config configures a Server.
type Config struct {
	// Store returns the ledger while this replica leads, nil otherwise.
	Store func() *store.Store
	// Usage returns the usage recorder while this replica leads, nil otherwise.
	Usage func() *usage.Recorder
	// Allocations returns the quota allocator while this replica leads, nil otherwise.
	Allocations func() *allocation.Allocator
	// Current returns the current security material (policies), false when there is none.
	Current func() (*security.Bundle, bool)
	// Gateways are the identities allowed to call.
	Gateways []security.ClientIdentity
	Logger   hclog.Logger
}

// Server implements control.v1 ControlService.
type Server struct {
	controlv1.UnimplementedControlServiceServer
	cfg Config
	log hclog.Logger
}

// NewServer returns a Server; it refuses a configuration without gateways (nobody could
// call it) or without its sources.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Store == nil || cfg.Current == nil || len(cfg.Gateways) == 0 {
		return nil, errors.New("control: Store, Current and at least one gateway identity are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	return &Server{cfg: cfg, log: cfg.Logger.Named("control")}, nil
}

// maxRequestID is control.v1 Caller.request_id's bound.
const maxRequestID = 64

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// ErrNotLeader is answered by a controller replica that does not lead: UNAVAILABLE,
// retryable, so the gateway tries again (the Service routes to the leader).
var ErrNotLeader = fmt.Errorf("%w: this controller replica is not the leader", apierror.ErrUnavailable)

// errNotGateway refuses a caller that authenticated but is not a gateway.
var errNotGateway = fmt.Errorf("%w: only gateways may call the control API", security.ErrUnauthenticated)

// begin authorises the gateway, resolves the forwarded client and its policy from this
// replica's material, and returns the ledger (or ErrNotLeader).
func (s *Server) begin(ctx context.Context, c *controlv1.Caller) (*store.Store, store.Caller, error) {
	gw, ok := security.ClientFromContext(ctx)
	if !ok || !slices.Contains(s.cfg.Gateways, gw.Identity) {
		return nil, store.Caller{}, errNotGateway
	}
	if id := c.GetRequestId(); len(id) > maxRequestID || !printable(id) {
		return nil, store.Caller{}, fmt.Errorf("%w: caller.request_id: at most %d bytes of printable ASCII", apierror.ErrInvalidArgument, maxRequestID)
	}
	st := s.cfg.Store()
	if st == nil {
		return nil, store.Caller{}, ErrNotLeader
	}
	id, err := security.ParseClientIdentity(c.GetClientUri())
	if err != nil {
		return nil, store.Caller{}, fmt.Errorf("%w: caller.client_uri: must be a canonical client identity", apierror.ErrInvalidArgument)
	}
	b, ok := s.cfg.Current()
	if !ok || b == nil {
		return nil, store.Caller{}, security.ErrUnavailable
	}
	policy, ok := b.Policies().Lookup(id)
	if !ok {
		return nil, store.Caller{}, security.ErrNotInPolicy
	}
	return st, callerOf(id, policy), nil
}

// callerOf is the store's input of an authenticated client and its policy.
func callerOf(id security.ClientIdentity, p security.ClientPolicy) store.Caller {
	c := store.Caller{Client: string(id), Capabilities: store.Capabilities{MayAttestOwner: p.MayAttestOwner, Administrator: p.Administrator}}
	for _, a := range p.AdministratorFor {
		c.Capabilities.AdministratorFor = append(c.Capabilities.AdministratorFor, string(a))
	}
	return c
}

// reply runs one single-environment call and translates its outcome.
func (s *Server) reply(ctx context.Context, rpc string, c *controlv1.Caller, call func(*store.Store, store.Caller) (*store.Result, error)) (*controlv1.EnvironmentReply, error) {
	st, caller, err := s.begin(ctx, c)
	if err == nil {
		var r *store.Result
		if r, err = call(st, caller); err == nil {
			return replyOf(r), nil
		}
	}
	return nil, s.status(rpc, c, err)
}

func (s *Server) status(rpc string, c *controlv1.Caller, err error) error {
	rid := c.GetRequestId()
	if len(rid) > maxRequestID || !printable(rid) {
		rid = "" // never echo what was refused as malformed
	}
	if t := transient(err); t != err {
		s.log.Warn("control call cut short by the API server", logging.KeyRPC, rpc, logging.KeyRequestID, rid, logging.KeyError, err)
		err = t
	}
	out := apierror.Status(err, rid)
	if apierror.IsInternal(out) {
		s.log.Error("control call failed", logging.KeyRPC, rpc, logging.KeyRequestID, rid, logging.KeyError, err)
	}
	return out
}

// transient maps an API-server failure that a retry may cure — a connection reset or
// refused, an EOF, a timeout, throttling, an unavailable server — to apierror.ErrUnavailable
// (retryable): the gateway retries the call under its operation id, which replays the first
// outcome if the write was applied before the answer was lost (an API server restarting
// mid-write). Anything else is returned as it is; unknown errors stay INTERNAL.
func transient(err error) error {
	if err == nil || apierror.Of(err) != nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ne net.Error
	switch {
	case utilnet.IsConnectionReset(err), utilnet.IsConnectionRefused(err), utilnet.IsProbableEOF(err), errors.As(err, &ne),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err), apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err):
		return fmt.Errorf("%w: the API server did not answer; retry", apierror.ErrUnavailable)
	}
	return err
}

func replyOf(r *store.Result) *controlv1.EnvironmentReply {
	out := &controlv1.EnvironmentReply{Changed: r.Changed}
	if r.Environment != nil {
		out.Environment = EnvironmentView(r.Environment)
		out.OwnerHash, out.ClientHash = r.Environment.Spec.OwnerHash, r.Environment.Spec.ClientHash
	}
	out.Reference = ReferenceView(r.Reference)
	out.Run = RunView(r.Run)
	return out
}

func owner(o *executionv1.Owner) store.Owner {
	return store.Owner{Issuer: o.GetIssuer(), Subject: o.GetSubject()}
}

func envRef(r *executionv1.EnvironmentRef) ident.EnvironmentRef {
	return ident.EnvironmentRef{Name: r.GetId(), UID: r.GetRevision()}
}

func target(t *executionv1.ReferenceTarget, caller store.Caller, opID string) store.ReferenceInput {
	return store.ReferenceInput{Caller: caller, OperationID: opID, Owner: owner(t.GetOwner()), Environment: envRef(t.GetEnvironment()), BindingID: t.GetBindingId()}
}

func grantOf(g *controlv1.VerifiedGrant) authority.GrantClaims {
	return authority.GrantClaims{BindingID: g.GetBindingId(), Environment: envRef(g.GetEnvironment()), GrantGeneration: g.GetGrantGeneration(),
		Epoch: g.GetEpoch(), RunID: g.GetRunId(), ClaimID: g.GetClaimId()}
}

// preconditions converts a request's preconditions; none at all asserts nothing, and the
// store refuses the call for the ones it requires (INVALID_ARGUMENT naming them).
func preconditions(p *executionv1.AdminPreconditions) store.Preconditions {
	if p == nil {
		return store.Preconditions{}
	}
	return store.Preconditions{Epoch: p.Epoch, PodUID: p.PodUid, PVCUID: p.PvcUid, GrantGeneration: p.GrantGeneration}
}

// Ensure implements ControlService.
func (s *Server) Ensure(ctx context.Context, in *controlv1.EnsureRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Ensure", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.Ensure(ctx, store.EnsureInput{Caller: c, OperationID: r.GetOperationId(), Owner: owner(r.GetOwner()), BindingID: r.GetBindingId(),
			Profile: r.GetProfile(), ExpectedProfileDigest: r.GetExpectedProfileDigest(), Metadata: r.GetMetadata(), Deadline: deadline(r.GetDeadline()),
			FromSnapshot: r.GetFromSnapshot()})
	})
}

// Attach implements ControlService.
func (s *Server) Attach(ctx context.Context, in *controlv1.AttachRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Attach", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.Attach(ctx, store.AttachInput{Caller: c, Owner: owner(r.GetOwner()), BindingID: r.GetBindingId(), Environment: envRef(r.GetEnvironment()),
			WaitReady: ttl(r.GetWaitReady())})
	})
}

// ReleaseReference implements ControlService.
func (s *Server) ReleaseReference(ctx context.Context, in *controlv1.ReleaseReferenceRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "ReleaseReference", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.ReleaseReference(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// ReserveSuccessor implements ControlService.
func (s *Server) ReserveSuccessor(ctx context.Context, in *controlv1.ReserveSuccessorRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "ReserveSuccessor", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.ReserveSuccessor(ctx, store.ReserveSuccessorInput{Caller: c, OperationID: r.GetOperationId(), Owner: owner(r.GetOwner()),
			Environment: envRef(r.GetEnvironment()), SourceBindingID: r.GetSourceBindingId(), SuccessorBindingID: r.GetSuccessorBindingId()})
	})
}

// CommitReference implements ControlService.
func (s *Server) CommitReference(ctx context.Context, in *controlv1.CommitReferenceRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "CommitReference", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.CommitReference(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// AbortReference implements ControlService.
func (s *Server) AbortReference(ctx context.Context, in *controlv1.AbortReferenceRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "AbortReference", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.AbortReference(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// PrepareReferenceDelete implements ControlService.
func (s *Server) PrepareReferenceDelete(ctx context.Context, in *controlv1.PrepareReferenceDeleteRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "PrepareReferenceDelete", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.PrepareReferenceDelete(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// ConfirmReferenceDelete implements ControlService.
func (s *Server) ConfirmReferenceDelete(ctx context.Context, in *controlv1.ConfirmReferenceDeleteRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "ConfirmReferenceDelete", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.ConfirmReferenceDelete(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// CancelReferenceDelete implements ControlService.
func (s *Server) CancelReferenceDelete(ctx context.Context, in *controlv1.CancelReferenceDeleteRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "CancelReferenceDelete", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.CancelReferenceDelete(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// ListReferenceIntents implements ControlService.
func (s *Server) ListReferenceIntents(ctx context.Context, in *controlv1.ListReferenceIntentsRequest) (*executionv1.ListReferenceIntentsResponse, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("ListReferenceIntents", in.GetCaller(), err)
	}
	r := in.GetRequest()
	li := store.ListIntentsInput{Caller: caller, PageSize: int(min(r.GetPageSize(), 1<<20)), PageToken: r.GetPageToken()}
	if r.GetOwner() != nil {
		o := owner(r.GetOwner())
		li.Owner = &o
	}
	page, err := st.ListReferenceIntents(ctx, li)
	if err != nil {
		return nil, s.status("ListReferenceIntents", in.GetCaller(), err)
	}
	out := &executionv1.ListReferenceIntentsResponse{NextPageToken: page.NextPageToken}
	for i := range page.Intents {
		it := &page.Intents[i]
		out.Intents = append(out.Intents, &executionv1.ReferenceIntent{
			Environment: &executionv1.EnvironmentRef{Id: it.Environment.Name, Revision: it.Environment.UID},
			Reference:   ReferenceView(&it.Reference),
		})
	}
	return out, nil
}

// AcquireRun implements ControlService.
func (s *Server) AcquireRun(ctx context.Context, in *controlv1.AcquireRunRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "AcquireRun", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.AcquireRun(ctx, store.AcquireRunInput{Caller: c, OperationID: r.GetOperationId(), Grant: grantOf(in.GetGrant()),
			Environment: envRef(r.GetEnvironment()), RunID: r.GetRunId(), TTL: ttl(r.GetTtl()), Join: r.GetJoin()})
	})
}

// RenewRun implements ControlService.
func (s *Server) RenewRun(ctx context.Context, in *controlv1.RenewRunRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "RenewRun", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.RenewRun(ctx, store.RenewRunInput{Caller: c, OperationID: r.GetOperationId(), Grant: grantOf(in.GetGrant()),
			Environment: envRef(r.GetEnvironment()), TTL: ttl(r.GetTtl())})
	})
}

// ReleaseRun implements ControlService.
func (s *Server) ReleaseRun(ctx context.Context, in *controlv1.ReleaseRunRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "ReleaseRun", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.ReleaseRun(ctx, store.ReleaseRunInput{Caller: c, OperationID: r.GetOperationId(), Grant: grantOf(in.GetGrant()), Environment: envRef(r.GetEnvironment())})
	})
}

func adminInput(c store.Caller, opID string, env *executionv1.EnvironmentRef, p *executionv1.AdminPreconditions, reason string) store.AdminInput {
	return store.AdminInput{Caller: c, OperationID: opID, Environment: envRef(env), Preconditions: preconditions(p), Reason: reason}
}

// Retire implements ControlService.
func (s *Server) Retire(ctx context.Context, in *controlv1.RetireRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Retire", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.Retire(ctx, adminInput(c, r.GetOperationId(), r.GetEnvironment(), r.GetPreconditions(), r.GetReason()))
	})
}

// Replace implements ControlService.
func (s *Server) Replace(ctx context.Context, in *controlv1.ReplaceRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Replace", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.ReplaceExecutor(ctx, adminInput(c, r.GetOperationId(), r.GetEnvironment(), r.GetPreconditions(), r.GetReason()))
	})
}

// Revoke implements ControlService.
func (s *Server) Revoke(ctx context.Context, in *controlv1.RevokeRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Revoke", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.RevokeEnvironment(ctx, adminInput(c, r.GetOperationId(), r.GetEnvironment(), r.GetPreconditions(), r.GetReason()))
	})
}

// Recover implements ControlService.
func (s *Server) Recover(ctx context.Context, in *controlv1.RecoverRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Recover", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.RecoverEnvironment(ctx, adminInput(c, r.GetOperationId(), r.GetEnvironment(), r.GetPreconditions(), r.GetReason()))
	})
}

// Migrate implements ControlService.
func (s *Server) Migrate(ctx context.Context, in *controlv1.MigrateRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Migrate", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.MigrateEnvironment(ctx, store.MigrateInput{AdminInput: adminInput(c, r.GetOperationId(), r.GetEnvironment(), r.GetPreconditions(), ""),
			TargetSchemaVersion: int32(min(r.GetTargetSchemaVersion(), 1<<30))})
	})
}

// DeleteRetired implements ControlService.
func (s *Server) DeleteRetired(ctx context.Context, in *controlv1.DeleteRetiredRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "DeleteRetired", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.DeleteRetiredEnvironment(ctx, adminInput(c, r.GetOperationId(), r.GetEnvironment(), r.GetPreconditions(), r.GetReason()))
	})
}

// Suspend implements ControlService.
func (s *Server) Suspend(ctx context.Context, in *controlv1.SuspendRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Suspend", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.SuspendEnvironment(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// Resume implements ControlService.
func (s *Server) Resume(ctx context.Context, in *controlv1.ResumeRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Resume", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.ResumeEnvironment(ctx, target(r.GetTarget(), c, r.GetOperationId()))
	})
}

// Delete implements ControlService.
func (s *Server) Delete(ctx context.Context, in *controlv1.DeleteRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "Delete", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.DeleteEnvironment(ctx, store.DeleteInput{ReferenceInput: target(r.GetTarget(), c, r.GetOperationId()), Wait: ttl(r.GetWait())})
	})
}

// SetRetention implements ControlService.
func (s *Server) SetRetention(ctx context.Context, in *controlv1.SetRetentionRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "SetRetention", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.SetRetention(ctx, store.RetentionInput{ReferenceInput: target(r.GetTarget(), c, r.GetOperationId()), Retain: r.GetRetain()})
	})
}

// SetDeadline implements ControlService.
func (s *Server) SetDeadline(ctx context.Context, in *controlv1.SetDeadlineRequest) (*controlv1.EnvironmentReply, error) {
	r := in.GetRequest()
	return s.reply(ctx, "SetDeadline", in.GetCaller(), func(st *store.Store, c store.Caller) (*store.Result, error) {
		return st.SetDeadline(ctx, store.SetDeadlineInput{ReferenceInput: target(r.GetTarget(), c, r.GetOperationId()), Deadline: deadline(r.GetDeadline())})
	})
}

// ListEnvironments implements ControlService.
func (s *Server) ListEnvironments(ctx context.Context, in *controlv1.ListEnvironmentsRequest) (*executionv1.ListEnvironmentsResponse, error) {
	st, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, s.status("ListEnvironments", in.GetCaller(), err)
	}
	r := in.GetRequest()
	li := store.ListEnvironmentsInput{Caller: caller, Owner: owner(r.GetOwner()), BindingID: r.GetBindingId(), Metadata: r.GetMetadata(),
		PageSize: int(min(r.GetPageSize(), 1<<20)), PageToken: r.GetPageToken()}
	if states := r.GetLifecycle(); len(states) > 0 {
		li.Match = func(env *executionv1alpha1.ExecutionEnvironment) bool {
			return slices.Contains(states, EnvironmentView(env).GetLifecycle())
		}
	}
	page, err := st.ListEnvironments(ctx, li)
	if err != nil {
		return nil, s.status("ListEnvironments", in.GetCaller(), err)
	}
	out := &executionv1.ListEnvironmentsResponse{NextPageToken: page.NextPageToken}
	for _, env := range page.Environments {
		out.Environments = append(out.Environments, EnvironmentView(env))
	}
	return out, nil
}

// deadline converts an optional deadline: an unknown action is left empty, which the store
// refuses.
func deadline(d *executionv1.Deadline) *store.DeadlineInput {
	if d == nil {
		return nil
	}
	var action executionv1alpha1.DeadlineAction
	for a, v := range deadlineActions {
		if v == d.GetAction() {
			action = a
		}
	}
	return &store.DeadlineInput{After: ttl(d.GetAfter()), Action: action}
}

// ttl converts an optional duration (a run's TTL, Attach's wait): an unset one is 0 (the
// store's default), a malformed one an out-of-range value the store refuses.
func ttl(d *durationpb.Duration) time.Duration {
	if d == nil {
		return 0
	}
	if err := d.CheckValid(); err != nil {
		return -1
	}
	return d.AsDuration()
}
