package controller

import (
	"flag"
	"os"
	"time"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
	"github.com/execplane/execplane/internal/security"
)

// Bounds on the controller's tunables.
const (
	// leaseJitter is client-go's leaderelection.JitterFactor: RenewDeadline must exceed
	// RetryPeriod times this, or the elector refuses to start.
	leaseJitter = 1.2
	// maxLeaseDuration bounds failover time: a dead leader blocks reconciliation this long.
	maxLeaseDuration = 5 * time.Minute
	// maxWorkers bounds reconcile concurrency; status writes are CAS on one object each, so
	// more workers than this only add conflicts.
	maxWorkers = 64
	// maxKubeQPS bounds the client-side rate limit: beyond it a bug floods the API server
	// faster than priority and fairness can shed it.
	maxKubeQPS = 2000
	// defaultWorkers reconcile concurrently: a pass waits on a few API requests, so a worker
	// is mostly idle; 16 let warm pool adoptions keep up with a burst of Ensures.
	defaultWorkers = 16
	// defaultKubeQPS and defaultKubeBurst are the controller's client-side rate limit: a new
	// environment costs about five requests (its object, the Ensure's status write, the
	// claim and Pod — or an adoption's two relabels — and the pass's status write), so
	// this sustains about 60 new environments a second, and a burst of a hundred Ensures
	// does not queue a call past the gateway's 15 s attempt. The API server's priority and
	// fairness still applies.
	defaultKubeQPS   = 300
	defaultKubeBurst = 600
	// minResync keeps periodic resyncs from becoming a hot loop against the API server.
	minResync = time.Minute
)

// Config is the controller's configuration, from flags.
type Config struct {
	// ListenAddress serves the internal control.v1 API to gateways (mTLS).
	ListenAddress string
	// DiagnosticsAddress serves /livez, /readyz and /metrics.
	DiagnosticsAddress string
	// Profiling serves Go's runtime profiles under /debug/pprof/ on the diagnostics address.
	Profiling bool
	// Namespace is the control plane's own: the Lease and the high-water ConfigMap.
	Namespace string
	// ExecutorNamespace holds the environments, their executor Pods and workspace claims;
	// empty means Namespace. Apart from it, the controller's Pod writes (and so a Pod it could
	// be tricked into creating) never reach the control plane's Secrets.
	ExecutorNamespace string
	// Kubeconfig is empty in a cluster.
	Kubeconfig string
	// LeaseName is the coordination.k8s.io Lease used for leader election.
	LeaseName string
	// Identity names this replica in the Lease; defaults to the host name.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (client-go).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// SecurityManifest is the security-material manifest.
	SecurityManifest string
	// HighWaterConfigMap records the security material's high-water mark.
	HighWaterConfigMap string
	// ProfilesFile is the operator's profiles YAML.
	ProfilesFile string
	// GatewayIdentities may call the control API (client identities in the security
	// material's policy).
	GatewayIdentities []string
	// ExecutorServiceAccount is the token-less ServiceAccount executor Pods run as.
	ExecutorServiceAccount string
	// Workers is the number of concurrent reconcile workers.
	Workers int
	// KubeQPS and KubeBurst are the client-side rate limit towards the API server.
	KubeQPS   float64
	KubeBurst int
	// ResyncPeriod is the informers' periodic resync.
	ResyncPeriod time.Duration
	// Log configures the process's logger.
	Log logging.Options
}

