package gateway

import (
	"flag"
	"time"

	"github.com/execplane/execplane/internal/backlog"
	"github.com/execplane/execplane/internal/podexec"
	"github.com/execplane/execplane/internal/protocol"
	"github.com/execplane/execplane/internal/startup"
)

// Bounds on the gateway's tunables. Values outside them are configuration errors.
const (
	// MaxMessageBytesCeiling bounds a single gRPC message: file contents travel in unary
	// messages, and 64 MiB is the most a gateway replica should buffer for one call.
	MaxMessageBytesCeiling = 64 << 20
	// minMessageBytes leaves room for the largest control message (64 references, grants).
	minMessageBytes = 64 << 10
	// MaxRPCDeadline caps any call's deadline; commands run at most for a profile's
	// maxCommandDuration, which the profile package bounds to one hour.
	MaxRPCDeadline = 2 * time.Hour
	// maxConcurrentRPCs bounds the global limiter so one replica cannot be configured into
	// unbounded memory use.
	maxConcurrentRPCs = 100_000
	// maxShutdownGrace bounds how long a draining replica can delay a rollout.
	maxShutdownGrace = 10 * time.Minute
	// maxKubeQPS bounds the client-side rate limit: every data operation is one pods/exec
	// request, so the gateway's ceiling is higher than the controller's.
	maxKubeQPS = 5000
	// maxEnvironmentCalls bounds --max-environment-calls: more concurrent helpers than this
	// in one executor Pod is a fork bomb by configuration.
	maxEnvironmentCalls = 1024
	// minClientBacklogBytes and maxClientBacklogBytes bound --max-client-backlog-bytes: below
	// 4 MiB ordinary reads would wait on each other; above 4 GiB one client could hold more
	// than a gateway's usual memory limit.
	minClientBacklogBytes = 4 << 20
	maxClientBacklogBytes = 4 << 30
	// maxClientConnections bounds --max-client-connections.
	maxClientConnections = 10_000
	// maxSessionIdle bounds --session-idle: a session is a stream through the API server
	// and a process in the Pod; an hour unused is abandoned.
	maxSessionIdle = time.Hour
	// maxSessions bounds --max-sessions: each session is a connection to the API server.
	maxSessions = 65536
)

// role is what tells the gateway's startup from the controller's.
var role = startup.Server{
	Name: "gateway", Listens: "the public gRPC API (mTLS)", NamespaceHolds: "the high-water ConfigMap",
	ExecutorsHold: "the environments and executor Pods, the only place the gateway may exec", MaxKubeQPS: maxKubeQPS,
	KubeQPSUse: "; one per data operation",
}

// Config is the gateway's configuration, from flags: the servers' shared ones and its own.
type Config struct {
	startup.Config
	// ControllerAddress is the controller leader's Service (host:port).
	ControllerAddress string
	// ControllerServerName is the name expected in the controller's certificate; empty
	// means the host of ControllerAddress.
	ControllerServerName string
	// ControllerCert, ControllerKey and ControllerCA are the gateway's client material for
	// the control API (read again for every new connection, so they may rotate).
	ControllerCert, ControllerKey, ControllerCA string
	// HelperPath is the helper's absolute path inside executor containers.
	HelperPath string
	// MaxConcurrentRPCs bounds in-flight RPCs on this replica; MaxClientRPCs per client.
	MaxConcurrentRPCs int
	MaxClientRPCs     int
	// MaxEnvironmentCalls bounds concurrent data calls (Files, StartCommand) into one
	// environment on this replica, so one caller cannot crowd an executor Pod with helpers.
	MaxEnvironmentCalls int
	// MaxMessageBytes bounds a received or sent gRPC message.
	MaxMessageBytes int
	// MaxClientBacklogBytes bounds the answer bytes this replica holds for one client:
	// reserved for answers being fetched plus answers not yet written to its connections
	// (internal/backlog). MaxClientConnections bounds one client's open connections.
	MaxClientBacklogBytes int
	MaxClientConnections  int
	// MaxRPCDeadline caps the deadline of any call.
	MaxRPCDeadline time.Duration
	// ShutdownGrace is how long in-flight calls may drain on shutdown.
	ShutdownGrace time.Duration
	// FreshnessBound is how long the environment view may go unproven before grant-authorised
	// calls answer UNAVAILABLE and the gateway reports not ready (Environments).
	FreshnessBound time.Duration
	// Sessions keeps an exec stream open per executor Pod and sends it many requests
	// (docs/sessions.md); false drives every call one exec per operation.
	Sessions bool
	// SessionIdle closes a session unused this long; MaxSessions bounds the open sessions;
	// SessionMaxInFlight bounds the requests in flight on one session.
	SessionIdle        time.Duration
	MaxSessions        int
	SessionMaxInFlight int
}

