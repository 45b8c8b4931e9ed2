package fileops

import (
	"errors"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Refusals are protocol.Error values (the protocol's codes); errorf builds one.
var errorf = protocol.Errorf

// fromErrno maps a system call failure to a typed error. op names the operation, never a
// path or content.
func fromErrno(op string, err error) error {
	if err == nil {
		return nil
	}
	var e *protocol.Error
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
