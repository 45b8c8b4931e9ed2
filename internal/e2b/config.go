package e2b

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/pkg/ident"
)

// Defaults and bounds of the configuration.
const (
	// DefaultMaxTimeout is E2B's longest sandbox timeout (its Pro tier's 24 h).
	DefaultMaxTimeout = 24 * time.Hour
	// keysReloadEvery is how often the key file is read again for rotation: a Secret's
	// update reaches a Pod's volume within about a minute anyway.
	keysReloadEvery = 10 * time.Second
	// sweepEvery is how often sandboxes idle for idleAfter are let go.
	sweepEvery = time.Minute
	// DefaultMaxUploadBytes: a gibibyte of files per request, spooled to disk past the first
	// memorySpool bytes.
	DefaultMaxUploadBytes = 1 << 30
	// DefaultMaxTenantRequests is a third of the gateway's default in-flight bound per client
	// (--max-client-rpcs, 200): three keys busy at once still leave the others room.
	DefaultMaxTenantRequests = 64
)

// Config configures the E2B front end.
type Config struct {
	// ListenAddress serves the control API and envd on one port (their paths do not
	// collide): E2B_API_URL and E2B_SANDBOX_URL are both its URL.
	ListenAddress string
	// TLSCertFile and TLSKeyFile, when set, serve HTTPS (HTTP/2 for the SDK's many streams);
	// otherwise plain HTTP for a TLS-terminating Ingress or a loopback.
	TLSCertFile, TLSKeyFile string
	// DiagnosticsAddress serves /livez, /readyz and /metrics.
	DiagnosticsAddress string
	// Gateway is the execplane gateway, host:port; GatewayCA verifies it, ClientCert and
	// ClientKey are the front end's own client identity (it must be allowed to attest
	// owners), GatewayServerName the name in the gateway's certificate.
	Gateway, GatewayCA, ClientCert, ClientKey, GatewayServerName string
	// KeysFile is the key file (docs/e2b.md "Keys"): API key hashes, owners, token key.
	KeysFile string
	// Templates maps E2B template ids onto execplane profiles ("base" is the SDK's default).
	Templates map[string]string
	// MaxTimeout bounds a sandbox's timeout.
	MaxTimeout time.Duration
	// SpoolDir holds uploads while they are checked (empty: the system's temporary folder).
	SpoolDir string
	// MaxUploadBytes bounds one upload request, all its files together.
	MaxUploadBytes int64
	// MaxTenantRequests bounds the requests of one API key in flight on a replica (streams
	// included): one key cannot take every slot the front end's identity has at the gateway.
	MaxTenantRequests int
	Log               logging.Options
}

// DefaultConfig is the configuration before flags.
func DefaultConfig() Config {
	return Config{ListenAddress: ":3000", DiagnosticsAddress: ":9090", Templates: map[string]string{}, MaxTimeout: DefaultMaxTimeout,
		MaxUploadBytes: DefaultMaxUploadBytes, MaxTenantRequests: DefaultMaxTenantRequests, Log: logging.Options{Name: "e2b"}}
}

// RegisterFlags binds the configuration to flags.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "address serving E2B's control API and envd (host:port)")
	fs.StringVar(&c.TLSCertFile, "tls-cert", c.TLSCertFile, "serve HTTPS with this certificate (PEM); with --tls-key")
	fs.StringVar(&c.TLSKeyFile, "tls-key", c.TLSKeyFile, "the HTTPS certificate's key (PEM)")
	fs.StringVar(&c.DiagnosticsAddress, "diagnostics-address", c.DiagnosticsAddress, "address of /livez, /readyz and /metrics (host:port)")
	fs.StringVar(&c.Gateway, "gateway", c.Gateway, "the execplane gateway (host:port)")
	fs.StringVar(&c.GatewayCA, "gateway-ca", c.GatewayCA, "CA bundle verifying the gateway (PEM)")
	fs.StringVar(&c.ClientCert, "client-cert", c.ClientCert, "the front end's client certificate (PEM)")
	fs.StringVar(&c.ClientKey, "client-key", c.ClientKey, "the front end's client key (PEM)")
	fs.StringVar(&c.GatewayServerName, "gateway-server-name", c.GatewayServerName, "name expected in the gateway's certificate (default: the host of --gateway)")
	fs.StringVar(&c.KeysFile, "keys", c.KeysFile, "the key file: API key hashes, their owners, the access-token key (docs/e2b.md)")
	fs.Func("template", "an E2B template and the profile it maps onto, template=profile (repeatable; 'base' is the SDK's default)", func(s string) error {
		t, p, ok := strings.Cut(s, "=")
		if !ok || t == "" || p == "" {
			return fmt.Errorf("%q is not template=profile", s)
		}
		c.Templates[t] = p
		return nil
	})
	fs.DurationVar(&c.MaxTimeout, "max-timeout", c.MaxTimeout, "the longest sandbox timeout a caller may ask for")
	fs.StringVar(&c.SpoolDir, "spool-dir", c.SpoolDir, "folder holding uploads while they are checked (default: the system's temporary folder)")
	fs.Int64Var(&c.MaxUploadBytes, "max-upload-bytes", c.MaxUploadBytes, "the largest upload request, all its files together")
	fs.IntVar(&c.MaxTenantRequests, "max-tenant-requests", c.MaxTenantRequests, "requests of one API key in flight on this replica, streams included (more answer 429)")
	c.Log.RegisterFlags(fs)
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var p cli.Problems
	p.Address("listen-address", c.ListenAddress)
	p.Address("diagnostics-address", c.DiagnosticsAddress)
	p.Address("gateway", c.Gateway)
	p.AbsolutePath("gateway-ca", c.GatewayCA, false)
	p.AbsolutePath("client-cert", c.ClientCert, false)
	p.AbsolutePath("client-key", c.ClientKey, false)
	p.AbsolutePath("keys", c.KeysFile, false)
	p.AbsolutePath("tls-cert", c.TLSCertFile, true)
	p.AbsolutePath("tls-key", c.TLSKeyFile, true)
	p.AbsolutePath("spool-dir", c.SpoolDir, true)
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		p.Addf("tls-cert", "and --tls-key go together")
	}
	if len(c.Templates) == 0 {
		p.Addf("template", "at least one is required (--template base=<profile>)")
	}
	for _, t := range slices.Sorted(maps.Keys(c.Templates)) {
		if len(t) > ident.MaxMetadataValue || !ident.IsIdentifier(t) || !ident.IsDNSLabel(c.Templates[t]) {
			p.Addf("template", "%s=%s: a template id is an identifier and a profile a DNS label", t, c.Templates[t])
		}
	}
	p.DurationBetween("max-timeout", c.MaxTimeout, time.Second, ident.MaxDeadline)
	if c.MaxUploadBytes < 1<<20 {
		p.Addf("max-upload-bytes", "%d is below a mebibyte", c.MaxUploadBytes)
	}
	p.IntBetween("max-tenant-requests", c.MaxTenantRequests, 1, 100000)
	if err := c.Log.Validate(); err != nil {
		p.Addf("log-format", "%v", err)
	}
	return p.Err()
}
