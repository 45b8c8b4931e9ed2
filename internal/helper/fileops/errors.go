package fileops

import (
	"errors"
	"fmt"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
	"golang.org/x/sys/unix"
)

// Error is a file operation's failure with its protocol code.
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

func errorf(code helperv1.ErrorCode, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// Sentinels for errors.Is.
var (
	ErrNotFound        = &Error{Code: helperv1.ErrorCode_ERROR_CODE_NOT_FOUND}
	ErrAlreadyExists   = &Error{Code: helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS}
	ErrVersionMismatch = &Error{Code: helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH}
	ErrPathEscape      = &Error{Code: helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE}
	ErrPermission      = &Error{Code: helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED}
	ErrExhausted       = &Error{Code: helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED}
	ErrWrongType       = &Error{Code: helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE}
	ErrInvalid         = &Error{Code: helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT}
	ErrUnavailable     = &Error{Code: helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE}
)

// CodeOf returns the protocol code of err: its own for an *Error, INTERNAL otherwise.
func CodeOf(err error) helperv1.ErrorCode {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return helperv1.ErrorCode_ERROR_CODE_INTERNAL
}

// fromErrno maps a system call failure to a typed error. op names the operation, never a
// path or content.
func fromErrno(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return err
	}
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return errorf(helperv1.ErrorCode_ERROR_CODE_INTERNAL, "%s: %v", op, err)
	}
	code := helperv1.ErrorCode_ERROR_CODE_INTERNAL
	switch errno {
	case unix.ENOENT:
		code = helperv1.ErrorCode_ERROR_CODE_NOT_FOUND
	case unix.EEXIST:
		code = helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS
	case unix.EXDEV, unix.ELOOP:
		// RESOLVE_BENEATH answers EXDEV for an escape; RESOLVE_NO_MAGICLINKS (and loops that
		// could hide one) answer ELOOP. Both are treated as an escape attempt.
		code = helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE
	case unix.EACCES, unix.EPERM, unix.EROFS:
		code = helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED
	case unix.ENOTDIR, unix.EISDIR, unix.ENOTEMPTY, unix.ENXIO, unix.ENODEV:
		// ENXIO and ENODEV: opening a socket or a device without a driver.
		code = helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE
	case unix.ENOSPC, unix.EDQUOT, unix.EFBIG, unix.EMFILE, unix.ENFILE, unix.ENOMEM:
		code = helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED
	case unix.ENAMETOOLONG, unix.EINVAL, unix.EBUSY:
		code = helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT
	case unix.ENOSYS:
		code = helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE
	}
	return errorf(code, "%s: %s", op, errno.Error())
}

// HelperCode returns the protocol code.
func (e *Error) HelperCode() helperv1.ErrorCode { return e.Code }
