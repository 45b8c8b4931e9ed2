package controller

import (
	"flag"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/execplane/execplane/internal/kube"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/startup"
	"github.com/execplane/execplane/internal/usage"
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
	// defaultTombstoneRetention keeps a deleted environment's tombstone, so that a repeated
	// DeleteEnvironment (a client that lost the answer, an E2B kill sent twice) answers
	// DELETED rather than NOT_FOUND: an hour covers any client's retries, and a tombstone
	// is a few hundred bytes in etcd with nothing else behind it.
	defaultTombstoneRetention = time.Hour
	// minTombstoneRetention and maxTombstoneRetention bound it: under a second a client's
	// first retry already finds nothing; tombstones are kept in the informers' memory.
	minTombstoneRetention = time.Second
	maxTombstoneRetention = 7 * 24 * time.Hour
	// Bounds of usage metering (docs/usage.md): a sample interval under a second would read
	// every kubelet faster than its own housekeeping is meant for; over ten minutes the
	// memory integral is too coarse to bill. A checkpoint writes each changed ledger once.
	minUsageInterval = time.Second
	// minUsageSample allows sampling faster than a second, for measurements (the real
	// node's accuracy test samples every 250 ms): below a second the kubelet reads every
	// container's cgroup that often.
	minUsageSample     = 100 * time.Millisecond
	maxUsageSample     = 10 * time.Minute
	maxUsageCheckpoint = time.Hour
	minUsageRetention  = time.Hour
	maxUsageRetention  = 35 * 24 * time.Hour
	// minResync keeps periodic resyncs from becoming a hot loop against the API server.
	minResync = time.Minute
)

// role is what tells the controller's startup from the gateway's.
var role = startup.Server{
	Name: "controller", Listens: "the internal control API (mTLS)", NamespaceHolds: "the Lease and the high-water ConfigMap",
	ExecutorsHold: "the environments, executor Pods and workspace claims", MaxKubeQPS: maxKubeQPS, RaiseMark: true,
}

// Config is the controller's configuration, from flags: the servers' shared ones and its own.
// Apart from the control plane's namespace, the executor namespace keeps the controller's Pod
// writes (and so a Pod it could be tricked into creating) away from the control plane's
// Secrets.
type Config struct {
	startup.Config
	// LeaseName is the coordination.k8s.io Lease used for leader election.
	LeaseName string
	// Identity names this replica in the Lease; defaults to the host name.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election (client-go).
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// GatewayIdentities may call the control API (client identities in the security
	// material's policy).
	GatewayIdentities []string
	// ExecutorServiceAccount is the token-less ServiceAccount executor Pods run as.
	ExecutorServiceAccount string
	// Workers is the number of concurrent reconcile workers.
	Workers int
	// ResyncPeriod is the informers' periodic resync.
	ResyncPeriod time.Duration
	// LeaderService is the selector-less Service in Namespace through which gateways reach
	// the control API: the leader publishes its own address as the Service's only endpoint
	// (an EndpointSlice of the same name; docs/controller.md "Reaching the leader"). Empty:
	// nothing is published, and the gateways are pointed at the leader some other way.
	LeaderService string
	// AdvertiseAddress is this replica's Pod IP: the endpoint it publishes while it leads.
	AdvertiseAddress string
	// PodName names this replica's Pod in that endpoint (its targetRef); optional.
	PodName string
	// TombstoneRetention is how long a deleted environment's tombstone answers a repeated
	// DeleteEnvironment before the controller removes it.
	TombstoneRetention time.Duration
	// UsageKubelet reads the kubelets' /metrics/resource for the executors' CPU and memory
	// (RBAC: get nodes and nodes/metrics); off, the ledgers measure the rest.
	UsageKubelet bool
	// KubeletCAFile verifies kubelets' serving certificates (empty: the API server's CA);
	// KubeletInsecureSkipVerify does not verify them (an explicit choice for self-signed
	// kubelet certificates).
	KubeletCAFile             string
	KubeletInsecureSkipVerify bool
	// UsageSampleInterval, UsageCheckpointInterval and UsageRetention tune the ledgers.
	UsageSampleInterval, UsageCheckpointInterval, UsageRetention time.Duration
	// QuotasFile is the operator's quotas (pkg/quota); empty: no quotas. It is read again
	// when it changes.
	QuotasFile string
}

// DefaultConfig returns the configuration the Helm chart's defaults render.
func DefaultConfig() Config {
	host, _ := os.Hostname()
	c := Config{
		Config:                  startup.Defaults(role),
		LeaseName:               "execplane-controller",
		Identity:                host,
		LeaseDuration:           15 * time.Second,
		RenewDeadline:           10 * time.Second,
		RetryPeriod:             2 * time.Second,
		ExecutorServiceAccount:  "execplane-executor",
		Workers:                 defaultWorkers,
		ResyncPeriod:            10 * time.Minute,
		TombstoneRetention:      defaultTombstoneRetention,
		UsageKubelet:            true,
		UsageSampleInterval:     usage.DefaultSampleInterval,
		UsageCheckpointInterval: usage.DefaultCheckpointInterval,
		UsageRetention:          usage.DefaultRetention,
	}
	c.ListenAddress, c.DiagnosticsAddress = ":9443", ":9091"
	c.KubeQPS, c.KubeBurst = defaultKubeQPS, defaultKubeBurst
	return c
}

