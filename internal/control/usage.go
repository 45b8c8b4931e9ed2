package control

import (
	"context"
	"fmt"
	"slices"

	"google.golang.org/protobuf/types/known/timestamppb"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/allocation"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/usage"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/store"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Bounds of ReportUsage.
const (
	// maxUsageReports bounds one call: a gateway sends its series in batches of this many.
	maxUsageReports = 1000
	// maxSeriesID bounds a series id (a process id and a counter).
	maxSeriesID = 64
)

// recorder is the leader's usage recorder, or ErrNotLeader.
func (s *Server) recorder() (*usage.Recorder, error) {
	if s.cfg.Usage == nil {
		return nil, ErrNotLeader
	}
	if r := s.cfg.Usage(); r != nil {
		return r, nil
	}
	return nil, ErrNotLeader
}

// GetUsage implements ControlService.
func (s *Server) GetUsage(ctx context.Context, in *controlv1.GetUsageRequest) (*executionv1.GetUsageResponse, error) {
	out, err := s.getUsage(ctx, in)
	if err != nil {
		return nil, s.status("GetUsage", in.GetCaller(), err)
	}
	return out, nil
}

func (s *Server) getUsage(ctx context.Context, in *controlv1.GetUsageRequest) (*executionv1.GetUsageResponse, error) {
	_, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, err
	}
	rec, err := s.recorder()
	if err != nil {
		return nil, err
	}
	r := in.GetRequest()
	if err := usage.CheckGet(r); err != nil {
		return nil, err
	}
	u, err := rec.Lookup(r.GetEnvironment().GetId(), r.GetEnvironment().GetRevision())
	if err != nil {
		return nil, err
	}
	if u == nil || !visibleUsage(caller, u) {
		return nil, fmt.Errorf("%w: no usage of environment %s", apierror.ErrNotFound, r.GetEnvironment().GetId())
	}
	now := rec.Now()
	v := rec.View(u, now)
	rng := usage.NewRange(r.GetStart(), r.GetEnd(), r.GetGranularity(), now, rec.Retention())
	sp := v.Spec
	out := &executionv1.GetUsageResponse{
		Environment: &executionv1.EnvironmentRef{Id: sp.Environment.Name, Revision: string(sp.Environment.UID)},
		BindingId:   sp.BindingID, Profile: sp.Profile, OwnerHash: sp.OwnerHash, ClientHash: sp.ClientHash,
		Totals: usage.Counters(v.Status.Totals), Windows: rng.Windows(v, now, rec.Settle()), AsOf: timestamppb.New(now),
	}
	if e := v.Status.EndedAt; e != nil {
		out.EndedAt = timestamppb.New(e.Time)
	}
	return out, nil
}

// ListUsage implements ControlService.
func (s *Server) ListUsage(ctx context.Context, in *controlv1.ListUsageRequest) (*executionv1.ListUsageResponse, error) {
	out, err := s.listUsage(ctx, in)
	if err != nil {
		return nil, s.status("ListUsage", in.GetCaller(), err)
	}
	return out, nil
}

func (s *Server) listUsage(ctx context.Context, in *controlv1.ListUsageRequest) (*executionv1.ListUsageResponse, error) {
	_, caller, err := s.begin(ctx, in.GetCaller())
	if err != nil {
		return nil, err
	}
	rec, err := s.recorder()
	if err != nil {
		return nil, err
	}
	r := in.GetRequest()
	if err := usage.CheckList(r); err != nil {
		return nil, err
	}
	scope, err := listScope(caller, r)
	if err != nil {
		return nil, err
	}
	now := rec.Now()
	ledgers, err := rec.Views(scope, now)
	if err != nil {
		return nil, err
	}
	rng := usage.NewRange(r.GetStart(), r.GetEnd(), r.GetGranularity(), now, rec.Retention())
	records, next := usage.List(ledgers, scope, rng, r.GetGroupBy(), int(r.GetPageSize()), r.GetPageToken(), now, rec.Settle())
	return &executionv1.ListUsageResponse{Records: records, NextPageToken: next, AsOf: timestamppb.New(now)}, nil
}

// ReportUsage implements ControlService: a gateway's cumulative counts, kept by the
// leader's recorder for its next checkpoint.
func (s *Server) ReportUsage(ctx context.Context, in *controlv1.ReportUsageRequest) (*controlv1.ReportUsageResponse, error) {
	out, err := s.reportUsage(ctx, in)
	if err != nil {
		return nil, s.status("ReportUsage", in.GetCaller(), err)
	}
	return out, nil
}

