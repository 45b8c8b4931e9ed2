package apierror

import (
	"errors"
	"fmt"
	"runtime/debug"
)

// ErrPanic marks an error Recovered made of a panic. It is outside the vocabulary on
// purpose: Status answers it INTERNAL with a generic message and the request id, and its
// text — the panic's value and stack — is for the log only.
var ErrPanic = errors.New("handler panicked")

// Recovered runs call and turns a panic in it into an error wrapping ErrPanic, with the
// panic's value and the stack: one bad request answers INTERNAL instead of ending the
// server, and the edge that logs the error logs why.
func Recovered[T any](call func() (T, error)) (resp T, err error) {
	defer func() {
		if r := recover(); r != nil {
			var zero T
			resp, err = zero, fmt.Errorf("%w: %v\n%s", ErrPanic, r, debug.Stack())
		}
	}()
	return call()
}
