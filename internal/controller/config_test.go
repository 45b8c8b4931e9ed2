package controller

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/cli"
)

func validConfig() Config {
	c := DefaultConfig()
	c.Namespace = "execplane"
	c.Identity = "controller-0"
	c.GatewayIdentities = []string{"spiffe://execplane.test/gateway"}
	return c
}

func TestDefaultsNeedNamespaceAndGateways(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	c := DefaultConfig()
	c.Identity = "x"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--namespace") {
		t.Fatalf("missing namespace accepted: %v", err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--gateway-identity") {
		t.Fatalf("no gateway identity accepted: %v", err)
	}
}

func TestValidateRefusesEachBadField(t *testing.T) {
	cases := []struct {
		name  string
		field string
		mut   func(*Config)
	}{
		{"listen not host:port", "--listen-address", func(c *Config) { c.ListenAddress = "localhost" }},
		{"diagnostics same as listen", "--diagnostics-address", func(c *Config) { c.DiagnosticsAddress = c.ListenAddress }},
		{"relative kubeconfig", "--kubeconfig", func(c *Config) { c.Kubeconfig = "./kc" }},
		{"no lease", "--lease-name", func(c *Config) { c.LeaseName = "" }},
		{"no identity", "--identity", func(c *Config) { c.Identity = "" }},
		{"lease too long", "--lease-duration", func(c *Config) { c.LeaseDuration = time.Hour }},
		{"renew not below lease", "--renew-deadline", func(c *Config) { c.RenewDeadline = c.LeaseDuration }},
		{"retry too close to renew", "--retry-period", func(c *Config) { c.RetryPeriod = c.RenewDeadline }},
		{"zero retry", "--retry-period", func(c *Config) { c.RetryPeriod = 0 }},
		{"no executor SA", "--executor-service-account", func(c *Config) { c.ExecutorServiceAccount = "" }},
		{"zero workers", "--workers", func(c *Config) { c.Workers = 0 }},
		{"too many workers", "--workers", func(c *Config) { c.Workers = 1000 }},
		{"hot resync", "--resync-period", func(c *Config) { c.ResyncPeriod = time.Second }},
		{"relative profiles", "--profiles", func(c *Config) { c.ProfilesFile = "profiles.yaml" }},
		{"gateway not canonical", "--gateway-identity", func(c *Config) { c.GatewayIdentities = []string{"SPIFFE://Example/gw"} }},
		{"qps zero", "--kube-api-qps", func(c *Config) { c.KubeQPS = 0 }},
		{"burst below qps", "--kube-api-burst", func(c *Config) { c.KubeBurst = 1 }},
		{"bad log format", "--log-format", func(c *Config) { c.Log.Format = "logfmt" }},
		{"leader service not a name", "--leader-service", func(c *Config) { c.LeaderService, c.AdvertiseAddress = "Execplane_Controller", "10.0.0.7" }},
		{"leader service without address", "--advertise-address", func(c *Config) { c.LeaderService = "execplane-controller" }},
		{"leader service on loopback", "--advertise-address", func(c *Config) { c.LeaderService, c.AdvertiseAddress = "execplane-controller", "127.0.0.1" }},
		{"advertise address not an IP", "--advertise-address", func(c *Config) { c.LeaderService, c.AdvertiseAddress = "execplane-controller", "pod.local" }},
		{"pod name not a name", "--pod-name", func(c *Config) { c.PodName = "Pod_0" }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.mut(&c)
			err := c.Validate()
			if !errors.Is(err, cli.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("want a problem on %s, got %v", tc.field, err)
			}
		})
	}
}

// The chart's publication of the leader's endpoint: the Service, the Pod IP (IPv4 or IPv6)
// and the Pod's name; without a Service the address is not needed.
func TestLeaderServiceNeedsThePodIP(t *testing.T) {
	for _, addr := range []string{"10.244.1.7", "fd00:10:244::7"} {
		c := validConfig()
		c.LeaderService, c.AdvertiseAddress, c.PodName = "execplane-controller", addr, "execplane-controller-6d9f-x2"
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", addr, err)
		}
	}
	if err := validConfig().Validate(); err != nil {
		t.Errorf("no leader Service: %v", err)
	}
}

func TestResyncZeroDisables(t *testing.T) {
	c := validConfig()
	c.ResyncPeriod = 0
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The executor namespace defaults to the control plane's (one namespace, as in development)
// and is the environments' namespace when set (the chart's two namespaces).
func TestExecutorsDefaultsToTheNamespace(t *testing.T) {
	c := validConfig()
	if got := c.Executors(); got != "execplane" {
		t.Fatalf("default executor namespace %q", got)
	}
	c.ExecutorNamespace = "execplane-executors"
	if got := c.Executors(); got != "execplane-executors" {
		t.Fatalf("executor namespace %q", got)
	}
}
