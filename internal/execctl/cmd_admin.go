package execctl

import (
	"context"
	"flag"
	"strconv"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// optional is a flag that records whether it was given (a precondition is exact: an unset
// one is not sent, an empty one asserts emptiness).
type optional[T any] struct {
	v     *T
	parse func(string) (T, error)
}

func (o *optional[T]) String() string { return "" }
func (o *optional[T]) Set(s string) error {
	v, err := o.parse(s)
	if err == nil {
		o.v = &v
	}
	return err
}

// adminFlags registers the environment's revision, its preconditions and a reason.
func adminFlags(fs *flag.FlagSet) func(id string) (client.AdminRequest, error) {
	revision := fs.String("revision", "", "the environment's revision (its UID) (required)")
	reason := fs.String("reason", "", "why, recorded in events (at most 256 printable bytes)")
	parseUint := func(s string) (uint64, error) { return strconv.ParseUint(s, 10, 64) }
	epoch := &optional[uint64]{parse: parseUint}
	generation := &optional[uint64]{parse: parseUint}
	str := func(s string) (string, error) { return s, nil }
	pod, pvc := &optional[string]{parse: str}, &optional[string]{parse: str}
	fs.Var(epoch, "epoch", "precondition: the current epoch")
	fs.Var(generation, "generation", "precondition: the current grant generation")
	fs.Var(pod, "pod-uid", "precondition: the executor Pod's UID (\"\" asserts there is none)")
	fs.Var(pvc, "pvc-uid", "precondition: the workspace PVC's UID")
	return func(id string) (client.AdminRequest, error) {
		if *revision == "" {
			return client.AdminRequest{}, cli.Usagef("--revision is required")
		}
		return client.AdminRequest{ID: id, Revision: *revision, Reason: *reason,
			Preconditions: client.Preconditions{Epoch: epoch.v, GrantGeneration: generation.v, PodUID: pod.v, PVCUID: pvc.v}}, nil
	}
}

// adminLeaf is an administrative command on ENV.
func adminLeaf(name, summary, needs string, op func(context.Context, *client.Client, client.AdminRequest) (*executionv1.Environment, error)) *leaf {
	return &leaf{name: name, args: "ENV", nargs: 1, summary: summary + " (requires " + needs + ")",
		example: "execctl admin " + name + " xenv-… --revision 5f0e… " + exampleFlags[needs] + " --reason 'ticket 1234'",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			request := adminFlags(fs)
			return func() error {
				r, err := request(in.args[0])
				if err != nil {
					return err
				}
				c, err := in.dial()
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				env, err := op(ctx, c, r)
				if err != nil {
					return err
				}
				if env == nil {
					return in.emit(map[string]string{"deleted": r.ID}, []string{"DELETED"}, [][]string{{r.ID}})
				}
				return in.emitEnvironment(env)
			}
		}}
}

var exampleFlags = map[string]string{
	"--epoch":               "--epoch 3",
	"--epoch and --pod-uid": "--epoch 3 --pod-uid 8c1d…",
	"--generation":          "--generation 1",
	"--pvc-uid":             "--pvc-uid 17d8…",
}

var adminGroup = &group{name: "admin", summary: "administration (administrators only): exact, idempotent lifecycle operations", leaves: []*leaf{
	adminLeaf("retire", "stop the executor Pod, keep the workspace", "--epoch", func(ctx context.Context, c *client.Client, r client.AdminRequest) (*executionv1.Environment, error) {
		return c.Retire(ctx, r)
	}),
	adminLeaf("replace", "a new executor Pod on the same workspace; epoch + 1 once the old one's end is recorded", "--epoch and --pod-uid", func(ctx context.Context, c *client.Client, r client.AdminRequest) (*executionv1.Environment, error) {
		return c.Replace(ctx, r)
	}),
	adminLeaf("revoke", "kill every grant issued so far", "--generation", func(ctx context.Context, c *client.Client, r client.AdminRequest) (*executionv1.Environment, error) {
		return c.Revoke(ctx, r)
	}),
	adminLeaf("recover", "clear a fence given exact proof of the fenced executor's fate", "--epoch and --pod-uid", func(ctx context.Context, c *client.Client, r client.AdminRequest) (*executionv1.Environment, error) {
		return c.Recover(ctx, r)
	}),
	adminLeaf("migrate", "upgrade the recorded schema version (1 is current)", "--epoch", func(ctx context.Context, c *client.Client, r client.AdminRequest) (*executionv1.Environment, error) {
		env, _, err := c.Migrate(ctx, r, 1)
		return env, err
	}),
	adminLeaf("delete-retired", "delete a retired environment's workspace, then the environment", "--pvc-uid", func(ctx context.Context, c *client.Client, r client.AdminRequest) (*executionv1.Environment, error) {
		return nil, c.DeleteRetired(ctx, r)
	}),
}}
