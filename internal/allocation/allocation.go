// Package allocation admits environments and detached commands under the operator's
// quotas (pkg/quota): each quota scope — a client, an owner of a client — has an
// ExecutionAllocation listing what it holds, and admission is a compare-and-swap of it.
//
// Invariants:
//   - Atomic: two admissions for a scope's last slot, through any gateways and under any
//     leaders, cannot both pass — the API server's resourceVersion decides.
//   - Idempotent: an environment or command already listed is admitted again, unchanged.
//   - A refusal writes nothing (and gives back what an earlier scope of the same call
//     took), and names the quota, its limit and the use (apierror.ErrQuotaExceeded).
//   - Truthful: the leader's sync (Sync) lists every existing environment of a limited
//     scope and drops what no longer exists, so a crash between an admission and the
//     environment's creation holds a slot for at most a grace period.
package allocation

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/hashicorp/go-hclog"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/quota"
	"github.com/execplane/execplane/pkg/store"
)

// Bounds of admission.
const (
	// maxAttempts bounds the compare-and-swaps of one admission: each loser re-reads, so
	// n concurrent admissions of one scope settle in n rounds; past this the caller retries.
	maxAttempts = 64
	// grace is how long a fresh admission stands without its environment (created, or
	// resumed) being seen: a create in flight, a resume not yet written.
	grace = 2 * time.Minute
)

// Use is a scope's CPU and memory use over a window (the usage ledgers').
type Use func(clientHash, ownerHash string, window time.Duration) (cpuNanoseconds, memoryKiBSeconds int64)

// Config configures New.
type Config struct {
	Execution versioned.Interface
	// Namespace holds the allocations (the environments').
	Namespace    string
	Environments execlisters.ExecutionEnvironmentLister
	Quotas       *quota.Source
	// Use answers time quotas; nil: they are not enforced.
	Use Use
	// Storage is the claim size of a profile's environments (what Sync counts for an
	// environment admission did not see).
	Storage func(profile string) int64
	// MaxCommand is the longest a profile's detached command may run: its slot's expiry.
	MaxCommand func(profile string) time.Duration
	Logger     hclog.Logger
	Now        func() time.Time
	Metrics    *Metrics
}

// Allocator implements store.Admission.
type Allocator struct {
	cfg    Config
	log    hclog.Logger
	lister execlisters.ExecutionAllocationLister
	// snaps lists the snapshots, whose storage Sync counts.
	snaps  execlisters.ExecutionSnapshotLister
	synced []cache.InformerSynced
	start  func(<-chan struct{})
}

var _ store.Admission = (*Allocator)(nil)

// New builds an Allocator; Start starts its cache.
func New(cfg Config) (*Allocator, error) {
	if cfg.Execution == nil || cfg.Namespace == "" || cfg.Environments == nil || cfg.Quotas == nil {
		return nil, errors.New("allocation: Execution, Namespace, Environments and Quotas are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Metrics == nil {
		cfg.Metrics = NewMetrics(nil)
	}
	factory := execinformers.NewSharedInformerFactoryWithOptions(cfg.Execution, 0, execinformers.WithNamespace(cfg.Namespace))
	inf := factory.Execution().V1alpha1().ExecutionAllocations()
	snaps := factory.Execution().V1alpha1().ExecutionSnapshots()
	return &Allocator{cfg: cfg, log: cfg.Logger.Named("quota"), lister: inf.Lister(), snaps: snaps.Lister(),
		synced: []cache.InformerSynced{inf.Informer().HasSynced, snaps.Informer().HasSynced}, start: factory.Start}, nil
}

// Start starts the allocations' cache and waits for it.
func (a *Allocator) Start(ctx context.Context) error {
	a.start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), a.synced...) {
		return ctx.Err()
	}
	return nil
}

// scope is one quota scope of a call.
type scope struct {
	kind                  executionv1alpha1.AllocationScope
	clientHash, ownerHash string
	limits                quota.Limits
}

func (s scope) name() string {
	if s.kind == executionv1alpha1.AllocationClient {
		return "client-" + s.clientHash[:40]
	}
	sum := sha256.Sum256([]byte(s.clientHash + "/" + s.ownerHash))
	return "owner-" + hex.EncodeToString(sum[:20])
}

func (s scope) label() string {
	if s.kind == executionv1alpha1.AllocationClient {
		return "client"
	}
	return "owner"
}

// scopes are the limited scopes of a client's owner.
func (a *Allocator) scopes(clientHash, ownerHash string) []scope {
	l := a.cfg.Quotas.Current().ForHash(clientHash)
	var out []scope
	if !l.Client.IsZero() {
		out = append(out, scope{kind: executionv1alpha1.AllocationClient, clientHash: clientHash, limits: l.Client})
	}
	if !l.Owner.IsZero() {
		out = append(out, scope{kind: executionv1alpha1.AllocationOwner, clientHash: clientHash, ownerHash: ownerHash, limits: l.Owner})
	}
	return out
}

