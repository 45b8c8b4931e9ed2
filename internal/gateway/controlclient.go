package gateway

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/apierror"
	controlv1 "github.com/execplane/execplane/proto/control/v1"
)

// Retry bounds of control calls. Every control call is idempotent (an operation id, or a
// read), so retrying one that may have been applied is safe.
const (
	retryInitial = 25 * time.Millisecond
	retryMax     = time.Second
	// retryReserve is kept from the caller's deadline for the last attempt's answer.
	retryReserve = 50 * time.Millisecond
	// controlCallTimeout bounds one attempt when the caller's deadline is further away: a
	// leader that stopped answering mid-call is abandoned for the next one.
	controlCallTimeout = 15 * time.Second
	// retryBudget bounds the time spent retrying, whatever the caller's deadline: a leader
	// election takes a few seconds; past that the caller hears UNAVAILABLE (retryable) and
	// its slot is freed rather than held for an hour.
	retryBudget = 20 * time.Second
	// maxHeld is the API's bound on an Attach's wait_ready and a DeleteEnvironment's wait
	// (a longer one is refused).
	maxHeld = 30 * time.Second
	// maxControlMessage bounds a control answer (64 references and an environment).
	maxControlMessage = 4 << 20
	// controlConnectTimeout bounds one connection attempt to the control API: in the
	// cluster a TCP and TLS handshake take milliseconds. gRPC's default (20 s) kept calls
	// waiting on a stopped leader's vanished address for 20 s after its eviction
	// (test/deploy).
	controlConnectTimeout = 3 * time.Second
	// controlReconnectBase and controlReconnectMax bound the wait between connection
	// attempts (gRPC's default grows to 2 min): a takeover publishes the new leader within
	// seconds, and the connection should follow within one more.
	controlReconnectBase = 100 * time.Millisecond
	controlReconnectMax  = time.Second
)

// ControlFiles names the gateway's client material for the control API.
type ControlFiles = security.ClientFiles

// DialControl returns a control client for address. The client certificate, its key and the
// CA are read again for every new connection, so that their rotation needs no restart.
// Calls answered UNAVAILABLE (no leader yet, a follower, a restarting leader) or with a
// retryable RESOURCE_EXHAUSTED are retried with backoff within the caller's deadline.
func DialControl(address string, files ControlFiles) (controlv1.ControlServiceClient, func() error, error) {
	if _, err := security.LoadClientTLSConfig(files); err != nil {
		return nil, nil, err // refuse at start what would fail on every connection
	}
	conn, err := grpc.NewClient(address,
		grpc.WithTransportCredentials(security.ReloadingClientCredentials(files)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxControlMessage)),
		grpc.WithChainUnaryInterceptor(retryControl),
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: controlReconnectBase, Multiplier: 1.6, Jitter: 0.2, MaxDelay: controlReconnectMax},
			MinConnectTimeout: controlConnectTimeout,
		}),
	)
	if err != nil {
		return nil, nil, err
	}
	return controlv1.NewControlServiceClient(conn), conn.Close, nil
}

// ErrNoLeader is the answer when no controller leader answered within the call's deadline:
// UNAVAILABLE, retryable.
var ErrNoLeader = fmt.Errorf("%w: no controller leader answers", apierror.ErrUnavailable)

// retryControl retries retryable answers until the deadline, then answers with the last
// status, or ErrNoLeader for a transport failure (which has no ErrorInfo).
func retryControl(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	backoff := retryInitial
	held := heldFor(req)
	giveUp := time.Now().Add(retryBudget + held)
	for {
		attempt, cancel := context.WithTimeout(ctx, controlCallTimeout+held)
		err := invoker(attempt, method, req, reply, cc, opts...)
		abandoned := attempt.Err() != nil && ctx.Err() == nil // this attempt timed out, the call did not
		cancel()
		if err == nil || ctx.Err() != nil || !(retryable(err) || abandoned) {
			return normalise(err)
		}
		if abandoned {
			err = ErrNoLeader
		}
		sleep := backoff/2 + rand.N(backoff/2+1)
		if d, ok := ctx.Deadline(); (ok && time.Until(d) < sleep+retryReserve) || time.Now().Add(sleep).After(giveUp) {
			return normalise(err)
		}
		select {
		case <-time.After(sleep):
		case <-ctx.Done():
			return normalise(err)
		}
		backoff = min(2*backoff, retryMax)
	}
}

// heldFor is how long the controller may hold a call's answer on purpose (an Attach's
// wait_ready, a DeleteEnvironment's wait): an attempt is abandoned only that much later
// than any other.
func heldFor(req any) time.Duration {
	var wait *durationpb.Duration
	switch r := req.(type) {
	case *controlv1.AttachRequest:
		wait = r.GetRequest().GetWaitReady()
	case *controlv1.DeleteRequest:
		wait = r.GetRequest().GetWait()
	}
	if wait == nil {
		return 0
	}
	return min(max(wait.AsDuration(), 0), maxHeld)
}

// retryable: UNAVAILABLE, or any status whose ErrorInfo says retryable (a controller at its
// concurrency limit, a CAS conflict it gave up on). A deadline is never retried.
func retryable(err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		return false
	}
	if st.Code() == codes.Unavailable {
		return true
	}
	return apierror.Retryable(err) && st.Code() != codes.DeadlineExceeded && st.Code() != codes.Canceled
}

// normalise keeps the controller's statuses (they carry the API's reasons) and turns
// transport failures, which carry none, into the API's UNAVAILABLE.
func normalise(err error) error {
	if err == nil || apierror.Reason(err) != "" {
		return err
	}
	switch status.Code(err) {
	case codes.Unavailable:
		return ErrNoLeader
	case codes.DeadlineExceeded:
		return context.DeadlineExceeded
	case codes.Canceled:
		return context.Canceled
	}
	return err
}
