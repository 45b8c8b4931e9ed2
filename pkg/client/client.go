package client

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

// Defaults of Config.
const (
	// DefaultMaxMessageBytes matches the gateway's default message bound, so that a file up
	// to a profile's maxFileBytes fits one call (gRPC's own client default is 4 MiB).
	DefaultMaxMessageBytes = 32 << 20
	// DefaultMaxAttempts bounds the attempts of one logical call, retries included.
	DefaultMaxAttempts = 5
	// DefaultInitialBackoff and DefaultMaxBackoff shape the exponential backoff (with full
	// jitter) between attempts.
	DefaultInitialBackoff = 100 * time.Millisecond
	DefaultMaxBackoff     = 3 * time.Second
	// keepaliveTime is above the gateway's enforcement minimum (10 s), so pings are never
	// treated as abuse.
	keepaliveTime = 30 * time.Second
)

// Config configures Dial.
type Config struct {
	// Address is the gateway, host:port.
	Address string
	// CAFile verifies the gateway's certificate; CertFile and KeyFile are this client's
	// identity (PEM). Alternatively TLS may be given directly.
	CAFile, CertFile, KeyFile string
	// ServerName is the name expected in the gateway's certificate; empty means the host of
	// Address.
	ServerName string
	// TLS, when set, is used instead of the files (it must present a client certificate).
	TLS *tls.Config
	// MaxMessageBytes bounds a message sent or received (DefaultMaxMessageBytes when 0).
	MaxMessageBytes int
	// MaxAttempts, InitialBackoff and MaxBackoff shape retries (the defaults when 0). Set
	// MaxAttempts to 1 to disable retries.
	MaxAttempts                int
	InitialBackoff, MaxBackoff time.Duration
	// DialOptions are appended to the client's own (interceptors, stats handlers, ...).
	DialOptions []grpc.DialOption
}

// Client is a connection to a gateway. It is safe for concurrent use.
type Client struct {
	conn  *grpc.ClientConn
	api   executionv1grpc.ExecutionProviderServiceClient
	retry retryPolicy
	// closed ends every Run's background renewal when the Client closes.
	closed    chan struct{}
	closeOnce sync.Once
}

// Dial returns a Client for cfg. It does not wait for the connection: the first call does.
func Dial(cfg Config) (*Client, error) {
	if cfg.Address == "" {
		return nil, errors.New("execplane client: an address is required")
	}
	tlsCfg := cfg.TLS
	if tlsCfg == nil {
		var err error
		if tlsCfg, err = loadTLS(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.MaxMessageBytes <= 0 {
		cfg.MaxMessageBytes = DefaultMaxMessageBytes
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(cfg.MaxMessageBytes), grpc.MaxCallSendMsgSize(cfg.MaxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: keepaliveTime}),
	}, cfg.DialOptions...)
	conn, err := grpc.NewClient(cfg.Address, opts...)
	if err != nil {
		return nil, fmt.Errorf("execplane client: %w", err)
	}
	return NewFromConn(conn, cfg), nil
}

// NewFromConn returns a Client on an existing connection (its retry settings from cfg);
// Close closes conn.
func NewFromConn(conn *grpc.ClientConn, cfg Config) *Client {
	return &Client{conn: conn, api: executionv1grpc.NewExecutionProviderServiceClient(conn), retry: newRetryPolicy(cfg), closed: make(chan struct{})}
}

// Close closes the connection and stops the renewal of Runs still open; they are not
// released (their claims expire after their TTL).
func (c *Client) Close() error {
	c.closeOnce.Do(func() { close(c.closed) })
	return c.conn.Close()
}

// API is the generated client on the same connection, for what the SDK does not wrap.
func (c *Client) API() executionv1grpc.ExecutionProviderServiceClient { return c.api }

// loadTLS builds a TLS 1.3 client configuration from the files.
func loadTLS(cfg Config) (*tls.Config, error) {
	if cfg.CAFile == "" || cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("execplane client: CAFile, CertFile and KeyFile are required (or TLS)")
	}
	pair, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("execplane client: the client certificate: %w", err)
	}
	pem, err := os.ReadFile(cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("execplane client: the CA bundle: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("execplane client: no certificate in %s", cfg.CAFile)
	}
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: cfg.ServerName}, nil
}

// Owner is the end user a client acts for (the client must be allowed to attest owners).
type Owner struct {
	// Issuer is the identity provider (e.g. an OIDC issuer URL); Subject the user in it.
	Issuer, Subject string
}

func (o Owner) proto() *executionv1.Owner {
	return &executionv1.Owner{Issuer: o.Issuer, Subject: o.Subject}
}

// Profile is an executor profile as the gateway has it loaded.
type Profile struct {
	Name, Digest       string
	MaxFileBytes       uint64
	MaxCommandBytes    uint64
	MaxCommandDuration time.Duration
	Capabilities       []string
}

// ValidateProfile returns the named profile; with expectedDigest set, it fails with
// ErrPreconditionFailed unless the loaded profile has that digest.
func (c *Client) ValidateProfile(ctx context.Context, name, expectedDigest string) (Profile, error) {
	resp, err := call(ctx, c, idempotent, func(ctx context.Context, opts ...grpc.CallOption) (*executionv1.ValidateProfileResponse, error) {
		return c.api.ValidateProfile(ctx, &executionv1.ValidateProfileRequest{Profile: name, ExpectedDigest: expectedDigest}, opts...)
	})
	if err != nil {
		return Profile{}, err
	}
	p := resp.GetProfile()
	return Profile{Name: p.GetName(), Digest: p.GetDigest(), MaxFileBytes: p.GetMaxFileBytes(), MaxCommandBytes: p.GetMaxCommandBytes(),
		MaxCommandDuration: p.GetMaxCommandDuration().AsDuration(), Capabilities: p.GetCapabilities()}, nil
}

// newOperationID returns a fresh operation id: 128 random bits, so that two logical calls
// never share one.
func newOperationID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return "sdk-" + hex.EncodeToString(b[:])
}
