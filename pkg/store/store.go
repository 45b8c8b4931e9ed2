package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/keyed"
	"github.com/execplane/execplane/pkg/profile"
)

// maxAttempts bounds the compare-and-swap retries of one call: conflicts come only from the
// reconciler (one write per pass) or a deposed leader, so a few re-reads settle them; past
// this the caller gets apierror.ErrConflict, which is retryable.
const maxAttempts = 8

// Config configures a Store.
type Config struct {
	Execution versioned.Interface
	// Kube reads executor Pods and workspace claims live, where an administrative decision
	// depends on whether they still exist.
	Kube kubernetes.Interface
	// Environments is the leader's informer cache, used for capacity and listing; every
	// mutation reads its object live.
	Environments execlisters.ExecutionEnvironmentLister
	Namespace    string
	Profiles     *profile.Registry
	// Finalizer is put on every environment the store creates (the controller's
	// EnvironmentFinalizer), so a plain delete never loses track of a workspace.
	Finalizer string
	Now       func() time.Time
	// NewID returns a fresh opaque id (run claim ids); crypto/rand by default.
	NewID func() string
	// Provisioner, when set, provisions an environment Ensure has just created within the
	// status write that records its first reference (the controller's pass, run in place).
	Provisioner Provisioner
	// Admission, when set, counts new and resumed environments against the operator's
	// quotas before they are written (docs/usage.md "Quotas").
	Admission Admission
}

// Admission admits environments under the operator's quotas. Each call is idempotent (an
// environment already counted is admitted again) and atomic across callers and leaders;
// a refusal wraps apierror.ErrQuotaExceeded and leaves nothing counted.
type Admission interface {
	// AdmitEnvironment counts a new environment of a client and owner, with its claim's
	// size, before it is created.
	AdmitEnvironment(ctx context.Context, in Admitted) error
	// AdmitReady counts an environment about to resume as ready.
	AdmitReady(ctx context.Context, in Admitted) error
	// Forget gives back what AdmitEnvironment counted for an environment that was not
	// created (best effort: the controller's sync gives back what it misses).
	Forget(ctx context.Context, in Admitted)
	// AdmitSnapshot counts a new snapshot's storage (Admitted.Name is its storage's name,
	// never reused) before it is created; the controller gives it back once the storage is
	// removed, and its sync once the snapshot is gone or failed.
	AdmitSnapshot(ctx context.Context, in Admitted) error
}

// Admitted names an environment for Admission.
type Admitted struct {
	ClientHash, OwnerHash, Name string
	StorageBytes                int64
}

// Provisioner runs the controller's pass over an environment before the store's write
// records it, so that one write records the reference, the workspace and the executor —
// and, with a warm pair adopted, answers Ready.
type Provisioner interface {
	// Provision holds env's key until done is called. It makes the pass's side effects (a
	// warm pair adopted, or the cold path's claim and Pod created) and returns the status
	// the pass computed from env's, the store's changes included; nil when it did nothing
	// (a failure included: the controller's own pass takes over, and finishes whatever was
	// begun). done receives what the store wrote, or nil when it wrote nothing.
	Provision(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment) (status *executionv1alpha1.ExecutionEnvironmentStatus, done func(written *executionv1alpha1.ExecutionEnvironment))
}

// Store runs the ledger's transitions. It is safe for concurrent use; it must run in one
// process at a time (the controller leader).
type Store struct {
	cfg   Config
	locks keyed.Mutex

	capMu   sync.Mutex
	created map[string]string // name → profile, created here and maybe not yet in the cache
}

// New returns a Store.
func New(cfg Config) (*Store, error) {
	if cfg.Execution == nil || cfg.Kube == nil || cfg.Environments == nil || cfg.Namespace == "" || cfg.Profiles == nil || cfg.Finalizer == "" {
		return nil, errors.New("store: Execution, Kube, Environments, Namespace, Profiles and Finalizer are required")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewID == nil {
		cfg.NewID = randomID
	}
	return &Store{cfg: cfg, created: map[string]string{}}, nil
}

func (s *Store) client() interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*executionv1alpha1.ExecutionEnvironment, error)
	UpdateStatus(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, opts metav1.UpdateOptions) (*executionv1alpha1.ExecutionEnvironment, error)
	Create(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment, opts metav1.CreateOptions) (*executionv1alpha1.ExecutionEnvironment, error)
} {
	return s.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(s.cfg.Namespace)
}

