package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"connectrpc.com/connect"
	"github.com/hashicorp/go-hclog"

	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/client"
)

// problem is how an error reaches an E2B SDK: an HTTP status for the control API and envd's
// /files (the SDK reads the JSON body's code), a Connect code for envd's RPCs, and a message
// safe to show (never a key, token or file content).
type problem struct {
	status  int
	code    connect.Code
	message string
}

// Errors of the front end's own (the API's are classified by classify).
var (
	errUnauthorized = &problem{http.StatusUnauthorized, connect.CodeUnauthenticated, "Invalid API key"}
	errBadToken     = &problem{http.StatusUnauthorized, connect.CodeUnauthenticated, "invalid access token for this sandbox"}
)

func (p *problem) Error() string { return p.message }

func badRequest(format string, args ...any) *problem {
	return &problem{http.StatusBadRequest, connect.CodeInvalidArgument, fmt.Sprintf(format, args...)}
}

func unsupported(format string, args ...any) *problem {
	return &problem{http.StatusNotImplemented, connect.CodeUnimplemented, fmt.Sprintf(format, args...)}
}

// classify maps an error of the front end or of the execplane API onto what the SDK
// understands (docs/e2b.md "Errors"). Anything unexpected is an internal error whose message
// carries the API's request id, never the cause's text beyond the API's own message.
func classify(err error) *problem {
	var p *problem
	if errors.As(err, &p) {
		return p
	}
	var outside errOutsideWorkspace
	if errors.As(err, &outside) {
		return badRequest("%s", outside.Error())
	}
	switch {
	case errors.Is(err, errSandboxNotFound):
		return &problem{http.StatusNotFound, connect.CodeNotFound, "sandbox not found"}
	case errors.Is(err, errSandboxNotRunning):
		// E2B's edge answers 502 for a sandbox that is not running; the SDK maps it to
		// "the sandbox was probably killed or timed out".
		return &problem{http.StatusBadGateway, connect.CodeUnavailable, "The sandbox is not running"}
	case errors.Is(err, context.DeadlineExceeded):
		return &problem{http.StatusGatewayTimeout, connect.CodeDeadlineExceeded, "deadline exceeded"}
	case errors.Is(err, context.Canceled):
		return &problem{499, connect.CodeCanceled, "canceled"}
	}
	var e *client.Error
	if !errors.As(err, &e) {
		return &problem{http.StatusInternalServerError, connect.CodeInternal, "internal error"}
	}
	msg := e.Message
	if e.RequestID != "" {
		msg += " (request " + e.RequestID + ")"
	}
	switch {
	case errors.Is(err, client.ErrNotFound):
		return &problem{http.StatusNotFound, connect.CodeNotFound, msg}
	case errors.Is(err, client.ErrPathEscape):
		return &problem{http.StatusBadRequest, connect.CodeInvalidArgument, msg}
	case errors.Is(err, client.ErrInvalidArgument), errors.Is(err, client.ErrWrongType):
		return &problem{http.StatusBadRequest, connect.CodeInvalidArgument, msg}
	case errors.Is(err, client.ErrAlreadyExists):
		return &problem{http.StatusConflict, connect.CodeAlreadyExists, msg}
	case errors.Is(err, client.ErrExhausted):
		return &problem{http.StatusTooManyRequests, connect.CodeResourceExhausted, msg}
	case errors.Is(err, client.ErrFenced), errors.Is(err, client.ErrNotReady):
		return &problem{http.StatusBadGateway, connect.CodeUnavailable, msg}
	case errors.Is(err, client.ErrUnavailable):
		return &problem{http.StatusServiceUnavailable, connect.CodeUnavailable, msg}
	case errors.Is(err, client.ErrPermissionDenied):
		return &problem{http.StatusForbidden, connect.CodePermissionDenied, msg}
	case errors.Is(err, client.ErrUnauthenticated):
		// The front end's own identity was refused: not the SDK's key.
		return &problem{http.StatusInternalServerError, connect.CodeInternal, msg}
	case errors.Is(err, client.ErrRecordUnverified):
		return &problem{http.StatusInternalServerError, connect.CodeDataLoss, msg}
	case errors.Is(err, client.ErrConflict):
		return &problem{http.StatusConflict, connect.CodeAborted, msg}
	case errors.Is(err, client.ErrOutcomeUnknown):
		return &problem{http.StatusBadGateway, connect.CodeUnknown, msg}
	}
	return &problem{http.StatusInternalServerError, connect.CodeInternal, msg}
}

// connectError is err as a Connect error (one already is passes as it is).
func connectError(err error) error {
	if err == nil {
		return nil
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	p := classify(err)
	return connect.NewError(p.code, errors.New(p.message))
}

// errorLog logs the calls that fail for a reason of the server's side (unavailable,
// internal, unknown, data loss): the procedure, the code and the message the caller got —
// the API's, with its request id for the gateway's logs; never a key, a token or content.
type errorLog struct{ log hclog.Logger }

func (e errorLog) note(procedure string, err error) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return
	}
	switch ce.Code() {
	case connect.CodeUnavailable, connect.CodeInternal, connect.CodeUnknown, connect.CodeDataLoss:
		e.log.Warn("call failed", logging.KeyRPC, procedure, logging.KeyCode, ce.Code().String(), logging.KeyError, ce.Message())
	}
}

func (e errorLog) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		resp, err := next(ctx, req)
		e.note(req.Spec().Procedure, err)
		return resp, err
	}
}

func (e errorLog) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (e errorLog) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		err := next(ctx, conn)
		e.note(conn.Spec().Procedure, err)
		return err
	}
}

// fail answers an HTTP request with E2B's error body, logging a failure of the server's side
// as errorLog does.
func (f *frontEnd) fail(w http.ResponseWriter, r *http.Request, err error) {
	if p := classify(err); p.status >= http.StatusInternalServerError {
		f.log.Warn("call failed", logging.KeyRPC, r.Method+" "+r.URL.Path, logging.KeyCode, strconv.Itoa(p.status), logging.KeyError, p.message)
	}
	writeError(w, err)
}

// writeError answers an HTTP request with E2B's error body: {"code": <status>, "message"}.
func writeError(w http.ResponseWriter, err error) {
	p := classify(err)
	writeJSON(w, p.status, map[string]any{"code": p.status, "message": p.message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
