package gateway

import (
	"flag"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/protocol"
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
	// request, so the gateway's default is higher than the controller's.
	maxKubeQPS = 5000
	// maxEnvironmentCalls bounds --max-environment-calls: more concurrent helpers than this
	// in one executor Pod is a fork bomb by configuration.
	maxEnvironmentCalls = 1024
	// maxSessionIdle bounds --session-idle: a session is a stream through the API server
	// and a process in the Pod; an hour unused is abandoned.
	maxSessionIdle = time.Hour
	// maxSessions bounds --max-sessions: each session is a connection to the API server.
	maxSessions = 65536
)

// Config is the gateway's configuration, from flags.
type Config struct {
	// ListenAddress serves the public gRPC API (mTLS).
	ListenAddress string
	// DiagnosticsAddress serves /livez, /readyz and /metrics (plain HTTP, cluster-internal).
	DiagnosticsAddress string
	// Profiling serves Go's runtime profiles under /debug/pprof/ on the diagnostics address.
	Profiling bool
	// Namespace is the control plane's own: the high-water ConfigMap.
	Namespace string
	// ExecutorNamespace holds the ExecutionEnvironments and executor Pods, the only place
	// the gateway may exec; empty means Namespace.
	ExecutorNamespace string
	// Kubeconfig is empty in a cluster (in-cluster config is used).
	Kubeconfig string
	// SecurityManifest is the security-material manifest (docs/security.md).
	SecurityManifest string
	// HighWaterConfigMap records the security material's high-water mark.
	HighWaterConfigMap string
	// ProfilesFile is the operator's profiles YAML.
	ProfilesFile string
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
	// MaxRPCDeadline caps the deadline of any call.
	MaxRPCDeadline time.Duration
	// ShutdownGrace is how long in-flight calls may drain on shutdown.
	ShutdownGrace time.Duration
	// KubeQPS and KubeBurst are the client-side rate limit towards the API server.
	KubeQPS   float64
	KubeBurst int
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
	// Log configures the process's logger.
	Log logging.Options
}

// DefaultConfig returns the configuration the Helm chart's defaults render.
func DefaultConfig() Config {
	return Config{
		ListenAddress:       ":8443",
		DiagnosticsAddress:  ":9090",
		SecurityManifest:    "/etc/execplane/security/manifest.yaml",
		HighWaterConfigMap:  "execplane-security-high-water",
		ProfilesFile:        "/etc/execplane/profiles/profiles.yaml",
		ControllerCert:      "/etc/execplane/control/tls.crt",
		ControllerKey:       "/etc/execplane/control/tls.key",
		ControllerCA:        "/etc/execplane/control/ca.crt",
		HelperPath:          "/execplane/helper",
		MaxConcurrentRPCs:   2000,
		MaxClientRPCs:       200,
		MaxEnvironmentCalls: DefaultMaxEnvironmentCalls,
		MaxMessageBytes:     32 << 20,
		MaxRPCDeadline:      time.Hour,
		ShutdownGrace:       30 * time.Second,
		KubeQPS:             500,
		KubeBurst:           1000,
		FreshnessBound:      DefaultFreshnessBound,
		Sessions:            true,
		SessionIdle:         DefaultSessionIdle,
		MaxSessions:         DefaultMaxSessions,
		SessionMaxInFlight:  protocol.DefaultMaxInFlight,
		Log:                 logging.Options{Format: logging.FormatJSON, Level: "info"},
	}
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "address of the public gRPC API (mTLS)")
	fs.StringVar(&c.DiagnosticsAddress, "diagnostics-address", c.DiagnosticsAddress, "address of /livez, /readyz and /metrics")
	fs.BoolVar(&c.Profiling, "profiling", c.Profiling, "serve Go's runtime profiles under /debug/pprof/ on the diagnostics address (off: the port has no authentication)")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "the control plane's namespace: the high-water ConfigMap (required)")
	fs.StringVar(&c.ExecutorNamespace, "executor-namespace", c.ExecutorNamespace, "namespace of the environments and executor Pods (default: --namespace)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file; empty in a cluster")
	fs.StringVar(&c.SecurityManifest, "security-manifest", c.SecurityManifest, "security material manifest")
	fs.StringVar(&c.HighWaterConfigMap, "high-water-configmap", c.HighWaterConfigMap, "ConfigMap holding the security material's high-water mark")
	fs.StringVar(&c.ProfilesFile, "profiles", c.ProfilesFile, "profiles YAML file")
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
	fs.DurationVar(&c.MaxRPCDeadline, "max-rpc-deadline", c.MaxRPCDeadline, "cap on any call's deadline")
	fs.DurationVar(&c.ShutdownGrace, "shutdown-grace", c.ShutdownGrace, "drain time for in-flight calls on shutdown")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", c.KubeQPS, "client-side rate limit towards the API server (requests per second; one per data operation)")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", c.KubeBurst, "client-side burst towards the API server")
	fs.DurationVar(&c.FreshnessBound, "view-freshness-bound", c.FreshnessBound, "longest time the environment view may go unproven current (one probe read per second) before grant-authorised calls answer UNAVAILABLE")
	fs.BoolVar(&c.Sessions, "sessions", c.Sessions, "keep one exec stream open per executor Pod and send it many requests; false: one exec per operation")
	fs.DurationVar(&c.SessionIdle, "session-idle", c.SessionIdle, "close a session unused this long")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "open sessions on this replica (the least recently used closes beyond it)")
	fs.IntVar(&c.SessionMaxInFlight, "session-max-in-flight", c.SessionMaxInFlight, "requests in flight on one session (more wait)")
	c.Log.RegisterFlags(fs)
}