// write is the compare-and-swap of a mutation, after the Provisioner's pass when asked.
func (s *Store) write(ctx context.Context, next *executionv1alpha1.ExecutionEnvironment, provision bool) (*executionv1alpha1.ExecutionEnvironment, error) {
	if !provision || s.cfg.Provisioner == nil {
		return s.client().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	}
	status, done := s.cfg.Provisioner.Provision(ctx, next)
	if status != nil {
		next.Status = *status
	}
	written, err := s.client().UpdateStatus(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		done(nil)
	} else {
		done(written)
	}
	return written, err
}

// mutation is one ledger transition on one environment.
type mutation struct {
	// op names the RPC in receipts.
	op string
	// id is the operation id; args are the call's canonical arguments, caller included.
	id   string
	args []string
	name string
	// first, when set, is the object as the caller just created it: the first attempt
	// reads it in place of a live read.
	first *executionv1alpha1.ExecutionEnvironment
	// provision runs the Provisioner over the changed copy before it is written.
	provision bool
	// visible refuses (apierror.ErrNotFound) an environment the caller may not see or act on; it
	// runs before the receipt lookup, so a replay is authorised like a first call.
	visible func(env *executionv1alpha1.ExecutionEnvironment) error
	// apply evaluates the preconditions on a copy and changes its status. It reports
	// whether anything changed; on an error nothing is written.
	apply func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, r *Result) (changed bool, err error)
	// replay answers a call whose receipt exists.
	replay func(env *executionv1alpha1.ExecutionEnvironment, rc executionv1alpha1.Receipt, r *Result) error
	// receipt adds the outcome's values to the receipt.
	receipt func(rc *executionv1alpha1.Receipt, r *Result)
	// supersedes drops older receipts this one makes useless (a renewal replaces the
	// previous renewal of the same claim), so that a heartbeat cannot flush the ring.
	supersedes func(old, rc executionv1alpha1.Receipt) bool
}