// DefaultConfig returns the configuration the Helm chart's defaults render.
func DefaultConfig() Config {
	c := Config{
		Config:                startup.Defaults(role),
		ControllerCert:        "/etc/execplane/control/tls.crt",
		ControllerKey:         "/etc/execplane/control/tls.key",
		ControllerCA:          "/etc/execplane/control/ca.crt",
		HelperPath:            "/execplane/helper",
		MaxConcurrentRPCs:     2000,
		MaxClientRPCs:         200,
		MaxEnvironmentCalls:   DefaultMaxEnvironmentCalls,
		MaxMessageBytes:       32 << 20,
		MaxClientBacklogBytes: backlog.DefaultClientBytes,
		MaxClientConnections:  backlog.DefaultClientConns,
		MaxRPCDeadline:        time.Hour,
		ShutdownGrace:         30 * time.Second,
		FreshnessBound:        DefaultFreshnessBound,
		Sessions:              true,
		SessionIdle:           podexec.DefaultIdle,
		MaxSessions:           podexec.DefaultMaxSessions,
		SessionMaxInFlight:    protocol.DefaultMaxInFlight,
	}
	c.ListenAddress, c.DiagnosticsAddress = ":8443", ":9090"
	c.KubeQPS, c.KubeBurst = 500, 1000
	return c
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs)
	fs.StringVar(&c.ControllerAddress, "controller-address", c.ControllerAddress, "controller leader Service, host:port (required)")
	fs.StringVar(&c.ControllerServerName, "controller-server-name", c.ControllerServerName, "name in the controller's certificate; default: host of --controller-address")
	fs.StringVar(&c.ControllerCert, "controller-client-cert", c.ControllerCert, "client certificate (PEM) for the control API")
	fs.StringVar(&c.ControllerKey, "controller-client-key", c.ControllerKey, "client key (PEM) for the control API")
	fs.StringVar(&c.ControllerCA, "controller-ca", c.ControllerCA, "CA bundle (PEM) verifying the controller's certificate")
	fs.StringVar(&c.HelperPath, "helper-path", c.HelperPath, "helper path inside executor containers")
	fs.IntVar(&c.MaxConcurrentRPCs, "max-concurrent-rpcs", c.MaxConcurrentRPCs, "in-flight RPCs on this replica")
	fs.IntVar(&c.MaxClientRPCs, "max-client-rpcs", c.MaxClientRPCs, "in-flight RPCs per client on this replica")
	fs.IntVar(&c.MaxEnvironmentCalls, "max-environment-calls", c.MaxEnvironmentCalls, "concurrent data calls into one environment on this replica")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", c.MaxMessageBytes, "largest gRPC message received or sent")
	fs.IntVar(&c.MaxClientBacklogBytes, "max-client-backlog-bytes", c.MaxClientBacklogBytes, "answer bytes held for one client: being fetched plus not yet written to its connections (more calls wait)")
	fs.IntVar(&c.MaxClientConnections, "max-client-connections", c.MaxClientConnections, "open connections of one client on this replica (more are refused at the handshake)")
	fs.DurationVar(&c.MaxRPCDeadline, "max-rpc-deadline", c.MaxRPCDeadline, "cap on any call's deadline")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "drain time for in-flight calls on shutdown")
	fs.DurationVar(&c.FreshnessBound, "view-freshness-bound", c.FreshnessBound, "longest time the environment view may go unproven current (one probe read per second) before grant-authorised calls answer UNAVAILABLE")
	fs.BoolVar(&c.Sessions, "sessions", c.Sessions, "keep one exec stream open per executor Pod and send it many requests; false: one exec per operation")
	fs.DurationVar(&c.SessionIdle, "session-idle", c.SessionIdle, "close a session unused this long")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "open sessions on this replica (the least recently used closes beyond it)")
	fs.IntVar(&c.SessionMaxInFlight, "session-max-in-flight", c.SessionMaxInFlight, "requests in flight on one session (more wait)")
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	p := c.Config.Problems()
	p.Address("controller-address", c.ControllerAddress)
	p.AbsolutePath("controller-client-cert", c.ControllerCert, false)
	p.AbsolutePath("controller-client-key", c.ControllerKey, false)
	p.AbsolutePath("controller-ca", c.ControllerCA, false)
	p.AbsolutePath("helper-path", c.HelperPath, false)
	p.IntBetween("max-concurrent-rpcs", c.MaxConcurrentRPCs, 1, maxConcurrentRPCs)
	p.IntBetween("max-client-rpcs", c.MaxClientRPCs, 1, maxConcurrentRPCs)
	if c.MaxClientRPCs > c.MaxConcurrentRPCs {
		p.Addf("max-client-rpcs", "%d exceeds --max-concurrent-rpcs %d", c.MaxClientRPCs, c.MaxConcurrentRPCs)
	}
	p.IntBetween("max-environment-calls", c.MaxEnvironmentCalls, 1, maxEnvironmentCalls)
	p.IntBetween("max-message-bytes", c.MaxMessageBytes, minMessageBytes, MaxMessageBytesCeiling)
	p.IntBetween("max-client-backlog-bytes", c.MaxClientBacklogBytes, minClientBacklogBytes, maxClientBacklogBytes)
	p.IntBetween("max-client-connections", c.MaxClientConnections, 1, maxClientConnections)
	p.DurationBetween("max-rpc-deadline", c.MaxRPCDeadline, time.Second, MaxRPCDeadline)
	p.DurationBetween("shutdown-grace", c.ShutdownGrace, 0, maxShutdownGrace)
	p.DurationBetween("view-freshness-bound", c.FreshnessBound, MinFreshnessBound, MaxFreshnessBound)
	p.DurationBetween("session-idle", c.SessionIdle, time.Second, maxSessionIdle)
	p.IntBetween("max-sessions", c.MaxSessions, 1, maxSessions)
	p.IntBetween("session-max-in-flight", c.SessionMaxInFlight, 1, protocol.MaxInFlightCeiling)
	return p.Err()
}
