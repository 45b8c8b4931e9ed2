package control

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/apierror"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
)

// Recovering is the control server's innermost interceptor: a handler that panics answers
// INTERNAL with the caller's request id, and its value and stack go to the log only — one
// bad request must not take the leading controller (and every gateway's control path) down
// with it. The ledger stays consistent: every store write is a compare-and-swap, and the
// locks a handler holds are released by its deferred calls while the panic unwinds.
func Recovering(log hclog.Logger) grpc.UnaryServerInterceptor {
	log = log.Named("control")
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			r := recover()
			if r == nil {
				return
			}
			rid := ""
			if c, ok := req.(interface{ GetCaller() *controlv1.Caller }); ok {
				if id := c.GetCaller().GetRequestId(); len(id) <= maxRequestID && printable(id) {
					rid = id
				}
			}
			log.Error("control call panicked", logging.KeyRPC, info.FullMethod, logging.KeyRequestID, rid,
				logging.KeyError, fmt.Sprintf("%v\n%s", r, debug.Stack()))
			resp, err = nil, apierror.Status(errPanic, rid)
		}()
		return handler(ctx, req)
	}
}

// errPanic is outside the vocabulary on purpose: it answers INTERNAL with a generic message.
var errPanic = errors.New("control handler panicked")