// AdmitEnvironment implements store.Admission.
func (a *Allocator) AdmitEnvironment(ctx context.Context, in store.Admitted) error {
	return a.admit(ctx, in)
}

// AdmitReady implements store.Admission.
func (a *Allocator) AdmitReady(ctx context.Context, in store.Admitted) error {
	return a.admit(ctx, in)
}

func (a *Allocator) admit(ctx context.Context, in store.Admitted) error {
	scopes := a.scopes(in.ClientHash, in.OwnerHash)
	for _, s := range scopes {
		if err := a.checkTime(s); err != nil {
			a.cfg.Metrics.refused(s.label(), err)
			return err
		}
	}
	// What each scope held of the environment before, to put back if a later scope refuses.
	type taken struct {
		s    scope
		prev *executionv1alpha1.AllocatedEnvironment
	}
	var done []taken
	for _, s := range scopes {
		if !s.limits.Counted() {
			continue
		}
		now := metav1.NewTime(a.cfg.Now())
		var prev *executionv1alpha1.AllocatedEnvironment
		changed := false
		err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
			prev, changed = nil, false
			i := slices.IndexFunc(st.Environments, func(e executionv1alpha1.AllocatedEnvironment) bool { return e.Name == in.Name })
			if i >= 0 && st.Environments[i].Ready {
				return false, nil // counted already
			}
			if err := fits(s, st, in, i < 0); err != nil {
				return false, err
			}
			if i < 0 {
				st.Environments = append(st.Environments, executionv1alpha1.AllocatedEnvironment{Name: in.Name, Ready: true, StorageBytes: in.StorageBytes, AdmittedAt: now})
			} else {
				p := st.Environments[i]
				prev = &p
				st.Environments[i].Ready, st.Environments[i].AdmittedAt = true, now
			}
			changed = true
			return true, nil
		})
		if err != nil {
			a.cfg.Metrics.refused(s.label(), err)
			for _, d := range done {
				a.restore(context.WithoutCancel(ctx), d.s, in.Name, d.prev)
			}
			return err
		}
		if changed {
			done = append(done, taken{s: s, prev: prev})
		}
	}
	return nil
}

// restore puts back what a scope held of an environment before an admission a later scope
// refused: nothing (the entry removed), or the entry as it was (not ready).
func (a *Allocator) restore(ctx context.Context, s scope, name string, prev *executionv1alpha1.AllocatedEnvironment) {
	err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
		i := slices.IndexFunc(st.Environments, func(e executionv1alpha1.AllocatedEnvironment) bool { return e.Name == name })
		switch {
		case i < 0:
			return false, nil
		case prev == nil:
			st.Environments = slices.Delete(st.Environments, i, i+1)
		default:
			st.Environments[i] = *prev
		}
		return true, nil
	})
	if err != nil && ctx.Err() == nil {
		a.log.Warn("an admission could not be given back; the next sync does", logging.KeyEnvironment, name, logging.KeyError, err)
	}
}

// fits checks that one more ready environment (and, new, one more environment with its
// storage) stays within the scope's limits.
func fits(s scope, st *executionv1alpha1.ExecutionAllocationStatus, in store.Admitted, isNew bool) error {
	var envs, ready int64
	for _, e := range st.Environments {
		envs++
		if e.Ready {
			ready++
		}
	}
	storage := storageUsed(st) // the snapshots' too
	l := s.limits
	if isNew && l.Environments != nil && envs+1 > *l.Environments {
		return exceeded(s, "environments", *l.Environments, envs)
	}
	if l.ReadyEnvironments != nil && ready+1 > *l.ReadyEnvironments {
		return exceeded(s, "readyEnvironments", *l.ReadyEnvironments, ready)
	}
	if isNew && l.Storage != nil && storage+in.StorageBytes > l.Storage.Value() {
		return exceeded(s, "storage", l.Storage.Value(), storage)
	}
	return nil
}

func exceeded(s scope, name string, limit, used int64) error {
	return exceededText(s, name, strconv.FormatInt(limit, 10), strconv.FormatInt(used, 10))
}

func exceededText(s scope, name, limit, used string) error {
	return apierror.WithMetadata(fmt.Errorf("%w: the %s quota %s (limit %s, in use %s)", apierror.ErrQuotaExceeded, s.label(), name, limit, used),
		map[string]string{"quota": name, "scope": s.label(), "limit": limit, "used": used})
}

// checkTime refuses an admission while one of the scope's time quotas is exceeded with an
// action other than report.
func (a *Allocator) checkTime(s scope) error {
	for _, t := range a.exceededTime(s) {
		if t.limit.Action != quota.ActionReport {
			return exceededText(s, t.name, strconv.FormatFloat(t.limit.Limit, 'f', -1, 64), strconv.FormatFloat(t.used, 'f', 3, 64))
		}
	}
	return nil
}

