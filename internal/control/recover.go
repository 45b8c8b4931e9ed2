package control

import (
	"context"
	"errors"

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
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		resp, err := apierror.Recovered(func() (any, error) { return handler(ctx, req) })
		if !errors.Is(err, apierror.ErrPanic) {
			return resp, err
		}
		rid := ""
		if c, ok := req.(interface{ GetCaller() *controlv1.Caller }); ok {
			if id := c.GetCaller().GetRequestId(); len(id) <= maxRequestID && printable(id) {
				rid = id
			}
		}
		log.Error("control call panicked", logging.KeyRPC, info.FullMethod, logging.KeyRequestID, rid, logging.KeyError, err)
		return nil, apierror.Status(err, rid)
	}
}
