package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/ident"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// LabelProfile carries an environment's profile, for operators' selectors.
const LabelProfile = "execution.mecatl.dev/profile"

// Ensure returns the binding's environment, creating it from the profile when absent, and
// makes sure the binding holds a reference on it (PendingCreate until committed). The name is
// derived from (client, owner, binding): any number of concurrent identical calls create
// exactly one object. A binding that already has an environment from another request (other
// profile or pinned digest) is apierror.ErrAlreadyExists.
func (s *Store) Ensure(ctx context.Context, in EnsureInput) (*Result, error) {
	var c checker
	c.caller(in.Caller)
	c.Identifier("operation_id", in.OperationID)
	c.owner("owner", in.Owner)
	c.Identifier("binding_id", in.BindingID)
	c.DNSLabel("profile", in.Profile)
	c.Digest("expected_profile_digest", in.ExpectedProfileDigest)
	c.Metadata("metadata", in.Metadata)
	if in.Deadline != nil {
		c.deadline("deadline", *in.Deadline)
	}
	if in.FromSnapshot != "" {
		c.DNSLabel("from_snapshot", in.FromSnapshot)
	}
	if c.Err() != nil {
		return nil, c.Err()
	}
	if !in.Caller.Capabilities.MayAttestOwner {
		return nil, fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	entry, ok := s.cfg.Profiles.Get(in.Profile)
	if !ok {
		return nil, fmt.Errorf("%w: profile", apierror.ErrNotFound)
	}
	if in.ExpectedProfileDigest != "" && in.ExpectedProfileDigest != entry.Digest {
		return nil, apierror.ErrProfileMismatch
	}
	ownerHash := OwnerHash(in.Owner)
	name := EnvironmentName(in.Caller.Client, ownerHash, in.BindingID)
	request := []string{ident.ClientHash(in.Caller.Client), ownerHash, in.BindingID, in.Profile, in.ExpectedProfileDigest}
	if len(in.Metadata) > 0 {
		// Only when there is some: the fingerprints of environments created before
		// metadata existed stay what they were.
		request = append(request, metadataKey(in.Metadata))
	}
	if in.FromSnapshot != "" {
		// Likewise only when set.
		request = append(request, "from-snapshot", in.FromSnapshot)
	}
	fingerprint := hashFields("ensure", request...)

	clientHash := ident.ClientHash(in.Caller.Client)
	// The binding's deleted environment makes room for its next one.
	removed, err := s.clearTombstone(ctx, name, clientHash, ownerHash)
	if err != nil {
		return nil, err
	}
	first, err := s.create(ctx, name, in, ownerHash, fingerprint, entry.Digest, removed)
	if err != nil {
		return nil, err
	}
	created := first != nil
	r, err := s.mutate(ctx, mutation{
		op: "Ensure", id: in.OperationID, name: name, first: first, provision: created,
		args: append([]string{in.Caller.Client}, request[1:]...),
		visible: func(env *executionv1alpha1.ExecutionEnvironment) error {
			if env.Spec.ClientHash != clientHash || env.Spec.OwnerHash != ownerHash {
				return apierror.ErrNotFound // any incarnation: Ensure names none
			}
			return nil
		},
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (bool, error) {
			if deleting(env) {
				// Its tombstone is removed by the next Ensure once the deletion completed.
				return false, notReady("the binding's environment is being deleted: Ensure again once it is")
			}
			if env.Spec.RequestFingerprint != fingerprint {
				return false, fmt.Errorf("%w: the binding holds an environment from another request", apierror.ErrAlreadyExists)
			}
			// Only the call that created the object reports it (a creator that died before
			// its first status write reports nothing: the object is there either way).
			r.Changed = created
			if env.Status.FenceState == "" {
				env.Status.FenceState = executionv1alpha1.FenceHealthy
			}
			// A suspended environment resumes; one that cannot (fenced, profile changed)
			// is answered as it is, its status saying why.
			resumed, err := s.resume(env, in.OperationID, reasonResumedByEnsure, now)
			if err != nil {
				resumed = false
			}
			if i := refIndex(env, in.BindingID); i >= 0 {
				r.Reference = &env.Status.References[i]
				return resumed, nil
			}
			if err := acceptingReferences(env); err != nil {
				return false, err
			}
			if len(env.Status.References) >= executionv1alpha1.MaxReferences {
				return false, fmt.Errorf("%w: %d references", apierror.ErrLimitExceeded, executionv1alpha1.MaxReferences)
			}
			r.Reference = addRef(env, executionv1alpha1.Reference{BindingID: in.BindingID, State: executionv1alpha1.ReferencePendingCreate, OperationID: in.OperationID, UpdatedAt: now})
			if in.Deadline != nil && env.Status.Deadline == nil {
				// With the binding's reference, in the same write: a creator that died
				// before it leaves neither, and its retry sets both.
				env.Status.Deadline = newDeadline(*in.Deadline, in.BindingID, in.OperationID, now)
			}
			return true, nil
		},
		receipt: func(rc *executionv1alpha1.Receipt, r *Result) { rc.Created = r.Changed },
		replay: func(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result) error {
			r.Changed = rc.Created
			if i := refIndex(env, in.BindingID); i >= 0 {
				r.Reference = &env.Status.References[i]
			}
			return nil
		},
	})
	return r, err
}

// create makes the environment object when it does not exist, within the profile's
// capacity. Capacity is exact within the leader: a slot is reserved (counted together with
// objects the cache has not delivered yet) before the create and given back if it fails;
// the create itself runs outside that lock, so that Ensures of different bindings do not
// wait for each other's requests. Identical calls serialise on the name. It returns the
// object it created, or nil when the environment existed. The cache's object of UID removed
// (a tombstone just deleted) counts as absent.
func (s *Store) create(ctx context.Context, name string, in EnsureInput, ownerHash, fingerprint, digest string, removed types.UID) (*executionv1alpha1.ExecutionEnvironment, error) {
	// The cache answers a replay without a request; a miss is settled by the create itself
	// (AlreadyExists), so a new environment costs one request, not a read before it.
	cached := func() bool {
		env, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).Get(name)
		return err == nil && (removed == "" || env.UID != removed)
	}
	if cached() {
		return nil, nil
	}
	var from *executionv1alpha1.WorkspaceSource
	if in.FromSnapshot != "" {
		snap, err := s.restorable(ctx, SnapshotTarget{Caller: in.Caller, Owner: in.Owner, Name: in.FromSnapshot})
		if err != nil {
			return nil, err
		}
		from = &executionv1alpha1.WorkspaceSource{Snapshot: snap.Name, SnapshotUID: string(snap.UID)}
	}
	unlock := s.locks.Lock(name)
	defer unlock()
	// The quotas first: a refusal is the tenant's answer, and a slot of the profile's
	// capacity is not held meanwhile by a call its quota refuses.
	admitted := Admitted{ClientHash: ident.ClientHash(in.Caller.Client), OwnerHash: ownerHash, Name: name, StorageBytes: s.storageOf(in.Profile)}
	if s.cfg.Admission != nil {
		if err := s.cfg.Admission.AdmitEnvironment(ctx, admitted); err != nil {
			return nil, err
		}
	}
	reserved, err := s.reserve(ctx, name, in.Profile, removed)
	if err != nil && s.cfg.Admission != nil {
		s.cfg.Admission.Forget(context.WithoutCancel(ctx), admitted)
	}
	if err != nil || !reserved {
		return nil, err // an environment that exists stays counted
	}
	env := &executionv1alpha1.ExecutionEnvironment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: s.cfg.Namespace,
			Labels:     map[string]string{LabelProfile: in.Profile},
			Finalizers: []string{s.cfg.Finalizer}},
		Spec: executionv1alpha1.ExecutionEnvironmentSpec{
			SchemaVersion: executionv1alpha1.CurrentSchemaVersion, OwnerHash: ownerHash, ClientHash: ident.ClientHash(in.Caller.Client),
			BindingID: in.BindingID, RequestFingerprint: fingerprint, Profile: in.Profile, ProfileDigest: digest,
			CallerMetadata: maps.Clone(in.Metadata), From: from,
		},
	}
	created, err := s.client().Create(ctx, env, metav1.CreateOptions{})
	if err != nil {
		s.capMu.Lock()
		delete(s.created, name)
		s.capMu.Unlock()
		if apierrors.IsAlreadyExists(err) {
			return nil, nil
		}
		if s.cfg.Admission != nil {
			s.cfg.Admission.Forget(context.WithoutCancel(ctx), admitted)
		}
		return nil, err
	}
	return created, nil
}