// DefaultConfig returns the configuration the Helm chart's defaults render.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	return Config{
		ListenAddress:          ":9443",
		DiagnosticsAddress:     ":9091",
		LeaseName:              "execplane-controller",
		Identity:               host,
		LeaseDuration:          15 * time.Second,
		RenewDeadline:          10 * time.Second,
		RetryPeriod:            2 * time.Second,
		SecurityManifest:       "/etc/execplane/security/manifest.yaml",
		HighWaterConfigMap:     "execplane-security-high-water",
		ProfilesFile:           "/etc/execplane/profiles/profiles.yaml",
		ExecutorServiceAccount: "execplane-executor",
		Workers:                defaultWorkers,
		KubeQPS:                defaultKubeQPS,
		KubeBurst:              defaultKubeBurst,
		ResyncPeriod:           10 * time.Minute,
		Log:                    logging.Options{Format: logging.FormatJSON, Level: "info"},
	}
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.ListenAddress, "listen-address", c.ListenAddress, "address of the internal control API (mTLS)")
	fs.StringVar(&c.DiagnosticsAddress, "diagnostics-address", c.DiagnosticsAddress, "address of /livez, /readyz and /metrics")
	fs.BoolVar(&c.Profiling, "profiling", c.Profiling, "serve Go's runtime profiles under /debug/pprof/ on the diagnostics address (off: the port has no authentication)")
	fs.StringVar(&c.Namespace, "namespace", c.Namespace, "the control plane's namespace: the Lease and the high-water ConfigMap (required)")
	fs.StringVar(&c.ExecutorNamespace, "executor-namespace", c.ExecutorNamespace, "namespace of the environments, executor Pods and workspace claims (default: --namespace)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", c.Kubeconfig, "kubeconfig file; empty in a cluster")
	fs.StringVar(&c.LeaseName, "lease-name", c.LeaseName, "leader election Lease")
	fs.StringVar(&c.Identity, "identity", c.Identity, "this replica's identity in the Lease (default: host name)")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", c.LeaseDuration, "leader election lease duration")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", c.RenewDeadline, "leader election renew deadline")
	fs.DurationVar(&c.RetryPeriod, "retry-period", c.RetryPeriod, "leader election retry period")
	fs.StringVar(&c.SecurityManifest, "security-manifest", c.SecurityManifest, "security material manifest")
	fs.StringVar(&c.HighWaterConfigMap, "high-water-configmap", c.HighWaterConfigMap, "ConfigMap holding the security material's high-water mark")
	fs.Func("gateway-identity", "a gateway's client identity (URI SAN) allowed to call the control API; repeat for several", func(v string) error {
		c.GatewayIdentities = append(c.GatewayIdentities, v)
		return nil
	})
	fs.StringVar(&c.ProfilesFile, "profiles", c.ProfilesFile, "profiles YAML file")
	fs.StringVar(&c.ExecutorServiceAccount, "executor-service-account", c.ExecutorServiceAccount, "ServiceAccount of executor Pods (no token is mounted)")
	fs.IntVar(&c.Workers, "workers", c.Workers, "concurrent reconcile workers")
	fs.Float64Var(&c.KubeQPS, "kube-api-qps", c.KubeQPS, "client-side rate limit towards the API server (requests per second)")
	fs.IntVar(&c.KubeBurst, "kube-api-burst", c.KubeBurst, "client-side burst towards the API server")
	fs.DurationVar(&c.ResyncPeriod, "resync-period", c.ResyncPeriod, "informer resync period")
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
	p.Required("lease-name", c.LeaseName)
	p.Required("identity", c.Identity)
	p.DurationBetween("lease-duration", c.LeaseDuration, time.Second, maxLeaseDuration)
	if c.RenewDeadline <= 0 || c.RenewDeadline >= c.LeaseDuration {
		p.Addf("renew-deadline", "%s must be positive and shorter than --lease-duration %s", c.RenewDeadline, c.LeaseDuration)
	}
	if c.RetryPeriod <= 0 || float64(c.RenewDeadline) <= leaseJitter*float64(c.RetryPeriod) {
		p.Addf("retry-period", "%s must be positive and --renew-deadline must exceed %.1f times it", c.RetryPeriod, leaseJitter)
	}
	p.AbsolutePath("security-manifest", c.SecurityManifest, false)
	p.Required("high-water-configmap", c.HighWaterConfigMap)
	p.AbsolutePath("profiles", c.ProfilesFile, false)
	p.Required("executor-service-account", c.ExecutorServiceAccount)
	if len(c.GatewayIdentities) == 0 {
		p.Addf("gateway-identity", "at least one is required: nothing could call the control API")
	}
	for _, id := range c.GatewayIdentities {
		if _, err := security.ParseClientIdentity(id); err != nil {
			p.Addf("gateway-identity", "%q: %v", id, err)
		}
	}
	p.IntBetween("workers", c.Workers, 1, maxWorkers)
	if c.KubeQPS < 1 || c.KubeQPS > maxKubeQPS {
		p.Addf("kube-api-qps", "%v must be between 1 and %d", c.KubeQPS, maxKubeQPS)
	}
	if c.KubeBurst < int(c.KubeQPS) || c.KubeBurst > 2*maxKubeQPS {
		p.Addf("kube-api-burst", "%d must be at least --kube-api-qps and at most %d", c.KubeBurst, 2*maxKubeQPS)
	}
	if c.ResyncPeriod != 0 && c.ResyncPeriod < minResync {
		p.Addf("resync-period", "%s is below %s (0 disables resync)", c.ResyncPeriod, minResync)
	}
	if err := c.Log.Validate(); err != nil {
		p.Addf("log-format", "%v", err)
	}
	return p.Err()
}
