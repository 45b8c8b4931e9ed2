package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/backlog"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/pkg/apierror"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// Transport bounds of the public server. Each names the abuse it stops (ADVERSARIAL.md,
// "Load").
const (
	// maxConcurrentStreams bounds the calls one connection multiplexes: one identity opening
	// many streams on one connection still meets the limiter, but the transport's own
	// per-stream state is bounded first.
	maxConcurrentStreams = 256
	// maxHeaderListBytes bounds a call's metadata: ours is a few hundred bytes.
	maxHeaderListBytes = 16 << 10
	// keepaliveMinTime refuses clients pinging more often (ping floods get GOAWAY).
	keepaliveMinTime = 10 * time.Second
	// maxConnectionIdle closes connections without calls, so thousands of idle connections
	// do not pin memory forever.
	maxConnectionIdle = 5 * time.Minute
	// keepaliveTime and keepaliveTimeout detect dead peers under long commands.
	keepaliveTime    = time.Minute
	keepaliveTimeout = 20 * time.Second
	// requestIDHeader carries the gateway's request id back to the caller, for support; it
	// also names the call's stream to the backlog accounting, so it is sent before the
	// handler runs.
	requestIDHeader = backlog.RequestIDHeader
	// grpcMessagePrefix is the length prefix gRPC puts before every message on the wire.
	grpcMessagePrefix = 5
	// maxStatusMessage bounds the message of an answer's status: it is for a person (the
	// gateway's log keeps the rest), and trailers stay small enough for the backlog
	// accounting to follow (internal/backlog).
	maxStatusMessage = 4 << 10
)

// ServerConfig configures NewServer.
type ServerConfig struct {
	// Current returns the current security material (TLS and policy); fail closed without.
	Current func() (*security.Bundle, bool)
	// MaxConcurrentRPCs and MaxClientRPCs bound in-flight calls (globally, per client).
	MaxConcurrentRPCs, MaxClientRPCs int
	// MaxMessageBytes bounds a received or sent message.
	MaxMessageBytes int
	// MaxRPCDeadline caps every call's deadline (and gives one to calls without).
	MaxRPCDeadline time.Duration
	// Backlog bounds what one client's unread answers and open connections hold.
	Backlog backlog.Config
	Logger  hclog.Logger
	Metrics *Metrics
	// Usage counts the data calls' usage per environment (nil: not counted).
	Usage *usageCounter
}

// Server is the public gRPC server: the handler behind authentication, limits, request ids,
// logging, metrics and panic recovery, plus health and reflection.
type Server struct {
	GRPC    *grpc.Server
	Health  *health.Server
	Limiter *security.RPCLimiter
	Backlog *backlog.Ledger
}

// NewServer builds the server around h. Every call, health and reflection included, is
// authenticated and counted against the limits: nothing is served to a peer outside the
// policy.
func NewServer(cfg ServerConfig, h executionv1grpc.ExecutionProviderServiceServer) (*Server, error) {
	if cfg.Current == nil || h == nil || cfg.MaxRPCDeadline <= 0 || cfg.MaxMessageBytes <= 0 {
		return nil, errors.New("gateway: a security-material source, a handler, a deadline cap and a message cap are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	auth, err := security.NewPeerAuthenticator(cfg.Current)
	if err != nil {
		return nil, err
	}
	limiter, err := security.NewRPCLimiter(auth, cfg.MaxConcurrentRPCs, cfg.MaxClientRPCs)
	if err != nil {
		return nil, err
	}
	ledger, err := backlog.New(cfg.Backlog)
	if err != nil {
		return nil, err
	}
	admit := func(conn net.Conn, id security.ClientIdentity) (net.Conn, error) {
		c, err := ledger.Accept(conn, string(id))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", security.ErrConnectionLimit, err)
		}
		return c, nil
	}
	e := &edge{cfg: cfg, limiter: limiter, log: cfg.Logger.Named("rpc")}
	var onReject func(security.Reason)
	if cfg.Metrics != nil {
		onReject = cfg.Metrics.HandshakeRejected
	}
	s := grpc.NewServer(
		grpc.Creds(security.NewServerCredentials(cfg.Current, onReject, admit)),
		grpc.ConnectionTimeout(security.HandshakeTimeout),
		grpc.MaxRecvMsgSize(cfg.MaxMessageBytes),
		grpc.MaxSendMsgSize(cfg.MaxMessageBytes),
		grpc.MaxConcurrentStreams(maxConcurrentStreams),
		grpc.MaxHeaderListSize(maxHeaderListBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: keepaliveMinTime, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: maxConnectionIdle, Time: keepaliveTime, Timeout: keepaliveTimeout}),
		grpc.ChainUnaryInterceptor(e.unary),
		grpc.ChainStreamInterceptor(e.stream),
	)
	executionv1grpc.RegisterExecutionProviderServiceServer(s, h)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	hs.SetServingStatus(executionv1grpc.ExecutionProviderService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(s, hs)
	reflection.Register(s)
	return &Server{GRPC: s, Health: hs, Limiter: limiter, Backlog: ledger}, nil
}

// SetServing sets the health status of the whole server and of the API service.
func (s *Server) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.Health.SetServingStatus("", st)
	s.Health.SetServingStatus(executionv1grpc.ExecutionProviderService_ServiceDesc.ServiceName, st)
}

// edge is the interceptor chain: request id, deadline cap, admission (authentication and
// limits), panic recovery, then one translation of the outcome into a status, one log line
// for failures and the metrics.
type edge struct {
	cfg     ServerConfig
	limiter *security.RPCLimiter
	log     hclog.Logger
}

