package e2b

import (
	"context"
	"errors"
	"time"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Polling of an operation in progress (a suspension the SDK waits for; a delete held up by
// one): quick at first, gentler after, bounded by the request's context (the SDK's 60 s).
const (
	settlePollInitial = 50 * time.Millisecond
	settlePollMax     = time.Second
)

// untilSettled calls f until it is not refused for an operation in progress (NOT_READY),
// or ctx ends.
func untilSettled(ctx context.Context, f func() error) error {
	wait := settlePollInitial
	for {
		err := f()
		if !errors.Is(err, client.ErrNotReady) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
		wait = min(2*wait, settlePollMax)
	}
}

// waitFor polls the sandbox's environment until done accepts it, or ctx ends.
func (f *frontEnd) waitFor(ctx context.Context, t *Tenant, id string, done func(*executionv1.Environment) bool) error {
	wait := settlePollInitial
	for {
		env, err := f.sandboxes.lookup(ctx, t, id)
		if err != nil {
			return err
		}
		if done(env) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, settlePollMax)
	}
}

// discard deletes a sandbox the caller never got (a create that failed after the
// environment existed), in the background.
func (f *frontEnd) discard(env *client.Environment) {
	ctx, cancel := context.WithTimeout(context.Background(), prepareRunTimeout)
	defer cancel()
	if err := untilSettled(ctx, func() error { return env.Delete(ctx, 0) }); err != nil {
		f.log.Warn("a sandbox whose create failed was not deleted (its timeout will)", logging.KeySandbox, env.BindingID(), logging.KeyError, err)
	}
}
