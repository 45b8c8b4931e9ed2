package execctl

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/pkg/client"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// ownerFlags registers --issuer and --owner (defaults $EXECPLANE_ISSUER, $EXECPLANE_OWNER).
func ownerFlags(fs *flag.FlagSet, in *invocation) func() (client.Owner, error) {
	issuer := fs.String("issuer", in.getenv("EXECPLANE_ISSUER"), "the owner's identity provider ($EXECPLANE_ISSUER)")
	subject := fs.String("owner", in.getenv("EXECPLANE_OWNER"), "the owner: the end user the client acts for ($EXECPLANE_OWNER)")
	return func() (client.Owner, error) {
		var p cli.Problems
		p.Required("issuer", *issuer)
		p.Required("owner", *subject)
		return client.Owner{Issuer: *issuer, Subject: *subject}, p.Err()
	}
}

// handleFlags are a binding's environment: owner flags, --revision; the binding and the
// environment id are arguments.
func handleFlags(fs *flag.FlagSet, in *invocation) func(binding, id string) (client.AttachRequest, error) {
	owner := ownerFlags(fs, in)
	revision := fs.String("revision", "", "the environment's revision (its UID, printed by env ensure) (required)")
	return func(binding, id string) (client.AttachRequest, error) {
		o, err := owner()
		if err == nil && *revision == "" {
			err = cli.Usagef("--revision is required")
		}
		return client.AttachRequest{Owner: o, BindingID: binding, ID: id, Revision: *revision}, err
	}
}

// connect resolves a binding's environment from the arguments and flags, and dials.
func (in *invocation) connect(handle func(binding, id string) (client.AttachRequest, error)) (client.AttachRequest, *client.Client, error) {
	r, err := handle(in.args[0], in.args[1])
	if err != nil {
		return r, nil, err
	}
	c, err := in.dial()
	return r, c, err
}

var profilesGroup = &group{name: "profiles", summary: "executor profiles as the gateway has them loaded", leaves: []*leaf{{
	name: "get", args: "NAME", nargs: 1, summary: "show a profile's digest and limits",
	example: "execctl profiles get sandbox\nexecctl profiles get sandbox --digest sha256:… -o json   # fails (exit 5) if it changed",
	setup: func(fs *flag.FlagSet, in *invocation) func() error {
		digest := fs.String("digest", "", "fail unless the loaded profile has this digest")
		return func() error {
			c, err := in.dial()
			if err != nil {
				return err
			}
			ctx, cancel := in.callContext()
			defer cancel()
			p, err := c.ValidateProfile(ctx, in.args[0], *digest)
			if err != nil {
				return err
			}
			return in.emit(profileValue(p), []string{"NAME", "DIGEST", "MAX FILE BYTES", "MAX OUTPUT BYTES", "MAX DURATION"},
				[][]string{{p.Name, p.Digest, strconv.FormatUint(p.MaxFileBytes, 10), strconv.FormatUint(p.MaxCommandBytes, 10), p.MaxCommandDuration.String()}})
		}
	},
}}}