// reserve takes a capacity slot of the profile for name: false when the environment
// already exists (created here, or shown by the cache), an error at capacity.
func (s *Store) reserve(ctx context.Context, name, profile string, removed types.UID) (bool, error) {
	s.capMu.Lock()
	defer s.capMu.Unlock()
	if _, mine := s.created[name]; mine {
		return false, nil
	}
	if env, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).Get(name); err == nil && (removed == "" || env.UID != removed) {
		return false, nil
	}
	entry, _ := s.cfg.Profiles.Get(profile)
	n, err := s.count(profile)
	if err != nil {
		return false, err
	}
	if int64(n) >= entry.Spec.MaxEnvironments {
		// At capacity: an environment the cache has not shown yet needs no slot either.
		if _, err := s.client().Get(ctx, name, metav1.GetOptions{}); err == nil {
			return false, nil
		} else if !apierrors.IsNotFound(err) {
			return false, err
		}
		return false, fmt.Errorf("%w: profile %s is at its capacity of %d environments", apierror.ErrLimitExceeded, profile, entry.Spec.MaxEnvironments)
	}
	s.created[name] = profile
	return true, nil
}

// count is the number of environments of a profile: the cache's, plus those created here
// that it has not delivered yet. Called with capMu held.
func (s *Store) count(profile string) (int, error) {
	list, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return 0, err
	}
	seen := make(map[string]bool, len(list))
	n := 0
	for _, env := range list {
		seen[env.Name] = true
		if env.Spec.Profile == profile && !env.Status.Deleted() { // a tombstone holds nothing
			n++
		}
	}
	for name, p := range s.created {
		if seen[name] {
			delete(s.created, name) // the cache has it now
		} else if p == profile {
			n++
		}
	}
	return n, nil
}

