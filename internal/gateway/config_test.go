package gateway

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
	c.ControllerAddress = "execplane-controller:9443"
	return c
}

func TestDefaultsNeedOnlyNamespaceAndController(t *testing.T) {
	if err := validConfig().Validate(); err != nil {
		t.Fatalf("valid config refused: %v", err)
	}
	err := DefaultConfig().Validate()
	for _, want := range []string{"--namespace", "--controller-address"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("defaults without %s accepted: %v", want, err)
		}
	}
}

func TestValidateRefusesEachBadField(t *testing.T) {
	cases := []struct {
		name  string
		field string
		mut   func(*Config)
	}{
		{"listen not host:port", "--listen-address", func(c *Config) { c.ListenAddress = "8443" }},
		{"listen bad port", "--listen-address", func(c *Config) { c.ListenAddress = ":http2" }},
		{"diagnostics same as listen", "--diagnostics-address", func(c *Config) { c.DiagnosticsAddress = c.ListenAddress }},
		{"relative kubeconfig", "--kubeconfig", func(c *Config) { c.Kubeconfig = "kubeconfig" }},
		{"relative manifest", "--security-manifest", func(c *Config) { c.SecurityManifest = "manifest.yaml" }},
		{"unclean manifest", "--security-manifest", func(c *Config) { c.SecurityManifest = "/etc/../etc/m.yaml" }},
		{"no high-water", "--high-water-configmap", func(c *Config) { c.HighWaterConfigMap = "" }},
		{"no profiles", "--profiles", func(c *Config) { c.ProfilesFile = "" }},
		{"relative helper", "--helper-path", func(c *Config) { c.HelperPath = "helper" }},
		{"zero global limit", "--max-concurrent-rpcs", func(c *Config) { c.MaxConcurrentRPCs = 0 }},
		{"client above global", "--max-client-rpcs", func(c *Config) { c.MaxClientRPCs = c.MaxConcurrentRPCs + 1 }},
		{"tiny messages", "--max-message-bytes", func(c *Config) { c.MaxMessageBytes = 1024 }},
		{"huge messages", "--max-message-bytes", func(c *Config) { c.MaxMessageBytes = MaxMessageBytesCeiling + 1 }},
		{"deadline too long", "--max-rpc-deadline", func(c *Config) { c.MaxRPCDeadline = 3 * time.Hour }},
		{"negative grace", "--shutdown-grace", func(c *Config) { c.ShutdownGrace = -time.Second }},
		{"freshness bound under two probe periods", "--view-freshness-bound", func(c *Config) { c.FreshnessBound = time.Second }},
		{"freshness bound too long", "--view-freshness-bound", func(c *Config) { c.FreshnessBound = 2 * time.Minute }},
		{"bad log level", "--log-level", func(c *Config) { c.Log.Level = "verbose" }},
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

func TestValidateReportsEveryProblemAtOnce(t *testing.T) {
	c := validConfig()
	c.ListenAddress, c.Namespace, c.MaxConcurrentRPCs = "", "", -1
	err := c.Validate()
	for _, want := range []string{"--listen-address", "--namespace", "--max-concurrent-rpcs"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("missing %s in %v", want, err)
		}
	}
}

// The executor namespace defaults to the control plane's and is where environments are read
// and Pods exec'd when set.
func TestExecutorsDefaultsToTheNamespace(t *testing.T) {
	c := DefaultConfig()
	c.Namespace = "execplane"
	if got := c.Executors(); got != "execplane" {
		t.Fatalf("default executor namespace %q", got)
	}
	c.ExecutorNamespace = "execplane-executors"
	if got := c.Executors(); got != "execplane-executors" {
		t.Fatalf("executor namespace %q", got)
	}
}
