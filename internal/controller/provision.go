package controller

import (
	"context"
	"slices"

	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Provision implements store.Provisioner: the store's Ensure, having created env, runs this
// environment's first pass in place, so that its one status write records the reference
// together with the workspace and executor — a warm pair adopted (then Ready at once), or
// the cold path's claim and Pod created. The key is held until done, so that no worker's
// pass runs beside it; a worker's pass on the version the store wrote over is skipped like
// one on the controller's own write. Anything that fails leaves the environment to the
// worker's pass, which finishes what was begun (an interrupted adoption, a created claim)
// as after a crash.
func (r *Reconciler) Provision(ctx context.Context, env *executionv1alpha1.ExecutionEnvironment) (*executionv1alpha1.ExecutionEnvironmentStatus, func(*executionv1alpha1.ExecutionEnvironment)) {
	key := env.Namespace + "/" + env.Name
	unlock := r.keys.Lock(key)
	handBack := func(*executionv1alpha1.ExecutionEnvironment) {
		unlock()
		r.queue.Add(key)
	}
	if !r.Ready() || env.DeletionTimestamp != nil || !slices.Contains(env.Finalizers, EnvironmentFinalizer) {
		return nil, handBack
	}
	if err := r.releaseOrphans(ctx, env.Namespace, env.Name, env.UID); err != nil {
		r.log.Debug("provisioning left to the pass", logging.KeyEnvironment, key, logging.KeyError, err)
		return nil, handBack
	}
	base := env.ResourceVersion
	p := r.newPass(env.DeepCopy(), env.Status.DeepCopy())
	if err := p.compute(ctx); err != nil || p.deleted {
		if err != nil {
			r.log.Debug("provisioning left to the pass", logging.KeyEnvironment, key, logging.KeyError, err)
		}
		return nil, handBack
	}
	return p.status, func(written *executionv1alpha1.ExecutionEnvironment) {
		defer unlock()
		if written == nil {
			r.queue.Add(key)
			return
		}
		r.written.Store(key, base)
		p.finish(key, written)
	}
}