var envGroup = &group{name: "env", summary: "a binding's environment: ensure, attach, release, suspend, resume, rm, retain", leaves: []*leaf{
	{
		name: "ensure", args: "BINDING", nargs: 1, summary: "the binding's environment, created on first use; waits until it is Ready",
		example: "execctl env ensure conv-1 --owner alice --issuer https://idp.example --profile sandbox\nexecctl env ensure conv-1 --profile sandbox --no-wait -o json\nexecctl env ensure conv-2 --profile sandbox --from-snapshot before-refactor",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			owner := ownerFlags(fs, in)
			profile := fs.String("profile", "", "executor profile (required)")
			digest := fs.String("digest", "", "pin the profile's digest")
			noWait := fs.Bool("no-wait", false, "return once the environment exists, without waiting until it is Ready")
			pending := fs.Bool("keep-pending", false, "leave the binding's reference PENDING_CREATE (commit it with refs commit)")
			wait := fs.Duration("wait", 5*time.Minute, "how long to wait until Ready")
			from := fs.String("from-snapshot", "", "a new environment's workspace starts as this snapshot of the owner's (snap ls)")
			return func() error {
				o, err := owner()
				if err != nil {
					return err
				}
				if *profile == "" {
					return cli.Usagef("--profile is required")
				}
				c, err := in.dial()
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				env, err := c.Ensure(ctx, client.EnsureRequest{Owner: o, BindingID: in.args[0], Profile: *profile, ExpectedProfileDigest: *digest,
					KeepReferencePending: *pending, NoWait: true, FromSnapshot: *from})
				if err != nil {
					return err
				}
				if !*noWait && !env.Status().GetReady() {
					if err := in.waitReady(env, *wait); err != nil {
						return err
					}
				}
				return in.emitEnvironment(env.Status())
			}
		},
	},
	{
		name: "attach", args: "BINDING ENV", nargs: 2, summary: "the environment of a binding that holds a usable reference",
		example: "execctl env attach conv-1 xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			handle := handleFlags(fs, in)
			return func() error {
				r, c, err := in.connect(handle)
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				env, err := c.Attach(ctx, r)
				if err != nil {
					return err
				}
				return in.emitEnvironment(env.Status())
			}
		},
	},
	{
		name: "release", args: "BINDING ENV", nargs: 2, summary: "remove the binding's published reference",
		example: "execctl env release conv-1 xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --owner alice",
		setup:   referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.ReleaseReference(ctx) }),
	},
	{
		name: "suspend", args: "BINDING ENV", nargs: 2, summary: "stop the executor, keep the workspace; every grant dies",
		example: "execctl env suspend conv-1 xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --owner alice",
		setup:   referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.Suspend(ctx) }),
	},
	{
		name: "rm", args: "BINDING ENV", nargs: 2, summary: "delete the environment for good: its executor, every command in it, its workspace",
		example: "execctl env rm conv-1 xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			handle := handleFlags(fs, in)
			wait := fs.Duration("wait", 30*time.Second, "wait up to this long (at most 30s) for the deletion to complete; 0: answer at once")
			return referenceRun(in, handle, func(ctx context.Context, e *client.Environment) error { return e.Delete(ctx, *wait) })
		},
	},
	{
		name: "retain", args: "BINDING ENV", nargs: 2, summary: "keep the workspace from the profile's time limits (--off: let them apply again)",
		example: "execctl env retain conv-1 xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			handle := handleFlags(fs, in)
			off := fs.Bool("off", false, "clear the retention")
			return referenceRun(in, handle, func(ctx context.Context, e *client.Environment) error { return e.SetRetention(ctx, !*off) })
		},
	},
	{
		name: "resume", args: "BINDING ENV", nargs: 2, summary: "start a new executor on a suspended environment's workspace",
		example: "execctl env resume conv-1 xenv-59d14f8a21d8ced1aa54 --revision 5f0e… --owner alice",
		setup:   referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.Resume(ctx) }),
	},
}}

// progressInterval is how often a long wait says it is still waiting: often enough to show
// it is alive, rarely enough that the five-minute default prints some thirty lines.
const progressInterval = 10 * time.Second

// waitReady waits with progress on stderr, whole lines only: a line never stays open while
// waiting, so nothing else written to the terminal (the table on stdout, a ^C, a log line)
// can land on it, however the wait ends.
func (in *invocation) waitReady(env *client.Environment, wait time.Duration) error {
	ctx, cancel := context.WithTimeout(in.ctx, wait)
	defer cancel()
	fmt.Fprintf(in.stderr, "waiting for %s to be ready (up to %s)\n", env.ID(), wait)
	done := make(chan error, 1)
	go func() { done <- env.WaitReady(ctx) }()
	tick := time.NewTicker(progressInterval)
	defer tick.Stop()
	start := time.Now()
	for {
		select {
		case err := <-done:
			if err != nil {
				return err // the error, printed on its own line by the caller, says why
			}
			fmt.Fprintf(in.stderr, "%s is ready after %s\n", env.ID(), time.Since(start).Round(100*time.Millisecond))
			return nil
		case <-tick.C:
			fmt.Fprintf(in.stderr, "still waiting for %s (%s)\n", env.ID(), time.Since(start).Round(time.Second))
		}
	}
}

// referenceLeaf is a command acting on a binding's reference.
func referenceLeaf(op func(context.Context, *client.Environment) error) func(fs *flag.FlagSet, in *invocation) func() error {
	return func(fs *flag.FlagSet, in *invocation) func() error {
		return referenceRun(in, handleFlags(fs, in), op)
	}
}

