package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/internal/security"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/grant"
)

// Freshness bounds: the view must be proven current at least this often.
const (
	// DefaultFreshnessBound is how old the last proof that the view is current may be before
	// grant-authorised calls answer UNAVAILABLE: revocations reach a healthy gateway in
	// milliseconds, so two seconds only ever bites a gateway cut off from the API server.
	DefaultFreshnessBound = 2 * time.Second
	// ProbeInterval is the period of the freshness probe: one API read per second, whatever
	// the load — a consistent LIST of at most one environment.
	ProbeInterval = time.Second
	// MinFreshnessBound leaves room for one late probe: the bound is at least two periods.
	MinFreshnessBound = 2 * ProbeInterval
	// MaxFreshnessBound keeps the guarantee meaningful.
	MaxFreshnessBound = time.Minute
)

// Environments is the gateway's view of the namespace's ExecutionEnvironments: an informer
// cache, read on every data operation without an API call. It lags behind the controller
// by the watch's latency; Await bridges that lag for grants newer than the view.
//
// The view proves it is current: once a second a probe — a consistent read of at most one
// environment, through the same client and connection as the watch — must succeed; the
// view is fresh while the last successful probe was sent within the freshness bound
// (Fresh). A gateway cut off from the API server (its watch stalled, not broken) thus stops
// honouring grants within the bound instead of at their expiry. When the view was stale, it
// is rebuilt from a fresh consistent list before it serves again, so that no event lost or
// delayed in the stalled stream is missed.
type Environments struct {
	client    versioned.Interface
	namespace string
	observed  func(time.Duration)
	revoked   func(*executionv1alpha1.ExecutionEnvironment)
	now       func() time.Time
	bound     time.Duration

	current atomic.Pointer[view]
	// provenAt is when the last successful probe was sent, as nanoseconds since origin on
	// the monotonic clock (a wall-clock step cannot stretch or cut the bound); 0 is never.
	provenAt atomic.Int64
	origin   time.Time
	relists  atomic.Int64

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) on every event
}

// view is one informer over the namespace; a stale view is replaced by a new one.
type view struct {
	informer cache.SharedIndexInformer
	lister   execlisters.ExecutionEnvironmentLister
	factory  execinformers.SharedInformerFactory
	stop     context.CancelFunc
}

// NewEnvironments returns the view over namespace. observed, if not nil, is called with the
// delay between an authority change (epoch or grant generation raised, as the status
// records it) and this gateway observing it. bound is the freshness bound
// (DefaultFreshnessBound when 0).
func NewEnvironments(client versioned.Interface, namespace string, bound time.Duration, observed func(time.Duration)) (*Environments, error) {
	if bound == 0 {
		bound = DefaultFreshnessBound
	}
	if bound < MinFreshnessBound || bound > MaxFreshnessBound {
		return nil, fmt.Errorf("freshness bound %s outside [%s, %s]", bound, MinFreshnessBound, MaxFreshnessBound)
	}
	e := &Environments{client: client, namespace: namespace, observed: observed, now: time.Now, bound: bound, changed: make(chan struct{})}
	e.origin = e.now()
	v, err := e.newView()
	if err != nil {
		return nil, err
	}
	e.current.Store(v)
	return e, nil
}

func (e *Environments) newView() (*view, error) {
	factory := execinformers.NewSharedInformerFactoryWithOptions(e.client, 0, execinformers.WithNamespace(e.namespace))
	inf := factory.Execution().V1alpha1().ExecutionEnvironments()
	v := &view{informer: inf.Informer(), lister: inf.Lister(), factory: factory}
	_, err := v.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.notify() },
		UpdateFunc: e.update,
		DeleteFunc: func(any) { e.notify() },
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

func (v *view) start(ctx context.Context) {
	ctx, v.stop = context.WithCancel(ctx)
	v.factory.Start(ctx.Done())
}

// errNotSynced: the view has not listed the environments yet; nothing can be judged.
var errNotSynced = fmt.Errorf("%w: the gateway's environment cache is not synced yet", security.ErrUnavailable)

// errStale: the view could not be proven current within the freshness bound.
var errStale = fmt.Errorf("%w: the gateway's environment view is not proven current (API server unreachable?)", security.ErrUnavailable)

// Start runs the informer and the freshness probe until ctx ends.
func (e *Environments) Start(ctx context.Context) {
	e.current.Load().start(ctx)
	go e.probe(ctx)
}

