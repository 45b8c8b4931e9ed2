package protocol

import (
	"errors"
	"fmt"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Error is a refusal with its protocol code: what the helper answers, and what the
// gateway's own validation (the same functions) returns before anything is sent.
type Error struct {
	Code helperv1.ErrorCode
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// Is matches errors with the same code, so errors.Is(err, &Error{Code: c}) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Code == e.Code && t.Msg == ""
}

// Errorf returns an *Error with code and a formatted message. Messages name rules and
// operations, never paths' or files' contents.
func Errorf(code helperv1.ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the protocol code of err: its own for an *Error, INTERNAL otherwise.
func CodeOf(err error) helperv1.ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return helperv1.ErrorCode_ERROR_CODE_INTERNAL
}

// Sentinels for errors.Is, one per code a refusal can carry.
var (
	ErrInvalid         = &Error{Code: helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT}
	ErrNotFound        = &Error{Code: helperv1.ErrorCode_ERROR_CODE_NOT_FOUND}
	ErrAlreadyExists   = &Error{Code: helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS}
	ErrVersionMismatch = &Error{Code: helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH}
	ErrPathEscape      = &Error{Code: helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE}
	ErrPermission      = &Error{Code: helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED}
	ErrExhausted       = &Error{Code: helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED}
	ErrWrongType       = &Error{Code: helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE}
	ErrUnavailable     = &Error{Code: helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE}
)

// HelperCode returns the protocol code.
func (e *Error) HelperCode() helperv1.ErrorCode { return e.Code }
