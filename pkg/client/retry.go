package client

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// requestIDHeader is the gateway's request id response header.
const requestIDHeader = "x-request-id"

// safety says which failures a call may be retried after.
type safety int

const (
	// serverSaysSo: only answers the server marks retryable (nothing was done). For calls
	// that must not run twice and carry no operation id (writes, commands).
	serverSaysSo safety = iota
	// idempotent: also transport failures (UNAVAILABLE without an answer), because running
	// the call twice is harmless — reads, or mutations that carry an operation id.
	idempotent
	// once: never retried — a call whose input was consumed as it went (a stream from an
	// io.Reader that cannot seek).
	once
)

type retryPolicy struct {
	attempts         int
	initial, ceiling time.Duration
}

func newRetryPolicy(cfg Config) retryPolicy {
	p := retryPolicy{attempts: cfg.MaxAttempts, initial: cfg.InitialBackoff, ceiling: cfg.MaxBackoff}
	if p.attempts <= 0 {
		p.attempts = DefaultMaxAttempts
	}
	if p.initial <= 0 {
		p.initial = DefaultInitialBackoff
	}
	if p.ceiling <= 0 {
		p.ceiling = DefaultMaxBackoff
	}
	return p
}

// call runs one logical call, retrying per its safety within the policy and ctx. f receives
// the call options that capture the request id; every attempt sends the same request (and so
// the same operation id).
func call[T any](ctx context.Context, c *Client, s safety, f func(context.Context, ...grpc.CallOption) (T, error)) (T, error) {
	var zero T
	backoff := c.retry.initial
	for attempt := 1; ; attempt++ {
		var header metadata.MD
		resp, err := f(ctx, grpc.Header(&header))
		if err == nil {
			return resp, nil
		}
		var requestID string
		if v := header.Get(requestIDHeader); len(v) > 0 {
			requestID = v[0]
		}
		err = asError(err, requestID)
		if e, ok := err.(*Error); ok && s == serverSaysSo && e.Reason == "" && (e.Code == codes.DeadlineExceeded || e.Code == codes.Canceled) {
			// The call ended on this side while the gateway may have been writing or running:
			// what happened is unknown, and a blind retry could do it twice.
			e.Reason = apierror.ReasonName(executionv1.ErrorReason_ERROR_REASON_OUTCOME_UNKNOWN)
		}
		if attempt >= c.retry.attempts || !retryable(err, s) || ctx.Err() != nil {
			return zero, err
		}
		// Full jitter: spread retries of many callers after a shared failure.
		wait := time.Duration(rand.Int64N(int64(backoff) + 1))
		backoff = min(backoff*2, c.retry.ceiling)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, err
		case <-t.C:
		}
	}
}

func retryable(err error, s safety) bool {
	e, ok := err.(*Error)
	if !ok || s == once {
		return false
	}
	if s == serverSaysSo && (e.Code == codes.Canceled || e.Code == codes.DeadlineExceeded) {
		// The gateway's own call ended midway: a write or command may have happened.
		return false
	}
	if e.Reason != "" {
		return e.Retryable
	}
	// No answer from execplane: the connection failed. Only a call that is harmless twice
	// may go again.
	return s == idempotent && e.Code == codes.Unavailable
}
