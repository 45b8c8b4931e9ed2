package store_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/store"
)

// Every refusal class, on one environment: the stated error, and the stored object
// byte-for-byte unchanged. "Not yours" (another client, another owner, an administrator out
// of scope, another incarnation) answers exactly like an absent environment.
func TestRefusalsWriteNothing(t *testing.T) {
	f := newFixture(t, options{})
	first := f.ensure(t, agentA, alice, "conv-r")
	env := first.Environment
	r := ref(env)
	otherUID := r
	otherUID.UID = "00000000-0000-4000-8000-000000000000"
	absent := ident.EnvironmentRef{Name: "xenv-00000000000000000000", UID: otherUID.UID}
	refIn := func(c store.Caller, o store.Owner, e ident.EnvironmentRef, binding string) store.ReferenceInput {
		return store.ReferenceInput{Caller: c, OperationID: opID(), Owner: o, Environment: e, BindingID: binding}
	}
	adminIn := func(c store.Caller, e ident.EnvironmentRef, p store.Preconditions) store.AdminInput {
		return store.AdminInput{Caller: c, OperationID: opID(), Environment: e, Preconditions: p}
	}
	zero := ptrTo[uint64](0)
	cases := []struct {
		name string
		want error
		call func(ctx context.Context) error
	}{
		{"malformed binding", apierror.ErrInvalidArgument, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(agentA, alice, r, "../etc"))
			return err
		}},
		{"malformed operation id", apierror.ErrInvalidArgument, func(ctx context.Context) error {
			in := refIn(agentA, alice, r, "conv-r")
			in.OperationID = strings.Repeat("x", 129)
			_, err := f.store.CommitReference(ctx, in)
			return err
		}},
		{"owner not attestable", apierror.ErrPermissionDenied, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(noAttest, alice, r, "conv-r"))
			return err
		}},
		{"other owner", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(agentA, bob, r, "conv-r"))
			return err
		}},
		{"other client", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(agentB, alice, r, "conv-r"))
			return err
		}},
		{"other incarnation", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(agentA, alice, otherUID, "conv-r"))
			return err
		}},
		{"absent", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(agentA, alice, absent, "conv-r"))
			return err
		}},
		{"reference in the wrong state", apierror.ErrNotReady, func(ctx context.Context) error {
			_, err := f.store.ConfirmReferenceDelete(ctx, refIn(agentA, alice, r, "conv-r"))
			return err
		}},
		{"no such reference", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.CommitReference(ctx, refIn(agentA, alice, r, "conv-other"))
			return err
		}},
		{"not an administrator", apierror.ErrPermissionDenied, func(ctx context.Context) error {
			_, err := f.store.RevokeEnvironment(ctx, adminIn(notAdmin, r, store.Preconditions{GrantGeneration: zero}))
			return err
		}},
		{"administrator out of scope", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.RevokeEnvironment(ctx, adminIn(scopedOps, r, store.Preconditions{GrantGeneration: zero}))
			return err
		}},
		{"precondition missing", apierror.ErrInvalidArgument, func(ctx context.Context) error {
			_, err := f.store.RevokeEnvironment(ctx, adminIn(admin, r, store.Preconditions{}))
			return err
		}},
		{"precondition mismatch", apierror.ErrPreconditionMismatch, func(ctx context.Context) error {
			_, err := f.store.RevokeEnvironment(ctx, adminIn(admin, r, store.Preconditions{GrantGeneration: ptrTo[uint64](7)}))
			return err
		}},
		{"delete-retired naming a claim that is not recorded", apierror.ErrPreconditionMismatch, func(ctx context.Context) error {
			_, err := f.store.DeleteRetiredEnvironment(ctx, adminIn(admin, r, store.Preconditions{PVCUID: ptrTo("00000000-0000-4000-8000-000000000001")}))
			return err
		}},
		{"migrate to another schema version", apierror.ErrInvalidArgument, func(ctx context.Context) error {
			_, err := f.store.MigrateEnvironment(ctx, store.MigrateInput{AdminInput: adminIn(admin, r, store.Preconditions{Epoch: zero}), TargetSchemaVersion: 2})
			return err
		}},
		{"recover an environment that is not fenced", apierror.ErrNotReady, func(ctx context.Context) error {
			_, err := f.store.RecoverEnvironment(ctx, adminIn(admin, r, store.Preconditions{Epoch: zero, PodUID: ptrTo("")}))
			return err
		}},
		{"run grant for a claim that does not exist", apierror.ErrStaleEpoch, func(ctx context.Context) error {
			_, err := f.store.ReleaseRun(ctx, store.ReleaseRunInput{Caller: agentA, OperationID: opID(), Environment: r,
				Grant: authority.GrantClaims{BindingID: "conv-r", Environment: r, RunID: "run-1", ClaimID: "c0ffee"}})
			return err
		}},
		{"run grant of another client", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.ReleaseRun(ctx, store.ReleaseRunInput{Caller: agentB, OperationID: opID(), Environment: r,
				Grant: authority.GrantClaims{BindingID: "conv-r", Environment: r, RunID: "run-1", ClaimID: "c0ffee"}})
			return err
		}},
		{"acquire on an environment that is not ready", apierror.ErrNotReady, func(ctx context.Context) error {
			_, err := f.store.AcquireRun(ctx, store.AcquireRunInput{Caller: agentA, OperationID: opID(), Environment: r, RunID: "run-1",
				Grant: authority.GrantClaims{BindingID: "conv-r", Environment: r}})
			return err
		}},
		{"suspend before the first executor", apierror.ErrNotReady, func(ctx context.Context) error {
			_, err := f.store.SuspendEnvironment(ctx, refIn(agentA, alice, r, "conv-r"))
			return err
		}},
		{"suspend for another owner", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.SuspendEnvironment(ctx, refIn(agentA, bob, r, "conv-r"))
			return err
		}},
		{"suspend by a client that may not attest owners", apierror.ErrPermissionDenied, func(ctx context.Context) error {
			_, err := f.store.SuspendEnvironment(ctx, refIn(noAttest, alice, r, "conv-r"))
			return err
		}},
		{"suspend for a binding without a reference", apierror.ErrNotReady, func(ctx context.Context) error {
			_, err := f.store.SuspendEnvironment(ctx, refIn(agentA, alice, r, "conv-other"))
			return err
		}},
		{"attach waiting longer than the bound", apierror.ErrInvalidArgument, func(ctx context.Context) error {
			_, err := f.store.Attach(ctx, store.AttachInput{Caller: agentA, Owner: alice, BindingID: "conv-r", Environment: r, WaitReady: store.MaxAttachWait + 1})
			return err
		}},
		{"resume of another client's environment", apierror.ErrNotFound, func(ctx context.Context) error {
			_, err := f.store.ResumeEnvironment(ctx, refIn(agentB, alice, r, "conv-r"))
			return err
		}},
		{"replayed id with other arguments", apierror.ErrOperationIDReused, func(ctx context.Context) error {
			_, err := f.store.Ensure(ctx, store.EnsureInput{Caller: agentA, OperationID: env.Status.Receipts[0].OperationID, Owner: alice, BindingID: "conv-r",
				Profile: "python", ExpectedProfileDigest: env.Spec.ProfileDigest})
			return err
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := f.snapshot(t, env.Name)
			err := c.call(f.ctx)
			if !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
			if string(f.snapshot(t, env.Name)) != string(before) {
				t.Fatal("the refusal changed the object")
			}
		})
	}
}