type requestIDKey struct{}

// RequestID returns the call's request id ("" outside a call).
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// ContextWithRequestID returns ctx carrying id; the server sets it on every call, tests of
// the handler may set it directly.
func ContextWithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

func newRequestID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// begin gives the call its request id and capped deadline, and admits it. The response
// headers, with the request id, are sent at once: they bind the call's stream to its
// backlog account (nil for a peer without one) before any answer is produced.
func (e *edge) begin(ctx context.Context) (context.Context, context.CancelFunc, func(), *backlog.Call, error) {
	id := newRequestID()
	ctx = ContextWithRequestID(ctx, id)
	var call *backlog.Call
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(security.AuthInfo); ok {
			if c, ok := info.Conn.(*backlog.Conn); ok {
				call = c.Begin(id)
				ctx = backlog.WithCall(ctx, call)
			}
		}
	}
	_ = grpc.SendHeader(ctx, metadata.Pairs(requestIDHeader, id))
	cancel := context.CancelFunc(func() {})
	if d, ok := ctx.Deadline(); !ok || time.Until(d) > e.cfg.MaxRPCDeadline {
		ctx, cancel = context.WithTimeout(ctx, e.cfg.MaxRPCDeadline)
	}
	admitted, release, err := e.limiter.Admit(ctx)
	if err != nil {
		cancel()
		if call != nil {
			call.Done()
		}
		return ctx, nil, nil, nil, err
	}
	return admitted, cancel, release, call, nil
}

// finish translates err once, logs what deserves it, and counts the call.
func (e *edge) finish(ctx context.Context, method string, start time.Time, err error) error {
	id := RequestID(ctx)
	out := shortened(apierror.Status(err, id))
	code := status.Code(out)
	reason := ""
	if out != nil {
		reason = apierror.Reason(out)
		if reason == "" {
			reason = "UNCLASSIFIED"
		}
	}
	label := methodLabel(method)
	e.cfg.Metrics.rpc(label, code.String(), reason, time.Since(start))
	switch {
	case code == codes.Internal || code == codes.Unknown:
		e.log.Error("call failed", logging.KeyRPC, label, logging.KeyRequestID, id, logging.KeyCode, code.String(), logging.KeyError, err)
	case out != nil:
		e.log.Debug("call refused", logging.KeyRPC, label, logging.KeyRequestID, id, logging.KeyCode, code.String(), logging.KeyReason, reason)
	}
	return out
}

func (e *edge) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
	start := time.Now()
	ctx, cancel, release, call, err := e.begin(ctx)
	if err != nil {
		return nil, e.finish(ctx, info.FullMethod, start, err)
	}
	defer cancel()
	defer release()
	if call != nil {
		defer call.Done()
	}
	resp, err = apierror.Recovered(func() (any, error) { return handler(ctx, req) })
	if err == nil {
		err = sending(ctx, call, resp)
	}
	if command, data := dataMethods[methodLabel(info.FullMethod)]; data && err == nil {
		// Only a call that succeeded counts: a refused one names an environment it may
		// not touch.
		c := int64(0)
		if command {
			c = 1
		}
		e.cfg.Usage.count(envOf(req), c, size(req), size(resp))
	}
	if err != nil {
		return nil, e.finish(ctx, info.FullMethod, start, err)
	}
	return resp, e.finish(ctx, info.FullMethod, start, nil)
}

func (e *edge) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	start := time.Now()
	ctx, cancel, release, call, err := e.begin(ss.Context())
	if err != nil {
		return e.finish(ctx, info.FullMethod, start, err)
	}
	defer cancel()
	defer release()
	if call != nil {
		defer call.Done()
	}
	var stream grpc.ServerStream = &callStream{ServerStream: ss, ctx: ctx, call: call}
	command, data := dataMethods[methodLabel(info.FullMethod)]
	counted := &countingStream{ServerStream: stream}
	if data {
		stream = counted
	}
	_, err = apierror.Recovered(func() (any, error) { return nil, handler(srv, stream) })
	if data {
		counted.done(e.cfg.Usage, command, err)
	}
	return e.finish(ctx, info.FullMethod, start, err)
}

// shortened is out with its message cut to maxStatusMessage bytes (on a character
// boundary), details kept.
func shortened(out error) error {
	st, ok := status.FromError(out)
	if !ok || len(st.Message()) <= maxStatusMessage {
		return out
	}
	p := st.Proto()
	m := p.Message[:maxStatusMessage]
	for !utf8.ValidString(m) {
		m = m[:len(m)-1]
	}
	p.Message = m + "…"
	return status.FromProto(p).Err()
}

// sending counts an answer about to be handed to gRPC against its client's backlog.
func sending(ctx context.Context, call *backlog.Call, m any) error {
	msg, ok := m.(proto.Message)
	if call == nil || !ok {
		return nil
	}
	err := call.Send(ctx, int64(proto.Size(msg)+grpcMessagePrefix))
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%w: %w", apierror.ErrUnavailable, err) // the connection closed
	}
	return err
}

// callStream is a server stream with the call's context, whose messages count against
// the client's backlog.
type callStream struct {
	grpc.ServerStream
	ctx  context.Context
	call *backlog.Call
}

func (s *callStream) Context() context.Context { return s.ctx }

func (s *callStream) SendMsg(m any) error {
	if err := sending(s.ctx, s.call, m); err != nil {
		return err
	}
	return s.ServerStream.SendMsg(m)
}
