package gateway

import (
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/usage"
	"github.com/execplane/execplane/pkg/ident"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// checkFields refuses a control request with a malformed identifier or owner field before
// anything is forwarded: INVALID_ARGUMENT naming the field, with its reason, never the
// transport limit of a later hop answering for it. The controller's store checks the same
// fields with the same rules (pkg/ident) again. Grants and data requests are checked where
// they are read (checkToken, checkRef, protocol).
func checkFields(in proto.Message) error {
	var f ident.Fields
	switch r := in.(type) {
	case *executionv1.EnsureEnvironmentRequest:
		f.Identifier("operation_id", r.GetOperationId())
		owner(&f, "owner", r.GetOwner())
		f.Identifier("binding_id", r.GetBindingId())
		f.DNSLabel("profile", r.GetProfile())
		f.Digest("expected_profile_digest", r.GetExpectedProfileDigest())
		f.Metadata("metadata", r.GetMetadata())
		if d := r.GetDeadline(); d != nil {
			deadline(&f, "deadline", d)
		}
		if r.GetFromSnapshot() != "" {
			f.DNSLabel("from_snapshot", r.GetFromSnapshot())
		}
	case *executionv1.CreateSnapshotRequest:
		f.Identifier("operation_id", r.GetOperationId())
		t := r.GetTarget()
		owner(&f, "target.owner", t.GetOwner())
		ref(&f, "target.environment", t.GetEnvironment())
		f.Identifier("target.binding_id", t.GetBindingId())
		f.DNSLabel("name", r.GetName())
	case *executionv1.GetSnapshotRequest:
		owner(&f, "owner", r.GetOwner())
		f.DNSLabel("name", r.GetName())
	case *executionv1.ListSnapshotsRequest:
		owner(&f, "owner", r.GetOwner())
	case *executionv1.DeleteSnapshotRequest:
		f.Identifier("operation_id", r.GetOperationId())
		owner(&f, "owner", r.GetOwner())
		f.DNSLabel("name", r.GetName())
	case *executionv1.GetUsageRequest:
		return usage.CheckGet(r)
	case *executionv1.ListUsageRequest:
		return usage.CheckList(r)
	case *executionv1.ListEnvironmentsRequest:
		owner(&f, "owner", r.GetOwner())
		if len(r.GetLifecycle()) > len(executionv1.LifecycleState_name) {
			f.Fail("lifecycle", "names at most every state once")
		}
		if r.GetBindingId() != "" {
			f.Identifier("binding_id", r.GetBindingId())
		}
		f.Metadata("metadata", r.GetMetadata())
		f.PageSize("page_size", int(min(r.GetPageSize(), ident.MaxPageSize+1)))
		f.PageToken("page_token", r.GetPageToken())
	case *executionv1.SetEnvironmentDeadlineRequest:
		f.Identifier("operation_id", r.GetOperationId())
		t := r.GetTarget()
		owner(&f, "target.owner", t.GetOwner())
		ref(&f, "target.environment", t.GetEnvironment())
		f.Identifier("target.binding_id", t.GetBindingId())
		if d := r.GetDeadline(); d != nil {
			deadline(&f, "deadline", d)
		}
	case *executionv1.AttachEnvironmentRequest:
		owner(&f, "owner", r.GetOwner())
		f.Identifier("binding_id", r.GetBindingId())
		ref(&f, "environment", r.GetEnvironment())
	case *executionv1.ReserveSuccessorRequest:
		f.Identifier("operation_id", r.GetOperationId())
		owner(&f, "owner", r.GetOwner())
		ref(&f, "environment", r.GetEnvironment())
		f.Identifier("source_binding_id", r.GetSourceBindingId())
		f.Identifier("successor_binding_id", r.GetSuccessorBindingId())
	case interface {
		GetOperationId() string
		GetTarget() *executionv1.ReferenceTarget
	}: // the reference steps
		f.Identifier("operation_id", r.GetOperationId())
		t := r.GetTarget()
		owner(&f, "target.owner", t.GetOwner())
		ref(&f, "target.environment", t.GetEnvironment())
		f.Identifier("target.binding_id", t.GetBindingId())
	case *executionv1.ListReferenceIntentsRequest:
		if r.GetOwner() != nil {
			owner(&f, "owner", r.GetOwner())
		}
		f.PageSize("page_size", int(min(r.GetPageSize(), ident.MaxPageSize+1)))
		f.PageToken("page_token", r.GetPageToken())
	case *executionv1.AcquireRunRequest: // the environment: checkRef, where the grant is read
		f.Identifier("operation_id", r.GetOperationId())
		f.Identifier("run_id", r.GetRunId())
	case interface {
		GetOperationId() string
		GetRunGrant() *executionv1.Grant
		GetEnvironment() *executionv1.EnvironmentRef
	}: // RenewRun, ReleaseRun; the environment: checkRef, where the grant is read
		f.Identifier("operation_id", r.GetOperationId())
	case interface {
		GetOperationId() string
		GetEnvironment() *executionv1.EnvironmentRef
		GetPreconditions() *executionv1.AdminPreconditions
	}: // the administrative calls
		f.Identifier("operation_id", r.GetOperationId())
		ref(&f, "environment", r.GetEnvironment())
		if p := r.GetPreconditions(); p != nil {
			if p.PodUid != nil && p.GetPodUid() != "" { // "" asserts there is no executor
				f.UUID("preconditions.pod_uid", p.GetPodUid())
			}
			if p.PvcUid != nil {
				f.UUID("preconditions.pvc_uid", p.GetPvcUid())
			}
		}
		if withReason, ok := in.(interface{ GetReason() string }); ok {
			f.Reason(withReason.GetReason())
		}
	}
	return f.Err()
}

func deadline(f *ident.Fields, field string, d *executionv1.Deadline) {
	if err := d.GetAfter().CheckValid(); err != nil {
		f.Fail(field+".after", "is required")
	} else {
		f.Deadline(field+".after", d.GetAfter().AsDuration())
	}
	if a := d.GetAction(); a != executionv1.DeadlineAction_DEADLINE_ACTION_DELETE && a != executionv1.DeadlineAction_DEADLINE_ACTION_SUSPEND {
		f.Fail(field+".action", "must be DELETE or SUSPEND")
	}
}

func owner(f *ident.Fields, field string, o *executionv1.Owner) {
	f.Owner(field, o.GetIssuer(), o.GetSubject())
}

func ref(f *ident.Fields, field string, r *executionv1.EnvironmentRef) {
	f.Ref(field, ident.EnvironmentRef{Name: r.GetId(), UID: r.GetRevision()})
}
