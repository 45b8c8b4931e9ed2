package allocation

import (
	"context"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Command admits (or, with release, gives back) a detached command of the environment
// name of UID: counted against its scopes' detachedCommands until a gateway sees it end
// or its profile's longest duration passes. taken reports whether this admission listed
// the command in every scope that counts detached commands (false: some scope listed it
// already — a start of the same id before it, whose slots a give-back would drop — or no
// scope counts them): only then are its slots the caller's to give back when its start
// fails; slots added beside an existing listing last to their expiry. An environment the
// leader does not know is apierror.ErrNotFound.
func (a *Allocator) Command(ctx context.Context, name, uid, id string, release bool) (taken bool, err error) {
	env, err := a.cfg.Environments.ExecutionEnvironments(a.cfg.Namespace).Get(name)
	if err != nil || string(env.UID) != uid {
		return false, fmt.Errorf("%w: environment %s", apierror.ErrNotFound, name)
	}
	var scopes []scope
	for _, s := range a.scopes(env.Spec.ClientHash, env.Spec.OwnerHash) {
		if s.limits.DetachedCommands != nil {
			scopes = append(scopes, s)
		}
	}
	if release {
		for _, s := range scopes {
			a.dropCommand(ctx, s, name, id)
		}
		return false, nil
	}
	for _, s := range a.scopes(env.Spec.ClientHash, env.Spec.OwnerHash) {
		if err := a.checkTime(s); err != nil {
			a.cfg.Metrics.refused(s.label(), err)
			return false, err
		}
	}
	var longest time.Duration
	if a.cfg.MaxCommand != nil {
		longest = a.cfg.MaxCommand(env.Spec.Profile)
	}
	now := a.cfg.Now()
	until := metav1.NewTime(now.Add(max(longest, grace)))
	var done []scope // the scopes this admission listed the command in
	for _, s := range scopes {
		added := false
		err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
			added = false // a conflict's retry decides anew
			live := 0
			for _, c := range st.Commands {
				if c.Environment == name && c.CommandID == id {
					return false, nil // admitted already: not this admission's to drop
				}
				if c.Until.After(now) {
					live++
				}
			}
			if limit := *s.limits.DetachedCommands; int64(live)+1 > limit {
				return false, exceeded(s, "detachedCommands", limit, int64(live))
			}
			st.Commands = append(st.Commands, executionv1alpha1.AllocatedCommand{Environment: name, CommandID: id, Until: until})
			added = true
			return true, nil
		})
		if err != nil {
			a.cfg.Metrics.refused(s.label(), err)
			for _, d := range done {
				a.dropCommand(context.WithoutCancel(ctx), d, name, id)
			}
			return false, err
		}
		if added {
			done = append(done, s)
		}
	}
	return len(scopes) > 0 && len(done) == len(scopes), nil
}

func (a *Allocator) dropCommand(ctx context.Context, s scope, env, id string) {
	err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
		n := len(st.Commands)
		st.Commands = slices.DeleteFunc(st.Commands, func(c executionv1alpha1.AllocatedCommand) bool { return c.Environment == env && c.CommandID == id })
		return len(st.Commands) != n, nil
	})
	if err != nil && ctx.Err() == nil {
		a.log.Warn("a detached command's slot could not be given back; it is at its expiry", logging.KeyEnvironment, env, logging.KeyError, err)
	}
}