// probe proves the view current once per ProbeInterval, and rebuilds it after it was stale.
func (e *Environments) probe(ctx context.Context) {
	tick := time.NewTicker(ProbeInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			e.current.Load().stop()
			return
		case <-tick.C:
		}
		sent := e.now()
		pctx, cancel := context.WithTimeout(ctx, e.bound)
		_, err := e.client.ExecutionV1alpha1().ExecutionEnvironments(e.namespace).List(pctx, metav1.ListOptions{Limit: 1})
		cancel()
		if err != nil || !e.Synced() {
			continue
		}
		// Judged now that the probe is back, not when it left: a probe that hung past the
		// bound leaves a stale spell behind it, even if the view was fresh when it was sent.
		if prev := e.provenAt.Load(); prev != 0 && e.now().Sub(e.origin)-time.Duration(prev) > e.bound {
			// It was stale: events may be stuck behind the stall. Serve again only from a
			// new consistent list (taken after sent), never from the stream that stalled.
			if !e.relist(ctx) {
				continue
			}
		}
		e.provenAt.Store(max(1, int64(sent.Sub(e.origin))))
	}
}

// relist replaces the view by a new informer's and reports whether it synced within the bound.
func (e *Environments) relist(ctx context.Context) bool {
	next, err := e.newView()
	if err != nil {
		return false
	}
	next.start(ctx)
	sctx, cancel := context.WithTimeout(ctx, e.bound)
	defer cancel()
	if !cache.WaitForCacheSync(sctx.Done(), next.informer.HasSynced) {
		next.stop()
		return false
	}
	e.current.Swap(next).stop()
	e.relists.Add(1)
	e.notify()
	return true
}

// Fresh returns nil while the view is proven current within the freshness bound, and why
// not otherwise (wrapping ErrUnavailable: retryable).
func (e *Environments) Fresh() error {
	if !e.Synced() {
		return errNotSynced
	}
	proven := e.provenAt.Load()
	if proven == 0 || e.now().Sub(e.origin)-time.Duration(proven) > e.bound {
		return errStale
	}
	return nil
}

// Relists counts the rebuilds of the view after it was stale.
func (e *Environments) Relists() int64 { return e.relists.Load() }

// Synced reports whether the initial list has been observed.
func (e *Environments) Synced() bool { return e.current.Load().informer.HasSynced() }

func (e *Environments) update(oldObj, newObj any) {
	old, ok1 := oldObj.(*executionv1alpha1.ExecutionEnvironment)
	cur, ok2 := newObj.(*executionv1alpha1.ExecutionEnvironment)
	if ok1 && ok2 && e.observed != nil && cur.Status.AuthorityChangedAt != nil &&
		(cur.Status.Epoch > old.Status.Epoch || cur.Status.GrantGeneration > old.Status.GrantGeneration) {
		e.observed(max(0, e.now().Sub(cur.Status.AuthorityChangedAt.Time)))
	}
	if ok1 && ok2 && e.revoked != nil && cur.UID == old.UID && cur.Status.GrantGeneration > old.Status.GrantGeneration {
		e.revoked(cur)
	}
	e.notify()
}

// OnGrantsRevoked sets what is called, on the informer's goroutine (it must not block), with
// each environment whose grant generation this view sees raised. Set it before Start. A
// raise that happens while the view is stale and rebuilt from a list is not seen.
func (e *Environments) OnGrantsRevoked(f func(*executionv1alpha1.ExecutionEnvironment)) {
	e.revoked = f
}

func (e *Environments) notify() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

// Changes returns a channel closed at the next change of the view.
func (e *Environments) Changes() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Get returns the cached environment (shared: never modify it), or nil.
func (e *Environments) Get(name string) *executionv1alpha1.ExecutionEnvironment {
	env, err := e.current.Load().lister.ExecutionEnvironments(e.namespace).Get(name)
	if err != nil {
		return nil
	}
	return env
}

// Await runs check on the cached environment named name (nil when absent) until it returns
// anything but grant.ErrNotObserved, re-running it after every change of the cache, for at
// most wait (and never past ctx). When the view still lags after wait, it returns the last
// ErrNotObserved: the caller answers UNAVAILABLE, retryable.
func (e *Environments) Await(ctx context.Context, name string, wait time.Duration, check func(*executionv1alpha1.ExecutionEnvironment) error) error {
	var timeout <-chan time.Time
	if !e.Synced() {
		return errNotSynced
	}
	for {
		changed := e.Changes() // before the read, so no change between them is missed
		err := check(e.Get(name))
		if !errors.Is(err, grant.ErrNotObserved) {
			return err
		}
		if timeout == nil {
			t := time.NewTimer(wait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-changed:
		case <-timeout:
			return err
		case <-ctx.Done():
			return ctx.Err() // the caller gave up; nothing was concluded
		}
	}
}