// Executors is the namespace of the environments and their executor Pods.
func (c Config) Executors() string {
	if c.ExecutorNamespace != "" {
		return c.ExecutorNamespace
	}
	return c.Namespace
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	var p cli.Problems
	p.Address("listen-address", c.ListenAddress)
	p.Address("diagnostics-address", c.DiagnosticsAddress)
	if c.ListenAddress != "" && c.ListenAddress == c.DiagnosticsAddress {
		p.Addf("diagnostics-address", "must differ from --listen-address")
	}
	p.Required("namespace", c.Namespace)
	p.AbsolutePath("kubeconfig", c.Kubeconfig, true)
	p.AbsolutePath("security-manifest", c.SecurityManifest, false)
	p.Required("high-water-configmap", c.HighWaterConfigMap)
	p.AbsolutePath("profiles", c.ProfilesFile, false)
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
	p.DurationBetween("max-rpc-deadline", c.MaxRPCDeadline, time.Second, MaxRPCDeadline)
	p.DurationBetween("shutdown-grace", c.ShutdownGrace, 0, maxShutdownGrace)
	p.DurationBetween("view-freshness-bound", c.FreshnessBound, MinFreshnessBound, MaxFreshnessBound)
	if c.KubeQPS < 1 || c.KubeQPS > maxKubeQPS {
		p.Addf("kube-api-qps", "%v must be between 1 and %d", c.KubeQPS, maxKubeQPS)
	}
	if c.KubeBurst < int(c.KubeQPS) || c.KubeBurst > 2*maxKubeQPS {
		p.Addf("kube-api-burst", "%d must be at least --kube-api-qps and at most %d", c.KubeBurst, 2*maxKubeQPS)
	}
	p.DurationBetween("session-idle", c.SessionIdle, time.Second, maxSessionIdle)
	p.IntBetween("max-sessions", c.MaxSessions, 1, maxSessions)
	p.IntBetween("session-max-in-flight", c.SessionMaxInFlight, 1, protocol.MaxInFlightCeiling)
	if err := c.Log.Validate(); err != nil {
		p.Addf("log-format", "%v", err)
	}
	return p.Err()
}