// checkAttach validates a read of one binding's reference, for an owner.
func checkAttach(in AttachInput) error {
	var c checker
	c.caller(in.Caller)
	c.owner("owner", in.Owner)
	c.Identifier("binding_id", in.BindingID)
	c.Ref("environment", in.Environment)
	if in.WaitReady < 0 || in.WaitReady > MaxAttachWait {
		c.Fail("wait_ready", fmt.Sprintf("must be between 0 and %s", MaxAttachWait))
	}
	if c.Err() != nil {
		return c.Err()
	}
	if !in.Caller.Capabilities.MayAttestOwner {
		return fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	return nil
}

// Attach returns an environment the binding holds a reference on. It writes nothing, except
// to resume a suspended environment. With WaitReady it answers once the environment is
// ready or cannot become so without another call, or once WaitReady has passed.
func (s *Store) Attach(ctx context.Context, in AttachInput) (*Result, error) {
	if err := checkAttach(in); err != nil {
		return nil, err
	}
	var deadline time.Time
	if in.WaitReady > 0 {
		deadline = s.cfg.Now().Add(in.WaitReady)
	}
	return s.attach(ctx, in, deadline)
}

func (s *Store) attach(ctx context.Context, in AttachInput, deadline time.Time) (*Result, error) {
	env, err := s.client().Get(ctx, in.Environment.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierror.ErrNotFound
	}
	if err != nil {
		return nil, err
	}
	visible := ownedBy(in.Caller, in.Owner, in.Environment)
	if err := visible(env); err != nil {
		return nil, err
	}
	i := refIndex(env, in.BindingID)
	if i < 0 || env.Status.References[i].State == executionv1alpha1.ReferencePendingDelete {
		return nil, notReady("the binding holds no usable reference on the environment")
	}
	if env.Status.Suspended() {
		// Attaching to a suspended environment resumes it: the one write Attach makes.
		if err := s.resumeSuspended(ctx, in.Environment.Name, reasonResumedByAttach, visible); err != nil {
			return nil, err
		}
		return s.attach(ctx, in, deadline)
	}
	if left := deadline.Sub(s.cfg.Now()); left > 0 && !settledForAttach(env) {
		s.awaitSettled(ctx, env.Name, env.UID, left)
		if ctx.Err() == nil && s.cfg.Now().Before(deadline) {
			return s.attach(ctx, in, deadline) // settled (or suspended meanwhile): read it live
		}
		return s.attach(ctx, in, time.Time{}) // the wait is over: answer as it is
	}
	return &Result{Environment: env, Reference: &env.Status.References[i]}, nil
}

// acceptingReferences refuses new or re-published references on an environment whose
// deletion has begun: the binding would point at a workspace about to go.
func acceptingReferences(env *executionv1alpha1.ExecutionEnvironment) error {
	if env.DeletionTimestamp != nil {
		return notReady("the environment is being deleted")
	}
	if deleting(env) {
		return notReady("the environment is being deleted")
	}
	return nil
}

func refIndex(env *executionv1alpha1.ExecutionEnvironment, binding string) int {
	return slices.IndexFunc(env.Status.References, func(r executionv1alpha1.Reference) bool { return r.BindingID == binding })
}

// addRef inserts a reference keeping the list ordered by binding id, and returns it.
func addRef(env *executionv1alpha1.ExecutionEnvironment, ref executionv1alpha1.Reference) *executionv1alpha1.Reference {
	i, _ := slices.BinarySearchFunc(env.Status.References, ref.BindingID, func(r executionv1alpha1.Reference, b string) int {
		switch {
		case r.BindingID < b:
			return -1
		case r.BindingID > b:
			return 1
		}
		return 0
	})
	env.Status.References = slices.Insert(env.Status.References, i, ref)
	return &env.Status.References[i]
}

// storageOf is the workspace claim size of a profile's environments (0 when unknown).
func (s *Store) storageOf(profile string) int64 {
	entry, ok := s.cfg.Profiles.Get(profile)
	if !ok || entry.Spec.StorageSize == nil {
		return 0
	}
	return entry.Spec.StorageSize.Value()
}