// referenceRun runs op on the handle the arguments and flags name, and prints what it left.
func referenceRun(in *invocation, handle func(binding, id string) (client.AttachRequest, error), op func(context.Context, *client.Environment) error) func() error {
	return func() error {
		r, c, err := in.connect(handle)
		if err != nil {
			return err
		}
		ctx, cancel := in.callContext()
		defer cancel()
		env := c.Handle(r)
		if err := op(ctx, env); err != nil {
			return err
		}
		return in.emitEnvironment(env.Status())
	}
}

var refsGroup = &group{name: "refs", summary: "reference intents: the binding ↔ environment ledger's unfinished steps", leaves: []*leaf{
	{
		name: "list", nargs: 0, summary: "the client's unfinished references (pending create, pending delete, reserved)",
		example: "execctl refs list\nexecctl refs list --owner alice --issuer https://idp.example -o json",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			issuer := fs.String("issuer", in.getenv("EXECPLANE_ISSUER"), "with --owner: only this owner's ($EXECPLANE_ISSUER)")
			subject := fs.String("owner", "", "only this owner's references")
			return func() error {
				c, err := in.dial()
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				var owner client.Owner
				if *subject != "" {
					owner = client.Owner{Issuer: *issuer, Subject: *subject}
				}
				var rows [][]string
				var values []proto.Message
				for in, err := range c.ListReferenceIntents(ctx, owner) {
					if err != nil {
						return err
					}
					r := in.Reference
					source := r.GetSourceBindingId()
					if source == "" {
						source = "-"
					}
					rows = append(rows, []string{in.Environment.GetId(), in.Environment.GetRevision(), r.GetBindingId(),
						trimEnum(r.GetState().String(), "REFERENCE_STATE_"), source, r.GetUpdatedAt().AsTime().UTC().Format(time.RFC3339)})
					values = append(values, &executionv1.ReferenceIntent{Environment: in.Environment, Reference: r})
				}
				return in.emit(values, []string{"ENV", "REVISION", "BINDING", "STATE", "SOURCE", "UPDATED"}, rows)
			}
		},
	},
	{name: "commit", args: "BINDING ENV", nargs: 2, summary: "publish a pending reference", example: "execctl refs commit conv-1 xenv-… --revision 5f0e… --owner alice",
		setup: referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.CommitReference(ctx) })},
	{name: "abort", args: "BINDING ENV", nargs: 2, summary: "drop a pending reference", example: "execctl refs abort conv-1 xenv-… --revision 5f0e… --owner alice",
		setup: referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.AbortReference(ctx) })},
	{name: "prepare-delete", args: "BINDING ENV", nargs: 2, summary: "mark a published reference PENDING_DELETE", example: "execctl refs prepare-delete conv-1 xenv-… --revision 5f0e… --owner alice",
		setup: referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.PrepareReferenceDelete(ctx) })},
	{name: "confirm-delete", args: "BINDING ENV", nargs: 2, summary: "remove a reference prepared for deletion", example: "execctl refs confirm-delete conv-1 xenv-… --revision 5f0e… --owner alice",
		setup: referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.ConfirmReferenceDelete(ctx) })},
	{name: "cancel-delete", args: "BINDING ENV", nargs: 2, summary: "publish again a reference prepared for deletion", example: "execctl refs cancel-delete conv-1 xenv-… --revision 5f0e… --owner alice",
		setup: referenceLeaf(func(ctx context.Context, e *client.Environment) error { return e.CancelReferenceDelete(ctx) })},
	{
		name: "reserve", args: "SOURCE-BINDING ENV SUCCESSOR-BINDING", nargs: 3, summary: "reserve a successor binding on the same environment (a fork)",
		example: "execctl refs reserve conv-1 xenv-… conv-1-fork --revision 5f0e… --owner alice",
		setup: func(fs *flag.FlagSet, in *invocation) func() error {
			handle := handleFlags(fs, in)
			return func() error {
				r, c, err := in.connect(handle)
				if err != nil {
					return err
				}
				ctx, cancel := in.callContext()
				defer cancel()
				env := c.Handle(r)
				if err := env.ReserveSuccessor(ctx, in.args[2]); err != nil {
					return err
				}
				return in.emitEnvironment(env.Status())
			}
		},
	},
}}
