package store

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// MaxAttachWait bounds AttachInput.WaitReady: long enough to cover a cold start on a real
// cluster in one or two calls, short enough that a waiting call never looks hung to a proxy
// or a load balancer.
const MaxAttachWait = 30 * time.Second

// attachWaitPoll is how often a waiting Attach looks at the leader's informer cache: an
// in-memory read, no API request, and a small share of what the caller would otherwise
// wait for.
const attachWaitPoll = 20 * time.Millisecond

// settledForAttach reports an environment a waiting Attach answers at once: ready (and no
// operation in progress), or one that cannot become ready without another call — fenced,
// being deleted, retired, or under an administrator's Retire or DeleteRetired.
func settledForAttach(env *executionv1alpha1.ExecutionEnvironment) bool {
	st := &env.Status
	op := st.LifecycleOperation
	switch {
	case st.FenceState == executionv1alpha1.FenceUnknown, env.DeletionTimestamp != nil, st.Retired():
		return true
	case op.InProgress():
		return op.Kind == executionv1alpha1.LifecycleRetire || op.Kind == executionv1alpha1.LifecycleDeleteRetired
	}
	return meta.IsStatusConditionTrue(st.Conditions, executionv1alpha1.ConditionReady)
}

// awaitSettled waits until the environment of this UID is settled for a waiting Attach or
// suspended (the caller resumes it), is gone, or d or ctx has run out.
func (s *Store) awaitSettled(ctx context.Context, name string, uid types.UID, d time.Duration) {
	_ = s.await(ctx, name, uid, d, func(env *executionv1alpha1.ExecutionEnvironment) bool {
		return settledForAttach(env) || env.Status.Suspended()
	})
}

// await polls the leader's informer cache until the environment of this UID satisfies done,
// is gone, or d or ctx has run out: an in-memory read per poll, no API request. It returns
// the cache's object it last saw (shared: not to be changed), nil once gone.
func (s *Store) await(ctx context.Context, name string, uid types.UID, d time.Duration, done func(*executionv1alpha1.ExecutionEnvironment) bool) *executionv1alpha1.ExecutionEnvironment {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	t := time.NewTicker(attachWaitPoll)
	defer t.Stop()
	var last *executionv1alpha1.ExecutionEnvironment
	for {
		// Looked at after a tick, not before: the caller has just read the object live, and
		// the cache may not yet have the write that the caller itself made.
		select {
		case <-ctx.Done():
			return last
		case <-t.C:
		}
		env, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).Get(name)
		if err != nil || env.UID != uid {
			return nil
		}
		if last = env; done(env) {
			return env
		}
	}
}
