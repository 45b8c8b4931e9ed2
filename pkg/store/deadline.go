package store

import (
	"context"
	"fmt"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
)

func (c *checker) deadline(field string, d DeadlineInput) {
	c.Deadline(field+".after", d.After)
	if d.Action != executionv1alpha1.DeadlineDelete && d.Action != executionv1alpha1.DeadlineSuspend {
		c.Fail(field+".action", "must be DELETE or SUSPEND")
	}
}

func newDeadline(d DeadlineInput, binding, operation string, now metav1.Time) *executionv1alpha1.Deadline {
	return &executionv1alpha1.Deadline{At: metav1.NewTime(now.Add(d.After)), Action: d.Action, BindingID: binding, OperationID: operation, UpdatedAt: now}
}

// SetDeadline sets, moves or clears (Deadline nil) the owner's deadline of an environment,
// counted from now, for the owner of a binding that holds a usable reference. The
// controller starts the deadline's action at it (docs/controller.md "Deadlines").
func (s *Store) SetDeadline(ctx context.Context, in SetDeadlineInput) (*Result, error) {
	if err := checkReferenceInput(in.ReferenceInput); err != nil {
		return nil, err
	}
	args := []string{in.Caller.Client, OwnerHash(in.Owner), in.Environment.UID, in.BindingID, "none"}
	if d := in.Deadline; d != nil {
		var c checker
		c.deadline("deadline", *d)
		if c.Err() != nil {
			return nil, c.Err()
		}
		args[4] = fmt.Sprint(d.After, string(d.Action))
	}
	return s.mutate(ctx, mutation{
		op: "SetEnvironmentDeadline", id: in.OperationID, name: in.Environment.Name, args: args,
		visible: ownedBy(in.Caller, in.Owner, in.Environment),
		apply: func(env *executionv1alpha1.ExecutionEnvironment, now metav1.Time, _ *Result) (bool, error) {
			if err := authority.BoundReference(env, in.BindingID); err != nil {
				return false, err
			}
			if err := acceptingReferences(env); err != nil {
				return false, err
			}
			if in.Deadline == nil {
				changed := env.Status.Deadline != nil
				env.Status.Deadline = nil
				return changed, nil
			}
			if n := len(env.Status.References) - 1; in.Deadline.Action == executionv1alpha1.DeadlineDelete && n > 0 {
				// As DeleteEnvironment refuses (and the controller, at the deadline).
				return false, notReady(fmt.Sprintf("%d other binding(s) hold a reference on the environment: a DELETE deadline needs the only one", n))
			}
			env.Status.Deadline = newDeadline(*in.Deadline, in.BindingID, in.OperationID, now)
			return true, nil
		},
	})
}

// metadataKey is the canonical encoding of metadata for a request's fingerprint: sorted,
// each key and value length-prefixed by hashFields' rule.
func metadataKey(m map[string]string) string {
	keys := slices.Sorted(maps.Keys(m))
	fields := make([]string, 0, 2*len(keys))
	for _, k := range keys {
		fields = append(fields, k, m[k])
	}
	return hashFields("metadata", fields...)
}

// hasMetadata reports whether have holds every entry of want.
func hasMetadata(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