// mutate runs m under the environment's lock: live read, authorisation, replay, apply, one
// compare-and-swap; a conflict re-runs all of it.
func (s *Store) mutate(ctx context.Context, m mutation) (*Result, error) {
	unlock := s.locks.Lock(m.name)
	defer unlock()
	argsHash := hashFields(m.op, m.args...)
	for range maxAttempts {
		env, err := m.first, error(nil)
		if m.first == nil {
			env, err = s.client().Get(ctx, m.name, metav1.GetOptions{})
		}
		m.first = nil
		if apierrors.IsNotFound(err) {
			return nil, apierror.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		if err := m.visible(env); err != nil {
			return nil, err
		}
		r := &Result{}
		if i := slices.IndexFunc(env.Status.Receipts, func(rc executionv1alpha1.Receipt) bool { return rc.OperationID == m.id }); i >= 0 {
			rc := env.Status.Receipts[i]
			if rc.Operation != m.op || rc.ArgumentsHash != argsHash {
				return nil, apierror.ErrOperationIDReused
			}
			r.Environment = env
			if m.replay != nil {
				if err := m.replay(env, rc, r); err != nil {
					return nil, err
				}
			}
			return r, nil
		}
		next := env.DeepCopy()
		now := metav1.NewTime(s.cfg.Now())
		changed, err := m.apply(next, now, r)
		if err != nil {
			return nil, err
		}
		if !changed {
			r.Environment = env
			return r, nil
		}
		rc := executionv1alpha1.Receipt{OperationID: m.id, Operation: m.op, ArgumentsHash: argsHash, RecordedAt: now}
		if m.receipt != nil {
			m.receipt(&rc, r)
		}
		if m.supersedes != nil {
			next.Status.Receipts = slices.DeleteFunc(next.Status.Receipts, func(old executionv1alpha1.Receipt) bool { return m.supersedes(old, rc) })
		}
		next.Status.Receipts = appendReceipt(next.Status.Receipts, rc)
		if err := s.admitResume(ctx, env, next); err != nil {
			return nil, err // nothing written
		}
		written, err := s.write(ctx, next, m.provision)
		if apierrors.IsConflict(err) {
			continue // re-read, re-authorise, re-evaluate
		}
		if apierrors.IsNotFound(err) {
			return nil, apierror.ErrNotFound
		}
		if err != nil {
			return nil, err
		}
		r.Environment = written
		return r, nil
	}
	return nil, fmt.Errorf("%w: %s on %s lost the compare-and-swap %d times", apierror.ErrConflict, m.op, m.name, maxAttempts)
}

// appendReceipt adds rc, newest last, dropping the oldest beyond the ring's bound.
func appendReceipt(ring []executionv1alpha1.Receipt, rc executionv1alpha1.Receipt) []executionv1alpha1.Receipt {
	ring = append(ring, rc)
	if over := len(ring) - executionv1alpha1.MaxReceipts; over > 0 {
		ring = slices.Delete(ring, 0, over)
	}
	return ring
}

// sameIncarnation refuses a request naming another UID of this name (a re-created
// environment), or a deleted one (a tombstone answers only its owner's DeleteEnvironment):
// NOT_FOUND, as for an absent one.
func sameIncarnation(env *executionv1alpha1.ExecutionEnvironment, ref ident.EnvironmentRef) error {
	if string(env.UID) != ref.UID || env.Status.Deleted() {
		return apierror.ErrNotFound
	}
	return nil
}

// ownedBy is the visibility of owner-scoped calls: the caller's own environment for this
// owner. Everything else is indistinguishable from absent.
func ownedBy(c Caller, o Owner, ref ident.EnvironmentRef) func(*executionv1alpha1.ExecutionEnvironment) error {
	owned := ownerOf(c, o, ref)
	return func(env *executionv1alpha1.ExecutionEnvironment) error {
		if err := owned(env); err != nil {
			return err
		}
		return sameIncarnation(env, ref)
	}
}

// clientOf is the visibility of grant-bearing calls: the grant's environment of the caller.
func clientOf(c Caller, g authority.GrantClaims, ref ident.EnvironmentRef) func(*executionv1alpha1.ExecutionEnvironment) error {
	client := ident.ClientHash(c.Client)
	return func(env *executionv1alpha1.ExecutionEnvironment) error {
		if env.Spec.ClientHash != client || g.Environment != ref {
			return apierror.ErrNotFound
		}
		return sameIncarnation(env, ref)
	}
}

// administered is the visibility of administrative calls: the administrator's scope.
func administered(c Caller, ref ident.EnvironmentRef) func(*executionv1alpha1.ExecutionEnvironment) error {
	return func(env *executionv1alpha1.ExecutionEnvironment) error {
		if !administers(c, env.Spec.ClientHash) {
			return apierror.ErrNotFound
		}
		return sameIncarnation(env, ref)
	}
}

// administers reports whether c administers environments created by the client whose hash
// is given (AdministratorFor compared by hash: environments store no identities in clear).
func administers(c Caller, clientHash string) bool {
	if !c.Capabilities.Administrator || clientHash == "" {
		return false
	}
	if len(c.Capabilities.AdministratorFor) == 0 {
		return true
	}
	return slices.ContainsFunc(c.Capabilities.AdministratorFor, func(id string) bool { return ident.ClientHash(id) == clientHash })
}

// admitResume counts an environment this write starts to resume as ready, before the
// write: every path that resumes (ResumeEnvironment, Ensure, Attach, AcquireRun) passes
// here.
func (s *Store) admitResume(ctx context.Context, before, after *executionv1alpha1.ExecutionEnvironment) error {
	if s.cfg.Admission == nil || !before.Status.Suspended() {
		return nil
	}
	op := after.Status.LifecycleOperation
	if op == nil || op.Kind != executionv1alpha1.LifecycleResume || !op.InProgress() {
		return nil
	}
	return s.cfg.Admission.AdmitReady(ctx, Admitted{ClientHash: after.Spec.ClientHash, OwnerHash: after.Spec.OwnerHash, Name: after.Name})
}