// RegisterFlags binds every field to a flag on fs.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Config.RegisterFlags(fs)
	fs.StringVar(&c.LeaseName, "lease-name", c.LeaseName, "leader election Lease")
	fs.StringVar(&c.Identity, "identity", c.Identity, "this replica's identity in the Lease (default: host name)")
	fs.DurationVar(&c.LeaseDuration, "lease-duration", c.LeaseDuration, "leader election lease duration")
	fs.DurationVar(&c.RenewDeadline, "renew-deadline", c.RenewDeadline, "leader election renew deadline")
	fs.DurationVar(&c.RetryPeriod, "retry-period", c.RetryPeriod, "leader election retry period")
	fs.Func("gateway-identity", "a gateway's client identity (URI SAN) allowed to call the control API; repeat for several", func(v string) error {
		c.GatewayIdentities = append(c.GatewayIdentities, v)
		return nil
	})
	fs.StringVar(&c.ExecutorServiceAccount, "executor-service-account", c.ExecutorServiceAccount, "ServiceAccount of executor Pods (no token is mounted)")
	fs.IntVar(&c.Workers, "workers", c.Workers, "concurrent reconcile workers")
	fs.DurationVar(&c.ResyncPeriod, "resync-period", c.ResyncPeriod, "informer resync period")
	fs.StringVar(&c.LeaderService, "leader-service", c.LeaderService, "selector-less Service of the control API whose only endpoint the leader publishes (an EndpointSlice); empty: publish nothing")
	fs.StringVar(&c.AdvertiseAddress, "advertise-address", c.AdvertiseAddress, "this replica's Pod IP, published as the Service's endpoint while it leads (required with --leader-service)")
	fs.StringVar(&c.PodName, "pod-name", c.PodName, "this replica's Pod, named in the published endpoint (optional)")
	fs.BoolVar(&c.UsageKubelet, "usage-kubelet", c.UsageKubelet, "measure executors' CPU and memory from the kubelets' /metrics/resource (RBAC: get nodes, nodes/metrics)")
	fs.StringVar(&c.KubeletCAFile, "kubelet-ca-file", c.KubeletCAFile, "CA bundle of the kubelets' serving certificates (default: the API server's CA)")
	fs.BoolVar(&c.KubeletInsecureSkipVerify, "kubelet-insecure-skip-tls-verify", c.KubeletInsecureSkipVerify, "do not verify kubelets' serving certificates (self-signed ones)")
	fs.DurationVar(&c.UsageSampleInterval, "usage-sample-interval", c.UsageSampleInterval, "how often each kubelet's resource metrics are read")
	fs.DurationVar(&c.UsageCheckpointInterval, "usage-checkpoint-interval", c.UsageCheckpointInterval, "how often changed usage ledgers are written (at most one write per environment)")
	fs.DurationVar(&c.UsageRetention, "usage-retention", c.UsageRetention, "how long hourly usage windows (and ended environments' ledgers) are kept")
	fs.StringVar(&c.QuotasFile, "quotas", c.QuotasFile, "quotas YAML file (docs/usage.md \"Quotas\"); empty: no quotas")
	fs.DurationVar(&c.TombstoneRetention, "tombstone-retention", c.TombstoneRetention, "how long a deleted environment answers a repeated DeleteEnvironment before it is removed")
}

// Validate reports every problem at once.
func (c Config) Validate() error {
	p := c.Config.Problems()
	p.Required("lease-name", c.LeaseName)
	p.Required("identity", c.Identity)
	p.DurationBetween("lease-duration", c.LeaseDuration, time.Second, maxLeaseDuration)
	if c.RenewDeadline <= 0 || c.RenewDeadline >= c.LeaseDuration {
		p.Addf("renew-deadline", "%s must be positive and shorter than --lease-duration %s", c.RenewDeadline, c.LeaseDuration)
	}
	if c.RetryPeriod <= 0 || float64(c.RenewDeadline) <= leaseJitter*float64(c.RetryPeriod) {
		p.Addf("retry-period", "%s must be positive and --renew-deadline must exceed %.1f times it", c.RetryPeriod, leaseJitter)
	}
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
	if c.ResyncPeriod != 0 && c.ResyncPeriod < minResync {
		p.Addf("resync-period", "%s is below %s (0 disables resync)", c.ResyncPeriod, minResync)
	}
	p.DurationBetween("tombstone-retention", c.TombstoneRetention, minTombstoneRetention, maxTombstoneRetention)
	p.DurationBetween("usage-sample-interval", c.UsageSampleInterval, minUsageSample, maxUsageSample)
	p.DurationBetween("usage-checkpoint-interval", c.UsageCheckpointInterval, minUsageInterval, maxUsageCheckpoint)
	p.DurationBetween("usage-retention", c.UsageRetention, minUsageRetention, maxUsageRetention)
	if c.QuotasFile != "" {
		p.AbsolutePath("quotas", c.QuotasFile, false)
	}
	if c.KubeletCAFile != "" && c.KubeletInsecureSkipVerify {
		p.Addf("kubelet-ca-file", "is pointless with --kubelet-insecure-skip-tls-verify")
	}
	if c.LeaderService != "" {
		if msgs := validation.IsDNS1035Label(c.LeaderService); len(msgs) > 0 {
			p.Addf("leader-service", "%q is not a Service name: %s", c.LeaderService, strings.Join(msgs, "; "))
		}
		if err := kube.CheckEndpointAddress(c.AdvertiseAddress); err != nil {
			p.Addf("advertise-address", "%v (the Pod IP is required with --leader-service)", err)
		}
	}
	if c.PodName != "" {
		if msgs := validation.IsDNS1123Subdomain(c.PodName); len(msgs) > 0 {
			p.Addf("pod-name", "%q is not a Pod name: %s", c.PodName, strings.Join(msgs, "; "))
		}
	}
	return p.Err()
}