func (s *Server) reportUsage(ctx context.Context, in *controlv1.ReportUsageRequest) (*controlv1.ReportUsageResponse, error) {
	// The caller is the gateway itself, for no client.
	if gw, ok := security.ClientFromContext(ctx); !ok || !slices.Contains(s.cfg.Gateways, gw.Identity) {
		return nil, errNotGateway
	}
	rec, err := s.recorder()
	if err != nil {
		return nil, err
	}
	reports := in.GetReports()
	var f ident.Fields
	if len(reports) > maxUsageReports {
		f.Fail("reports", fmt.Sprintf("at most %d", maxUsageReports))
	}
	for i, r := range reports {
		at := fmt.Sprintf("reports[%d]", i)
		f.DNSLabel(at+".environment", r.GetEnvironment())
		f.UUID(at+".revision", r.GetRevision())
		if !ident.IsPrintableASCII(r.GetSeries(), maxSeriesID) {
			f.Fail(at+".series", fmt.Sprintf("must be 1..%d bytes of printable ASCII", maxSeriesID))
		}
		if r.GetCommands() < 0 || r.GetBytesIn() < 0 || r.GetBytesOut() < 0 {
			f.Fail(at, "counts must not be negative")
		}
	}
	if err := f.Err(); err != nil {
		return nil, err
	}
	out := &controlv1.ReportUsageResponse{}
	now := rec.Now()
	for _, r := range reports {
		err := rec.Report(r.GetEnvironment(), types.UID(r.GetRevision()), usage.SeriesReport{
			ID: r.GetSeries(), Commands: r.GetCommands(), BytesIn: r.GetBytesIn(), BytesOut: r.GetBytesOut(), At: now,
		})
		if err != nil {
			out.UnknownSeries = append(out.UnknownSeries, r.GetSeries())
		}
	}
	return out, nil
}

// listScope decides whose usage a ListUsage caller reads: its own environments (of one
// owner, when it names one, which needs MayAttestOwner); an administrator's clients' with
// client or all_clients.
func listScope(c store.Caller, r *executionv1.ListUsageRequest) (usage.Scope, error) {
	s := usage.Scope{BindingID: r.GetBindingId()}
	if o := r.GetOwner(); o != nil {
		s.OwnerHash = store.OwnerHash(store.Owner{Issuer: o.GetIssuer(), Subject: o.GetSubject()})
	}
	admin := c.Capabilities.Administrator
	switch {
	case r.GetAllClients():
		if !admin {
			return s, fmt.Errorf("%w: all_clients is for administrators", apierror.ErrPermissionDenied)
		}
		if len(c.Capabilities.AdministratorFor) > 0 {
			s.Clients = map[string]bool{}
			for _, id := range c.Capabilities.AdministratorFor {
				s.Clients[ident.ClientHash(id)] = true
			}
		}
	case r.GetClient() != "" && ident.ClientHash(r.GetClient()) != ident.ClientHash(c.Client):
		h := ident.ClientHash(r.GetClient())
		if !admin || (len(c.Capabilities.AdministratorFor) > 0 &&
			!slices.ContainsFunc(c.Capabilities.AdministratorFor, func(id string) bool { return ident.ClientHash(id) == h })) {
			return s, fmt.Errorf("%w: another client's usage is for its administrators", apierror.ErrPermissionDenied)
		}
		s.Clients = map[string]bool{h: true}
	default:
		if r.GetOwner() != nil && !c.Capabilities.MayAttestOwner && !admin {
			return s, fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
		}
		s.Clients = map[string]bool{ident.ClientHash(c.Client): true}
	}
	return s, nil
}

// visibleUsage reports whether c may read u: the client that created it, or its administrator.
func visibleUsage(c store.Caller, u *executionv1alpha1.ExecutionUsage) bool {
	h := u.Spec.ClientHash
	if ident.ClientHash(c.Client) == h {
		return true
	}
	if !c.Capabilities.Administrator {
		return false
	}
	return len(c.Capabilities.AdministratorFor) == 0 ||
		slices.ContainsFunc(c.Capabilities.AdministratorFor, func(id string) bool { return ident.ClientHash(id) == h })
}

// AdmitCommand implements ControlService: a detached command counted against its
// environment's quotas before a gateway starts it, or given back.
func (s *Server) AdmitCommand(ctx context.Context, in *controlv1.AdmitCommandRequest) (*controlv1.AdmitCommandResponse, error) {
	taken, err := s.admitCommand(ctx, in)
	if err != nil {
		return nil, s.status("AdmitCommand", in.GetCaller(), err)
	}
	if in.GetRelease() {
		return &controlv1.AdmitCommandResponse{}, nil
	}
	return &controlv1.AdmitCommandResponse{Taken: &taken}, nil
}

func (s *Server) admitCommand(ctx context.Context, in *controlv1.AdmitCommandRequest) (bool, error) {
	if _, _, err := s.begin(ctx, in.GetCaller()); err != nil {
		return false, err
	}
	var a *allocation.Allocator
	if s.cfg.Allocations != nil {
		a = s.cfg.Allocations()
	}
	if a == nil {
		return false, ErrNotLeader
	}
	var f ident.Fields
	f.DNSLabel("environment", in.GetEnvironment())
	f.UUID("revision", in.GetRevision())
	if !ident.IsPrintableASCII(in.GetCommandId(), 128) {
		f.Fail("command_id", "must be 1..128 bytes of printable ASCII")
	}
	if err := f.Err(); err != nil {
		return false, err
	}
	return a.Command(ctx, in.GetEnvironment(), in.GetRevision(), in.GetCommandId(), in.GetRelease())
}
