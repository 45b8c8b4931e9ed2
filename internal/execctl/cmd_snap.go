package execctl

import (
	"context"
	"flag"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

var snapshotHeaders = []string{"NAME", "STATE", "METHOD", "SOURCE", "SIZE", "CUT", "FAILURE"}

func snapshotRow(s *executionv1.Snapshot) []string {
	cut := ""
	if s.GetCutAt() != nil {
		cut = s.GetCutAt().AsTime().UTC().Format(time.RFC3339)
	}
	failure := s.GetFailureReason()
	if failure != "" && s.GetFailureMessage() != "" {
		failure += ": " + s.GetFailureMessage()
	}
	return []string{s.GetName(), strings.TrimPrefix(s.GetState().String(), "SNAPSHOT_STATE_"), strings.TrimPrefix(s.GetMethod().String(), "SNAPSHOT_METHOD_"),
		s.GetSource().GetId(), strconv.FormatInt(s.GetSizeBytes(), 10), cut, escape(failure)}
}

func (in *invocation) emitSnapshots(list ...*executionv1.Snapshot) error {
	rows := make([][]string, len(list))
	msgs := make([]proto.Message, len(list))
	for i, s := range list {
		rows[i], msgs[i] = snapshotRow(s), s
	}
	if len(list) == 1 {
		return in.emit(list[0], snapshotHeaders, rows)
	}
	return in.emit(msgs, snapshotHeaders, rows)
}

// ownerRun runs op with the owner the flags name, over a dialled client.
func ownerRun(fs *flag.FlagSet, in *invocation, op func(ctx context.Context, c *client.Client, o client.Owner) error) func() error {
	owner := ownerFlags(fs, in)
	return func() error {
		o, err := owner()
		if err != nil {
			return err
		}
		c, err := in.dial()
		if err != nil {
			return err
		}
		ctx, cancel := in.callContext()
		defer cancel()
		return op(ctx, c, o)
	}
}

var snapGroup = &group{name: "snap", summary: "snapshots of a workspace: take, list, show, delete; fork with env ensure --from-snapshot", leaves: []*leaf{
	{
		name: "create", args: "BINDING ENV NAME", nargs: 3,
		summary: "snapshot the workspace as NAME (its processes stopped while it is cut); answers once it is cut",
		details: "The snapshot keeps the workspace's files, not its durable commands. Restore it into a new " +
			"environment with `execctl env ensure BINDING --from-snapshot NAME`. The call waits for the cut: " +
			"give --timeout room for a large workspace copied (the profile's snapshots.maxQuiesce bounds it).",
		example: "execctl snap create conv-1 xenv-59d14f8a21d8ced1aa54 before-refactor --revision 5f0e… --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			handle := handleFlags(fs, in)
			return func() error {
				r, c, err := in.connect(handle)
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				snap, err := c.Handle(r).Snapshot(ctx, in.args[2])
				if err != nil {
					return err
				}
				return in.emitSnapshots(snap)
			}
		},
	},
	{
		name: "ls", summary: "the owner's snapshots, by name",
		example: "execctl snap ls --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			return ownerRun(fs, in, func(ctx context.Context, c *client.Client, o client.Owner) error {
				list, err := c.Snapshots(ctx, o)
				if err != nil {
					return err
				}
				return in.emitSnapshots(list...)
			})
		},
	},
	{
		name: "get", args: "NAME", nargs: 1, summary: "one of the owner's snapshots",
		example: "execctl snap get before-refactor --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			return ownerRun(fs, in, func(ctx context.Context, c *client.Client, o client.Owner) error {
				snap, err := c.GetSnapshot(ctx, o, in.args[0])
				if err != nil {
					return err
				}
				return in.emitSnapshots(snap)
			})
		},
	},
	{
		name: "rm", args: "NAME", nargs: 1, summary: "delete one of the owner's snapshots (environments restored from it keep their files)",
		example: "execctl snap rm before-refactor --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			return ownerRun(fs, in, func(ctx context.Context, c *client.Client, o client.Owner) error {
				snap, err := c.DeleteSnapshot(ctx, o, in.args[0])
				if err != nil {
					return err
				}
				return in.emitSnapshots(snap)
			})
		},
	},
}}
