package process

import (
	"fmt"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Error is a refusal with its protocol code.
type Error struct {
	Code helperv1.ErrorCode
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

// HelperCode returns the protocol code.
func (e *Error) HelperCode() helperv1.ErrorCode { return e.Code }

func invalidf(format string, args ...any) error {
	return &Error{Code: helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, Msg: fmt.Sprintf(format, args...)}
}

func exhaustedf(format string, args ...any) error {
	return &Error{Code: helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, Msg: fmt.Sprintf(format, args...)}
}
