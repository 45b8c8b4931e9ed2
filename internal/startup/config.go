package startup

import (
	"flag"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
)

// Server is what tells one server's startup from the other's: names, help texts and bounds.
type Server struct {
	// Name is the binary ("gateway", "controller"): the logger's name, the user agent towards
	// the API server and the prefix of its request metrics.
	Name string
	// Listens says what the listen address serves, for its flag's help.
	Listens string
	// NamespaceHolds says what of the server lives in the control plane's namespace.
	NamespaceHolds string
	// ExecutorsHold says what of the server lives in the executor namespace.
	ExecutorsHold string
	// MaxKubeQPS bounds --kube-api-qps (and twice it --kube-api-burst).
	MaxKubeQPS float64
	// KubeQPSUse says what the server's API requests are, for --kube-api-qps's help.
	KubeQPSUse string
	// RaiseMark: this server raises the security material's high-water mark (the controller);
	// the other only reads it.
	RaiseMark bool
}

// Config is what both servers take from flags alike. A server's own configuration embeds it.
type Config struct {
	// ListenAddress serves the server's gRPC API (mTLS).
	ListenAddress string
	// DiagnosticsAddress serves /livez, /readyz and /metrics (plain HTTP, cluster-internal).
	DiagnosticsAddress string
	// Profiling serves Go's runtime profiles under /debug/pprof/ on the diagnostics address.
	Profiling bool
	// Namespace is the control plane's own (the high-water ConfigMap; the controller's Lease).
	Namespace string
	// ExecutorNamespace holds the ExecutionEnvironments, executor Pods and workspace claims:
	// the only place the gateway may exec and the controller may create Pods; empty means
	// Namespace.
	ExecutorNamespace string
	// Kubeconfig is empty in a cluster (in-cluster config is used).
	Kubeconfig string
	// SecurityManifest is the security-material manifest (docs/security.md).
	SecurityManifest string
	// HighWaterConfigMap records the security material's high-water mark.
	HighWaterConfigMap string
	// ProfilesFile is the operator's profiles YAML.
	ProfilesFile string
	// KubeQPS and KubeBurst are the client-side rate limit towards the API server.
	KubeQPS   float64
	KubeBurst int
	// Log configures the process's logger.
	Log logging.Options

	server Server
}

// Defaults returns the configuration both servers start from: the chart's mount points, JSON
// logs; the addresses and the rate limit are the server's to set.
func Defaults(s Server) Config {
	return Config{
		SecurityManifest:   "/etc/execplane/security/manifest.yaml",
		HighWaterConfigMap: "execplane-security-high-water",
		ProfilesFile:       "/etc/execplane/profiles/profiles.yaml",
		Log:                logging.Options{Format: logging.FormatJSON, Level: "info"},
		server:             s,
	}
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "address of "+c.server.Listens)
	fs.StringVar(&c.DiagnosticsAddress, "diagnostics-address", c.DiagnosticsAddress, "address of /livez, /readyz and /metrics")
	fs.BoolVar(&c.Profiling, "profiling", c.Profiling, "serve Go's runtime profiles under /debug/pprof/ on the diagnostics address (off: the port has no authentication)")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "the control plane's namespace: "+c.server.NamespaceHolds+" (required)")
	fs.StringVar(&c.ExecutorNamespace, "executor-namespace", c.ExecutorNamespace, "namespace of "+c.server.ExecutorsHold+" (default: --namespace)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file; empty in a cluster")
	fs.StringVar(&c.SecurityManifest, "security-manifest", c.SecurityManifest, "security material manifest")
	fs.StringVar(&c.HighWaterConfigMap, "high-water-configmap", c.HighWaterConfigMap, "ConfigMap holding the security material's high-water mark")
	fs.StringVar(&c.ProfilesFile, "profiles", c.ProfilesFile, "profiles YAML file")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", c.KubeQPS, "client-side rate limit towards the API server (requests per second"+c.server.KubeQPSUse+")")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", c.KubeBurst, "client-side burst towards the API server")
	c.Log.RegisterFlags(fs)
}

// Shared is the part of a server's configuration both servers take.
func (c Config) Shared() Config { return c }

// Executors is the namespace of the environments and their executor Pods.
func (c Config) Executors() string {
	if c.ExecutorNamespace != "" {
		return c.ExecutorNamespace
	}
	return c.Namespace
}

// Problems checks the shared fields; the server adds its own to what it returns and reports
// them all at once (Problems.Err).
func (c Config) Problems() *cli.Problems {
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
	// Written so that NaN fails: every comparison with it is false.
	if !(c.KubeQPS >= 1 && c.KubeQPS <= c.server.MaxKubeQPS) {
		p.Addf("kube-api-qps", "%v must be between 1 and %v", c.KubeQPS, c.server.MaxKubeQPS)
	}
	if !(float64(c.KubeBurst) >= c.KubeQPS && float64(c.KubeBurst) <= 2*c.server.MaxKubeQPS) {
		p.Addf("kube-api-burst", "%d must be at least --kube-api-qps and at most %v", c.KubeBurst, 2*c.server.MaxKubeQPS)
	}
	// Each flag named for its own problem.
	if err := (logging.Options{Format: c.Log.Format}).Validate(); err != nil {
		p.Addf("log-format", "%v", err)
	}
	if err := (logging.Options{Level: c.Log.Level}).Validate(); err != nil {
		p.Addf("log-level", "%v", err)
	}
	return &p
}
