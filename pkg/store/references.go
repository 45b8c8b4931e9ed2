package store

import (
	"context"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
)

// referenceStep is one transition of a binding's reference: the states it may start from,
// and what it does.
type referenceStep struct {
	op   string
	from []executionv1alpha1.ReferenceState
	// to is the new state; "" removes the reference.
	to executionv1alpha1.ReferenceState
}

var (
	stepRelease       = referenceStep{op: "ReleaseReference", from: []executionv1alpha1.ReferenceState{executionv1alpha1.ReferencePublished}}
	stepCommit        = referenceStep{op: "CommitReference", from: []executionv1alpha1.ReferenceState{executionv1alpha1.ReferencePendingCreate, executionv1alpha1.ReferenceReserveSuccessor}, to: executionv1alpha1.ReferencePublished}
	stepAbort         = referenceStep{op: "AbortReference", from: []executionv1alpha1.ReferenceState{executionv1alpha1.ReferencePendingCreate, executionv1alpha1.ReferenceReserveSuccessor}}
	stepPrepareDelete = referenceStep{op: "PrepareReferenceDelete", from: []executionv1alpha1.ReferenceState{executionv1alpha1.ReferencePublished}, to: executionv1alpha1.ReferencePendingDelete}
	stepConfirmDelete = referenceStep{op: "ConfirmReferenceDelete", from: []executionv1alpha1.ReferenceState{executionv1alpha1.ReferencePendingDelete}}
	stepCancelDelete  = referenceStep{op: "CancelReferenceDelete", from: []executionv1alpha1.ReferenceState{executionv1alpha1.ReferencePendingDelete}, to: executionv1alpha1.ReferencePublished}
)

// ReleaseReference removes a published reference.
func (s *Store) ReleaseReference(ctx context.Context, in ReferenceInput) (*Result, error) {
	return s.referenceStep(ctx, in, stepRelease)
}

// CommitReference publishes a PendingCreate or ReserveSuccessor reference.
func (s *Store) CommitReference(ctx context.Context, in ReferenceInput) (*Result, error) {
	return s.referenceStep(ctx, in, stepCommit)
}

// AbortReference removes a PendingCreate or ReserveSuccessor reference.
func (s *Store) AbortReference(ctx context.Context, in ReferenceInput) (*Result, error) {
	return s.referenceStep(ctx, in, stepAbort)
}

// PrepareReferenceDelete marks a published reference PendingDelete (the intent survives a
// crash of the caller, see ListReferenceIntents).
func (s *Store) PrepareReferenceDelete(ctx context.Context, in ReferenceInput) (*Result, error) {
	return s.referenceStep(ctx, in, stepPrepareDelete)
}

// ConfirmReferenceDelete removes a PendingDelete reference.
func (s *Store) ConfirmReferenceDelete(ctx context.Context, in ReferenceInput) (*Result, error) {
	return s.referenceStep(ctx, in, stepConfirmDelete)
}

// CancelReferenceDelete publishes a PendingDelete reference again.
func (s *Store) CancelReferenceDelete(ctx context.Context, in ReferenceInput) (*Result, error) {
	return s.referenceStep(ctx, in, stepCancelDelete)
}

func checkReferenceInput(in ReferenceInput) error {
	var c checker
	c.caller(in.Caller)
	c.Identifier("operation_id", in.OperationID)
	c.owner("owner", in.Owner)
	c.Ref("environment", in.Environment)
	c.Identifier("binding_id", in.BindingID)
	if c.Err() != nil {
		return c.Err()
	}
	if !in.Caller.Capabilities.MayAttestOwner {
		return fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	return nil
}

func (s *Store) referenceStep(ctx context.Context, in ReferenceInput, step referenceStep) (*Result, error) {
	if err := checkReferenceInput(in); err != nil {
		return nil, err
	}
	return s.mutate(ctx, mutation{
		op: step.op, id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.BindingID},
		visible: ownedBy(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			i := refIndex(env, in.BindingID)
			if i < 0 {
				return false, fmt.Errorf("%w: reference", apierror.ErrNotFound)
			}
			ref := &env.Status.References[i]
			if step.to == executionv1alpha1.ReferencePublished {
				if err := acceptingReferences(env); err != nil {
					return false, err
				}
			}
			if step.op == stepCommit.op && ref.State == executionv1alpha1.ReferencePublished {
				// Already what the commit asks for: callers of one binding that raced their
				// Ensures each commit, and each is answered with the published reference.
				r.Reference = ref
				return false, nil
			}
			if !slices.Contains(step.from, ref.State) {
				return false, notReady(fmt.Sprintf("%s needs a reference in state %v, it is %s", step.op, step.from, ref.State))
			}
			if step.to == "" {
				env.Status.References = slices.Delete(env.Status.References, i, i+1)
				return true, nil
			}
			ref.State, ref.OperationID, ref.UpdatedAt = step.to, in.OperationID, now
			if step.to == executionv1alpha1.ReferencePublished {
				ref.SourceBindingID = ""
			}
			r.Reference = ref
			return true, nil
		},
		replay: func(env *executionv1alpha1.ExecutionEnvironment, _ executionv1alpha1.Receipt, r *Result) error {
			if i := refIndex(env, in.BindingID); i >= 0 && step.to != "" {
				r.Reference = &env.Status.References[i]
			}
			return nil
		},
	})
}