// timeOver is one exceeded time quota.
type timeOver struct {
	name  string
	limit quota.TimeLimit
	used  float64
}

// exceededTime lists the scope's time quotas at or over their limits.
func (a *Allocator) exceededTime(s scope) []timeOver {
	if a.cfg.Use == nil {
		return nil
	}
	var out []timeOver
	check := func(name string, t *quota.TimeLimit, used func(cpu, mem int64) float64) {
		if t == nil {
			return
		}
		owner := s.ownerHash
		cpu, mem := a.cfg.Use(s.clientHash, owner, t.Window.Duration)
		if u := used(cpu, mem); u >= t.Limit {
			out = append(out, timeOver{name: name, limit: *t, used: u})
		}
	}
	check("cpuCoreHours", s.limits.CPUCoreHours, func(cpu, _ int64) float64 { return float64(cpu) / 1e9 / 3600 })
	check("memoryGiBHours", s.limits.MemoryGiBHours, func(_, mem int64) float64 { return float64(mem) / (1 << 20) / 3600 })
	return out
}

// Forget implements store.Admission.
func (a *Allocator) Forget(ctx context.Context, in store.Admitted) {
	for _, s := range a.scopes(in.ClientHash, in.OwnerHash) {
		if s.limits.Counted() {
			a.forget(ctx, s, in.Name)
		}
	}
}

func (a *Allocator) forget(ctx context.Context, s scope, name string) {
	err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
		n := len(st.Environments)
		st.Environments = slices.DeleteFunc(st.Environments, func(e executionv1alpha1.AllocatedEnvironment) bool { return e.Name == name })
		return len(st.Environments) != n, nil
	})
	if err != nil && ctx.Err() == nil {
		a.log.Warn("an admission could not be given back; the next sync does", logging.KeyEnvironment, name, logging.KeyError, err)
	}
}

// update runs change on the scope's allocation and writes it by compare-and-swap: from
// the cache first, then from a live read — after a conflict, and whenever the cache's copy
// leads to a refusal or to nothing to write (the cache may not show the caller's own write
// yet: a slot to give back, a slot freed meanwhile). The allocation is created when absent.
func (a *Allocator) update(ctx context.Context, s scope, change func(*executionv1alpha1.ExecutionAllocationStatus) (bool, error)) error {
	client := a.cfg.Execution.ExecutionV1alpha1().ExecutionAllocations(a.cfg.Namespace)
	name := s.name()
	cur, err := a.lister.ExecutionAllocations(a.cfg.Namespace).Get(name)
	cached := true
	for range maxAttempts {
		switch {
		case apierrors.IsNotFound(err):
			cur = &executionv1alpha1.ExecutionAllocation{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: a.cfg.Namespace},
				Spec:       executionv1alpha1.ExecutionAllocationSpec{Scope: s.kind, ClientHash: s.clientHash, OwnerHash: s.ownerHash},
			}
		case err != nil:
			return err
		default:
			cur = cur.DeepCopy()
		}
		changed, cerr := change(&cur.Status)
		if (cerr != nil || !changed) && cached {
			cached = false
			cur, err = client.Get(ctx, name, metav1.GetOptions{}) // decided on the API server's copy
			continue
		}
		if cerr != nil || !changed {
			return cerr
		}
		if cur.ResourceVersion == "" {
			_, err = client.Create(ctx, cur, metav1.CreateOptions{})
		} else {
			_, err = client.Update(ctx, cur, metav1.UpdateOptions{})
		}
		a.cfg.Metrics.wrote(err)
		if err == nil {
			return nil
		}
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cached = false
		cur, err = client.Get(ctx, name, metav1.GetOptions{}) // lost the race: read what won
	}
	return fmt.Errorf("%w: the %s allocation lost the compare-and-swap %d times", apierror.ErrConflict, s.label(), maxAttempts)
}

