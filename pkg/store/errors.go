package store

import (
	"fmt"

	"github.com/execplane/execplane/pkg/apierror"
)

// The store's refusals wrap the classes of pkg/apierror (translated to gRPC once, at the
// edge); these build the common ones. Messages name fields and rules, never owners,
// identities or tokens.

func invalid(field, rule string) error {
	return fmt.Errorf("%w: %s: %s", apierror.ErrInvalidArgument, field, rule)
}

func notReady(why string) error { return fmt.Errorf("%w: %s", apierror.ErrNotReady, why) }

func mismatch(field string) error {
	return fmt.Errorf("%w: %s", apierror.ErrPreconditionMismatch, field)
}
