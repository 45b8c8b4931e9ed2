package store

import (
	"errors"
	"fmt"
)

// Errors of the store. The gateway and the control API translate them to gRPC codes once, at
// the edge (docs/api.md): each names the ErrorReason it maps to. Messages name fields and
// rules, never owners, identities or tokens.
var (
	// ErrInvalidArgument (INVALID_ARGUMENT): a malformed input, refused before any lookup.
	ErrInvalidArgument = errors.New("store: invalid argument")
	// ErrPermissionDenied (PERMISSION_DENIED): the caller lacks a capability.
	ErrPermissionDenied = errors.New("store: permission denied")
	// ErrNotFound (NOT_FOUND): absent, or not visible to the caller.
	ErrNotFound = errors.New("store: not found")
	// ErrAlreadyExists (ALREADY_EXISTS): the binding already holds another environment or
	// reference.
	ErrAlreadyExists = errors.New("store: already exists")
	// ErrConflict (ABORTED, retryable): the compare-and-swap kept losing.
	ErrConflict = errors.New("store: conflict")
	// ErrOperationIDReused (ABORTED): the operation id was used before with other arguments.
	ErrOperationIDReused = errors.New("store: operation id reused with other arguments")
	// ErrRunClaimHeld (ABORTED): another unexpired run claim holds the environment.
	ErrRunClaimHeld = errors.New("store: run claim held")
	// ErrStaleEpoch (ABORTED): the grant's epoch or claim is not the current one.
	ErrStaleEpoch = errors.New("store: stale epoch")
	// ErrRevoked (ABORTED): the grant's generation was revoked.
	ErrRevoked = errors.New("store: grant generation revoked")
	// ErrPreconditionMismatch (ABORTED): an administrative precondition differs.
	ErrPreconditionMismatch = errors.New("store: precondition mismatch")
	// ErrFenced (FAILED_PRECONDITION): the environment is fenced until recovered.
	ErrFenced = errors.New("store: environment fenced")
	// ErrNotReady (FAILED_PRECONDITION): not ready for this operation.
	ErrNotReady = errors.New("store: not ready")
	// ErrProfileMismatch (FAILED_PRECONDITION, reason PRECONDITION_MISMATCH): the profile's
	// digest is not the one the caller pinned.
	ErrProfileMismatch = errors.New("store: profile digest mismatch")
	// ErrLimitExceeded (RESOURCE_EXHAUSTED): a capacity or list bound.
	ErrLimitExceeded = errors.New("store: limit exceeded")
)

func invalid(field, rule string) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalidArgument, field, rule)
}

func notReady(why string) error { return fmt.Errorf("%w: %s", ErrNotReady, why) }

func mismatch(field string) error { return fmt.Errorf("%w: %s", ErrPreconditionMismatch, field) }
