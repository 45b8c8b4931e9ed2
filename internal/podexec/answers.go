package podexec

import (
	"errors"
	"fmt"
	"strings"

	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/pkg/apierror"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// MaxHelperMessage bounds what of a helper's text (a refusal, a command record's message)
// reaches the caller; the text is the executor's, so it is also reduced to printable ASCII.
const MaxHelperMessage = 256

// Refused is the error of a helper's refusal in resp, in the API's vocabulary, or nil when
// resp carries none.
func Refused(resp *helperv1.Response) error {
	e := resp.GetError()
	if e == nil {
		return nil
	}
	return HelperError(&protocol.Error{Code: e.GetCode(), Msg: e.GetMessage()})
}

// helperCodes translates the helper's refusals into the API's vocabulary. A code outside
// the table (INTERNAL, UNSUPPORTED_VERSION, or an unknown value from a replaced helper) is an
// internal error.
var helperCodes = map[helperv1.ErrorCode]error{
	helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:    apierror.ErrInvalidArgument,
	helperv1.ErrorCode_ERROR_CODE_NOT_FOUND:           apierror.ErrNotFound,
	helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS:      apierror.ErrAlreadyExists,
	helperv1.ErrorCode_ERROR_CODE_VERSION_MISMATCH:    apierror.ErrVersionMismatch,
	helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE:         apierror.ErrPathEscape,
	helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED:   apierror.ErrPermissionDenied,
	helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED:  apierror.ErrLimitExceeded,
	helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE:          apierror.ErrWrongType,
	helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE:         apierror.ErrNotReady,
	helperv1.ErrorCode_ERROR_CODE_OUTCOME_UNKNOWN:     apierror.ErrOutcomeUnknown,
	helperv1.ErrorCode_ERROR_CODE_DATA_LOSS:           apierror.ErrRecordUnverified,
	helperv1.ErrorCode_ERROR_CODE_UNSUPPORTED_VERSION: nil,
	helperv1.ErrorCode_ERROR_CODE_INTERNAL:            nil,
}

// HelperError translates a helper refusal (remote, or the shared validation run locally).
// The message is the executor's, so it is cut and reduced to printable ASCII.
func HelperError(err error) error {
	var coded *protocol.Error
	if !errors.As(err, &coded) {
		return err
	}
	sentinel := helperCodes[coded.Code]
	if sentinel == nil {
		return fmt.Errorf("%w: the helper failed: code %d", ErrProtocol, coded.Code)
	}
	return fmt.Errorf("%w: %s", sentinel, sanitize(err.Error(), MaxHelperMessage))
}

// Printable is what of the executor's text s may reach a caller: at most MaxHelperMessage
// bytes, each printable ASCII.
func Printable(s string) string { return sanitize(s, MaxHelperMessage) }

// sanitize keeps at most limit bytes of s, each printable ASCII (others become '?').
func sanitize(s string, limit int) string {
	var b strings.Builder
	for i := 0; i < len(s) && b.Len() < limit; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b.WriteByte(c)
		} else {
			b.WriteByte('?')
		}
	}
	return b.String()
}
