package process

import (
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Refusals are protocol.Error values, with the protocol's codes.

func invalidf(format string, args ...any) error {
	return protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, format, args...)
}
