package security

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc/credentials"
)

// ReloadingClientCredentials are gRPC client credentials that read files again for every
// handshake (LoadClientTLSConfig), so that a client certificate renewed in place — a
// cert-manager Secret in a volume — is presented on the next connection without a restart.
// A connection made before keeps the material it was made with.
func ReloadingClientCredentials(files ClientFiles) credentials.TransportCredentials {
	return &reloadingCredentials{files: files}
}

type reloadingCredentials struct {
	files ClientFiles
}

func (c *reloadingCredentials) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg, err := LoadClientTLSConfig(c.files)
	if err != nil {
		return nil, nil, err
	}
	if cfg.ServerName == "" {
		host, _, splitErr := net.SplitHostPort(authority)
		if splitErr != nil {
			host = authority
		}
		cfg.ServerName = host
	}
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCredentials) ServerHandshake(net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("security: reloading credentials are client-side only")
}

func (c *reloadingCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c *reloadingCredentials) Clone() credentials.TransportCredentials {
	return &reloadingCredentials{files: c.files}
}

// OverrideServerName is deprecated in gRPC and unused.
func (c *reloadingCredentials) OverrideServerName(string) error { return nil }
