package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/execplane/execplane/internal/security"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
	execinformers "github.com/execplane/execplane/pkg/generated/informers/externalversions"
	execlisters "github.com/execplane/execplane/pkg/generated/listers/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/grant"
)

// Environments is the gateway's view of the namespace's ExecutionEnvironments: an informer
// cache, read on every data operation without an API call. It lags behind the controller
// by the watch's latency; Await bridges that lag for grants newer than the view.
type Environments struct {
	informer  cache.SharedIndexInformer
	lister    execlisters.ExecutionEnvironmentLister
	factory   execinformers.SharedInformerFactory
	namespace string
	observed  func(time.Duration)
	now       func() time.Time

	mu      sync.Mutex
	changed chan struct{} // closed (and replaced) on every event
}

// NewEnvironments returns the view over namespace. observed, if not nil, is called with the
// delay between an authority change (epoch or grant generation raised, as the status
// records it) and this gateway observing it.
func NewEnvironments(client versioned.Interface, namespace string, observed func(time.Duration)) (*Environments, error) {
	factory := execinformers.NewSharedInformerFactoryWithOptions(client, 0, execinformers.WithNamespace(namespace))
	inf := factory.Execution().V1alpha1().ExecutionEnvironments()
	e := &Environments{
		informer: inf.Informer(), lister: inf.Lister(), factory: factory,
		namespace: namespace, observed: observed, now: time.Now, changed: make(chan struct{}),
	}
	_, err := e.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { e.notify() },
		UpdateFunc: e.update,
		DeleteFunc: func(any) { e.notify() },
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}

// errNotSynced: the view has not listed the environments yet; nothing can be judged.
var errNotSynced = fmt.Errorf("%w: the gateway's environment cache is not synced yet", security.ErrUnavailable)

// Start runs the informer until ctx ends.
func (e *Environments) Start(ctx context.Context) { e.factory.Start(ctx.Done()) }

// Synced reports whether the initial list has been observed.
func (e *Environments) Synced() bool { return e.informer.HasSynced() }

func (e *Environments) update(oldObj, newObj any) {
	old, ok1 := oldObj.(*executionv1alpha1.ExecutionEnvironment)
	cur, ok2 := newObj.(*executionv1alpha1.ExecutionEnvironment)
	if ok1 && ok2 && e.observed != nil && cur.Status.AuthorityChangedAt != nil &&
		(cur.Status.Epoch > old.Status.Epoch || cur.Status.GrantGeneration > old.Status.GrantGeneration) {
		e.observed(max(0, e.now().Sub(cur.Status.AuthorityChangedAt.Time)))
	}
	e.notify()
}

func (e *Environments) notify() {
	e.mu.Lock()
	close(e.changed)
	e.changed = make(chan struct{})
	e.mu.Unlock()
}

func (e *Environments) next() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.changed
}

// Get returns the cached environment (shared: never modify it), or nil.
func (e *Environments) Get(name string) *executionv1alpha1.ExecutionEnvironment {
	env, err := e.lister.ExecutionEnvironments(e.namespace).Get(name)
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
		changed := e.next() // before the read, so no change between them is missed
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
