package execctl

import (
	"errors"
	"flag"
	"time"

	"github.com/execplane/execplane/pkg/client"
)

var runHeaders = []string{"ENV", "RUN", "GRANT EXPIRES", "STATE FILE"}

var runGroup = &group{name: "run", summary: "the run claim: execution authority over an environment (kept for fs and exec)", leaves: []*leaf{
	{
		name: "acquire", args: "BINDING ENV", nargs: 2, summary: "take the environment's run claim and keep its grant for fs and exec",
		example: "execctl run acquire conv-1 xenv-… --revision 5f0e… --owner alice --run-id turn-1\nexecctl run acquire conv-1 xenv-… --revision 5f0e… --run-id turn-1 --ttl 5m",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			handle := handleFlags(fs, in)
			runID := fs.String("run-id", "", "names the caller's run (required)")
			ttl := fs.Duration("ttl", client.DefaultRunTTL, "how long the claim lasts unless renewed (30s..5m)")
			return func() error {
				r, c, err := in.connect(handle)
				if err != nil {
					return err
				}
				store, err := in.runs()
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				env, err := c.Attach(ctx, r)
				if err != nil {
					return err
				}
				run, err := env.Acquire(ctx, client.AcquireOptions{RunID: *runID, TTL: *ttl, NoRenew: true})
				if err != nil {
					return err
				}
				if err := store.save(run.State()); err != nil {
					return err
				}
				return in.emitRun(run.State(), store)
			}
		},
	},
	{
		name: "renew", args: "ENV", nargs: 1, summary: "extend the held claim by its TTL",
		example: "execctl run renew xenv-… --ttl 5m",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			ttl := fs.Duration("ttl", client.DefaultRunTTL, "the claim's new lease (30s..5m)")
			return func() error {
				run, store, err := in.resume(in.args[0])
				if err != nil {
					return err
				}
				run = in.client.ResumeRun(run.State(), *ttl)
				ctx, cancel := in.callContext()
				defer cancel()
				if err := run.Renew(ctx); err != nil {
					return err
				}
				if err := store.save(run.State()); err != nil {
					return err
				}
				return in.emitRun(run.State(), store)
			}
		},
	},
	{
		name: "release", args: "ENV", nargs: 1, summary: "end the held claim and forget its grant",
		example: "execctl run release xenv-…",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			return func() error {
				run, store, err := in.resume(in.args[0])
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				err = run.Close(ctx)
				if err != nil && !endedClaim(err) {
					return err // kept: the release may be retried
				}
				if rmErr := store.remove(in.args[0]); rmErr != nil {
					return rmErr
				}
				return err
			}
		},
	},
}}

// endedClaim reports an answer proving the saved claim is gone (superseded, revoked,
// expired grant, environment absent): its state file is of no more use.
func endedClaim(err error) bool {
	for _, k := range []error{client.ErrStaleEpoch, client.ErrRevoked, client.ErrGrantInvalid, client.ErrNotFound} {
		if errors.Is(err, k) {
			return true
		}
	}
	return false
}

// emitRun shows a held run; the grant itself is never printed.
func (in *invocation) emitRun(st client.RunState, store runStore) error {
	path, _ := store.path(st.EnvironmentID)
	expires := st.ExpiresAt.UTC().Format(time.RFC3339)
	return in.emit(map[string]string{"environment": st.EnvironmentID, "revision": st.Revision, "run": st.RunID, "grantExpiresAt": expires, "stateFile": path},
		runHeaders, [][]string{{st.EnvironmentID, st.RunID, expires, path}})
}