// ReserveSuccessor adds a ReserveSuccessor reference for a new binding that will succeed a
// published one; the source keeps its reference until it releases it.
func (s *Store) ReserveSuccessor(ctx context.Context, in ReserveSuccessorInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.Identifier("operation_id", in.OperationID)
	c.owner("owner", in.Owner)
	c.Ref("environment", in.Environment)
	c.Identifier("source_binding_id", in.SourceBindingID)
	c.Identifier("successor_binding_id", in.SuccessorBindingID)
	if in.SourceBindingID == in.SuccessorBindingID {
		c.Fail("successor_binding_id", "must differ from source_binding_id")
	}
	if c.Err() != nil {
		return nil, c.Err()
	}
	if !in.Caller.Capabilities.MayAttestOwner {
		return nil, fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	return s.mutate(ctx, mutation{
		op: "ReserveSuccessor", id: in.OperationID, name: in.Environment.Name,
		args:    []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.SourceBindingID, in.SuccessorBindingID},
		visible: ownedBy(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if err := acceptingReferences(env); err != nil {
				return false, err
			}
			src := refIndex(env, in.SourceBindingID)
			if src < 0 {
				return false, fmt.Errorf("%w: source reference", apierror.ErrNotFound)
			}
			if env.Status.References[src].State != executionv1alpha1.ReferencePublished {
				return false, notReady("the source reference is not published")
			}
			if refIndex(env, in.SuccessorBindingID) >= 0 {
				return false, fmt.Errorf("%w: the successor binding already holds a reference", apierror.ErrAlreadyExists)
			}
			if len(env.Status.References) >= executionv1alpha1.MaxReferences {
				return false, fmt.Errorf("%w: %d references", apierror.ErrLimitExceeded, executionv1alpha1.MaxReferences)
			}
			r.Reference = addRef(env, executionv1alpha1.Reference{BindingID: in.SuccessorBindingID, State: executionv1alpha1.ReferenceReserveSuccessor,
				SourceBindingID: in.SourceBindingID, OperationID: in.OperationID, UpdatedAt: now})
			return true, nil
		},
		replay: func(env *executionv1alpha1.ExecutionEnvironment, _ executionv1alpha1.Receipt, r *Result) error {
			if i := refIndex(env, in.SuccessorBindingID); i >= 0 {
				r.Reference = &env.Status.References[i]
			}
			return nil
		},
	})
}

// ListReferenceIntents pages through the non-published references on the caller's
// environments (optionally one owner's), ordered by environment name then binding: the feed
// a client replays after a crash to finish or abort what it started. It reads the leader's
// cache.
func (s *Store) ListReferenceIntents(ctx context.Context, in ListIntentsInput) (*IntentPage, error) {
	var c checker
	c.caller(in.Caller)
	if in.Owner != nil {
		c.owner("owner", *in.Owner)
	}
	c.PageSize("page_size", in.PageSize)
	after, ok := decodePageToken(in.PageToken)
	if !ok {
		c.Fail("page_token", "is not a token this API issued")
	}
	if c.Err() != nil {
		return nil, c.Err()
	}
	if in.Owner != nil && !in.Caller.Capabilities.MayAttestOwner {
		return nil, fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	size := in.PageSize
	if size == 0 {
		size = defPageSize
	}
	envs, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil, err
	}
	client := ident.ClientHash(in.Caller.Client)
	owner := ""
	if in.Owner != nil {
		owner = OwnerHash(*in.Owner)
	}
	var all []Intent
	for _, env := range envs {
		if env.Spec.ClientHash != client || (owner != "" && env.Spec.OwnerHash != owner) {
			continue
		}
		for _, ref := range env.Status.References {
			if ref.State != executionv1alpha1.ReferencePublished {
				all = append(all, Intent{Environment: ident.EnvironmentRef{Name: env.Name, UID: string(env.UID)}, Reference: ref})
			}
		}
	}
	slices.SortFunc(all, func(a, b Intent) int {
		return strings.Compare(a.Environment.Name+"\x00"+a.Reference.BindingID, b.Environment.Name+"\x00"+b.Reference.BindingID)
	})
	start, _ := slices.BinarySearchFunc(all, after, func(i Intent, key string) int {
		k := i.Environment.Name + "\x00" + i.Reference.BindingID
		if k <= key {
			return -1
		}
		return 1
	})
	if after == "" {
		start = 0
	}
	page := &IntentPage{}
	end := min(start+size, len(all))
	page.Intents = all[start:end]
	if end < len(all) {
		last := all[end-1]
		page.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(last.Environment.Name + "\x00" + last.Reference.BindingID))
	}
	return page, nil
}

// decodePageToken returns the position a token names ("" for the first page).
func decodePageToken(token string) (string, bool) {
	if token == "" {
		return "", true
	}
	if len(token) > maxPageToken {
		return "", false
	}
	raw, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return "", false
	}
	name, binding, ok := strings.Cut(string(raw), "\x00")
	return string(raw), ok && ident.IsDNSLabel(name) && ident.IsIdentifier(binding)
}

// FindReferenceIntent returns one binding's reference on one environment when it is not
// published: how a client checks a single intent after a crash.
func (s *Store) FindReferenceIntent(ctx context.Context, in AttachInput) (*Intent, error) {
	if err := checkAttach(in); err != nil {
		return nil, err
	}
	env, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).Get(in.Environment.Name)
	if err != nil {
		return nil, apierror.ErrNotFound
	}
	if err := ownedBy(in.Caller, in.Owner, in.Environment)(env); err != nil {
		return nil, err
	}
	i := refIndex(env, in.BindingID)
	if i < 0 || env.Status.References[i].State == executionv1alpha1.ReferencePublished {
		return nil, fmt.Errorf("%w: intent", apierror.ErrNotFound)
	}
	return &Intent{Environment: in.Environment, Reference: env.Status.References[i]}, nil
}