// Sync makes every allocation true to the environments and snapshots: each existing
// environment of a limited scope listed (ready unless suspended), each snapshot holding
// storage listed in the scopes with a storage quota, each gone one dropped, each suspended
// environment no longer ready — past the grace of a fresh admission. It returns the scopes whose time
// quota with the suspend action is exceeded, with their ready environments.
func (a *Allocator) Sync(ctx context.Context) map[string][]string {
	envs, err := a.cfg.Environments.ExecutionEnvironments(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return nil
	}
	now := a.cfg.Now()
	type want struct {
		s     scope
		envs  map[string]executionv1alpha1.AllocatedEnvironment
		snaps map[string]executionv1alpha1.AllocatedSnapshot
	}
	wanted := map[string]*want{}
	toSuspend := map[string][]string{}
	suspending := map[string]bool{} // by scope: a time quota with the suspend action exceeded
	suspends := func(s scope) bool {
		over, ok := suspending[s.name()]
		if !ok {
			for _, t := range a.exceededTime(s) {
				over = over || t.limit.Action == quota.ActionSuspend
			}
			suspending[s.name()] = over
		}
		return over
	}
	for _, env := range envs {
		if env.Status.Deleted() {
			continue
		}
		for _, s := range a.scopes(env.Spec.ClientHash, env.Spec.OwnerHash) {
			ready := !env.Status.Suspended() && !env.Status.Retired()
			if ready && suspends(s) {
				toSuspend[s.name()] = append(toSuspend[s.name()], env.Name)
			}
			if !s.limits.Counted() {
				continue // time quotas only: nothing to list
			}
			w := wanted[s.name()]
			if w == nil {
				w = &want{s: s, envs: map[string]executionv1alpha1.AllocatedEnvironment{}}
				wanted[s.name()] = w
			}
			var storage int64
			if a.cfg.Storage != nil {
				storage = a.cfg.Storage(env.Spec.Profile)
			}
			w.envs[env.Name] = executionv1alpha1.AllocatedEnvironment{Name: env.Name, Ready: ready, StorageBytes: storage}
		}
	}
	a.eachSnapshot(func(s scope, sn executionv1alpha1.AllocatedSnapshot) {
		w := wanted[s.name()]
		if w == nil {
			w = &want{s: s, envs: map[string]executionv1alpha1.AllocatedEnvironment{}}
			wanted[s.name()] = w
		}
		if w.snaps == nil {
			w.snaps = map[string]executionv1alpha1.AllocatedSnapshot{}
		}
		w.snaps[sn.Name] = sn
	})
	existing, err := a.lister.ExecutionAllocations(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return toSuspend
	}
	for _, al := range existing {
		if _, ok := wanted[al.Name]; !ok {
			wanted[al.Name] = &want{s: scope{kind: al.Spec.Scope, clientHash: al.Spec.ClientHash, ownerHash: al.Spec.OwnerHash},
				envs: map[string]executionv1alpha1.AllocatedEnvironment{}}
		}
	}
	// Gone, by the cache: confirmed by a read of the API server before a slot is given
	// back, so that a leader whose cache stalled (paused past its lease) frees nothing.
	gone := func(name string) bool {
		env, err := a.cfg.Execution.ExecutionV1alpha1().ExecutionEnvironments(a.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) || (err == nil && env.Status.Deleted())
	}
	for _, w := range wanted {
		err := a.update(ctx, w.s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
			envs := reconcile(st, w.envs, now, gone)
			snaps := reconcileSnapshots(st, w.snaps, now, func(name string) bool { return a.snapshotGone(ctx, name) })
			return envs || snaps, nil
		})
		if err != nil && ctx.Err() == nil {
			a.log.Warn("an allocation cannot be synced; retried", logging.KeyName, w.s.name(), logging.KeyError, err)
		}
	}
	return toSuspend
}

// reconcile makes st list want (name → entry), keeping fresh admissions and entries as
// they are where they agree; it reports whether anything changed.
func reconcile(st *executionv1alpha1.ExecutionAllocationStatus, want map[string]executionv1alpha1.AllocatedEnvironment, now time.Time, gone func(string) bool) bool {
	changed := false
	have := map[string]bool{}
	kept := st.Environments[:0:0]
	for _, e := range st.Environments {
		have[e.Name] = true
		fresh := now.Sub(e.AdmittedAt.Time) < grace
		w, exists := want[e.Name]
		switch {
		case !exists && !fresh && gone(e.Name):
			changed = true
			continue // gone
		case exists && e.Ready && !w.Ready && !fresh:
			e.Ready = false
			changed = true
		case exists && !e.Ready && w.Ready:
			e.Ready = true // resumed outside an admission (quotas added since)
			changed = true
		}
		kept = append(kept, e)
	}
	for name, w := range want {
		if !have[name] {
			w.AdmittedAt = metav1.NewTime(now)
			kept = append(kept, w)
			changed = true
		}
	}
	slices.SortFunc(kept, func(a, b executionv1alpha1.AllocatedEnvironment) int {
		if a.Name < b.Name {
			return -1
		}
		if a.Name > b.Name {
			return 1
		}
		return 0
	})
	// A detached command's slot ends at its expiry, or with its environment's executor
	// (suspended, retired, deleted: every command ended with it).
	n := len(st.Commands)
	st.Commands = slices.DeleteFunc(st.Commands, func(c executionv1alpha1.AllocatedCommand) bool {
		w, ok := want[c.Environment]
		return now.After(c.Until.Time) || !ok || !w.Ready
	})
	changed = changed || len(st.Commands) != n || len(kept) != len(st.Environments)
	st.Environments = kept
	return changed
}
