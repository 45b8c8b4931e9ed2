package startup

import (
	"errors"
	"flag"
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/execplane/execplane/internal/cli"
	"github.com/execplane/execplane/internal/logging"
)

// testServer has words no other flag's help carries, so a help text can only hold them
// because RegisterFlags took them from the Server.
var testServer = Server{
	Name:           "testd",
	Listens:        "the test API (zebra)",
	NamespaceHolds: "the test's Lease (giraffe)",
	ExecutorsHold:  "the test's Pods (okapi)",
	MaxKubeQPS:     1000,
}

// validConfig is a configuration with no problem, that each case spoils in one way.
func validConfig() Config {
	c := Defaults(testServer)
	c.ListenAddress, c.DiagnosticsAddress = ":8443", ":9090"
	c.Namespace = "execplane"
	c.KubeQPS, c.KubeBurst = 100, 200
	return c
}

// problemLines returns one line per problem Problems reported ("--flag: what is wrong").
func problemLines(err error) []string {
	if err == nil {
		return nil
	}
	var lines []string
	for _, l := range strings.Split(err.Error(), "\n") {
		if strings.HasPrefix(l, "--") {
			lines = append(lines, l)
		}
	}
	return lines
}

func TestProblemsNamesEachBadField(t *testing.T) {
	cases := []struct {
		name string
		edit func(c *Config)
		// want holds, in order, a part of each problem line: the flag and what is wrong.
		want []string
	}{
		{name: "valid", edit: func(*Config) {}},
		{name: "valid: every optional field set", edit: func(c *Config) {
			c.ListenAddress, c.DiagnosticsAddress = "127.0.0.1:8443", "[::1]:9090"
			c.ExecutorNamespace = "executors"
			c.Kubeconfig = "/home/op/.kube/config"
			c.Log = logging.Options{Format: logging.FormatText, Level: "debug"}
		}},
		{name: "valid: rate limit at its bounds", edit: func(c *Config) { c.KubeQPS, c.KubeBurst = 1000, 2000 }},
		{name: "valid: rate limit at its floor", edit: func(c *Config) { c.KubeQPS, c.KubeBurst = 1, 1 }},
		{name: "valid: empty log options take the logger's defaults", edit: func(c *Config) { c.Log = logging.Options{} }},

		{name: "listen address missing", edit: func(c *Config) { c.ListenAddress = "" },
			want: []string{"--listen-address: is required"}},
		{name: "listen address not host:port", edit: func(c *Config) { c.ListenAddress = "8443" },
			want: []string{`--listen-address: "8443" is not host:port`}},
		{name: "listen address port out of range", edit: func(c *Config) { c.ListenAddress = ":65536" },
			want: []string{`--listen-address: ":65536" has no valid port`}},
		{name: "diagnostics address missing", edit: func(c *Config) { c.DiagnosticsAddress = "" },
			want: []string{"--diagnostics-address: is required"}},
		{name: "diagnostics address port not a number", edit: func(c *Config) { c.DiagnosticsAddress = "localhost:http" },
			want: []string{`--diagnostics-address: "localhost:http" has no valid port`}},
		{name: "diagnostics address equals listen address", edit: func(c *Config) { c.DiagnosticsAddress = c.ListenAddress },
			want: []string{"--diagnostics-address: must differ from --listen-address"}},
		{name: "namespace missing", edit: func(c *Config) { c.Namespace = "" },
			want: []string{"--namespace: is required"}},
		{name: "kubeconfig relative", edit: func(c *Config) { c.Kubeconfig = ".kube/config" },
			want: []string{`--kubeconfig: ".kube/config" is not an absolute path`}},
		{name: "kubeconfig unclean", edit: func(c *Config) { c.Kubeconfig = "/home/op/../op/.kube/config" },
			want: []string{`--kubeconfig: "/home/op/../op/.kube/config" is not a clean path`}},
		{name: "security manifest missing", edit: func(c *Config) { c.SecurityManifest = "" },
			want: []string{"--security-manifest: is required"}},
		{name: "security manifest relative", edit: func(c *Config) { c.SecurityManifest = "security/manifest.yaml" },
			want: []string{`--security-manifest: "security/manifest.yaml" is not an absolute path`}},
		{name: "security manifest unclean", edit: func(c *Config) { c.SecurityManifest = "/etc/execplane//security/manifest.yaml" },
			want: []string{`--security-manifest: "/etc/execplane//security/manifest.yaml" is not a clean path`}},
		{name: "high-water configmap empty", edit: func(c *Config) { c.HighWaterConfigMap = "" },
			want: []string{"--high-water-configmap: is required"}},
		{name: "profiles empty", edit: func(c *Config) { c.ProfilesFile = "" },
			want: []string{"--profiles: is required"}},
		{name: "profiles relative", edit: func(c *Config) { c.ProfilesFile = "profiles.yaml" },
			want: []string{`--profiles: "profiles.yaml" is not an absolute path`}},
		{name: "kube-api-qps zero", edit: func(c *Config) { c.KubeQPS = 0 },
			want: []string{"--kube-api-qps: 0 must be between 1 and 1000"}},
		{name: "kube-api-qps above the server's bound", edit: func(c *Config) { c.KubeQPS, c.KubeBurst = 1001, 1500 },
			want: []string{"--kube-api-qps: 1001 must be between 1 and 1000"}},
		{name: "kube-api-burst below qps", edit: func(c *Config) { c.KubeQPS, c.KubeBurst = 100, 99 },
			want: []string{"--kube-api-burst: 99 must be at least --kube-api-qps and at most 2000"}},
		{name: "kube-api-burst above twice the server's bound", edit: func(c *Config) { c.KubeBurst = 2001 },
			want: []string{"--kube-api-burst: 2001 must be at least --kube-api-qps and at most 2000"}},
		{name: "log level unknown", edit: func(c *Config) { c.Log.Level = "loud" },
			want: []string{`--log-level: invalid logging options: log level "loud" is not trace, debug, info, warn or error`}},
		{name: "kube-api-qps not a number", edit: func(c *Config) { c.KubeQPS, c.KubeBurst = math.NaN(), -5 },
			want: []string{"--kube-api-qps: NaN must be between 1 and 1000", "--kube-api-burst: -5 must be at least --kube-api-qps and at most 2000"}},
		{name: "kube-api-burst below a fractional qps", edit: func(c *Config) { c.KubeQPS, c.KubeBurst = 1.9, 1 },
			want: []string{"--kube-api-burst: 1 must be at least --kube-api-qps and at most 2000"}},
		{name: "log format unknown", edit: func(c *Config) { c.Log.Format = "xml" },
			want: []string{`--log-format: invalid logging options: log format "xml" is not json or text`}},

		{name: "every problem at once", edit: func(c *Config) {
			*c = Config{
				ListenAddress: "nohost", DiagnosticsAddress: "", Kubeconfig: "kubeconfig", SecurityManifest: "/a/./b",
				ProfilesFile: "p.yaml", KubeQPS: 5000, KubeBurst: 1, Log: logging.Options{Level: "loud"}, server: testServer,
			}
		}, want: []string{
			`--listen-address: "nohost" is not host:port`,
			"--diagnostics-address: is required",
			"--namespace: is required",
			`--kubeconfig: "kubeconfig" is not an absolute path`,
			`--security-manifest: "/a/./b" is not a clean path`,
			"--high-water-configmap: is required",
			`--profiles: "p.yaml" is not an absolute path`,
			"--kube-api-qps: 5000 must be between 1 and 1000",
			"--kube-api-burst: 1 must be at least --kube-api-qps and at most 2000",
			`--log-level: invalid logging options: log level "loud" is not trace, debug, info, warn or error`,
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig()
			tc.edit(&c)
			err := c.Problems().Err()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Problems().Err() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, cli.ErrInvalidConfig) {
				t.Fatalf("Problems().Err() = %v, want an error wrapping cli.ErrInvalidConfig", err)
			}
			got := problemLines(err)
			match := len(got) == len(tc.want)
			for i := 0; match && i < len(got); i++ {
				match = strings.Contains(got[i], tc.want[i])
			}
			if !match {
				t.Errorf("problems do not match, each wanted line a part of the one reported (-want +got):\n%s", cmp.Diff(tc.want, got))
			}
		})
	}
}

func TestRegisterFlagsParsesEveryField(t *testing.T) {
	// serverDefaults is a Config as a server's DefaultConfig leaves it: its addresses and rate
	// limit set over Defaults.
	serverDefaults := func() Config {
		c := Defaults(testServer)
		c.ListenAddress, c.DiagnosticsAddress, c.KubeQPS, c.KubeBurst = ":8443", ":9090", 7, 14
		return c
	}
	cases := []struct {
		name string
		args []string
		want func() Config
	}{
		{name: "no flags keep the defaults", want: serverDefaults},
		{name: "one flag changes only its field", args: []string{"--namespace", "cp"}, want: func() Config {
			c := serverDefaults()
			c.Namespace = "cp"
			return c
		}},
		{name: "every flag", args: []string{
			"--listen-address", "127.0.0.1:8443",
			"--diagnostics-address=:9091",
			"--profiling",
			"--namespace", "cp",
			"--executor-namespace", "ex",
			"--kubeconfig", "/k/config",
			"--security-manifest", "/s/manifest.yaml",
			"--high-water-configmap", "mark",
			"--profiles", "/p/profiles.yaml",
			"--kube-api-qps", "12.5",
			"--kube-api-burst", "40",
			"--log-format", "text",
			"--log-level", "debug",
		}, want: func() Config {
			return Config{
				ListenAddress: "127.0.0.1:8443", DiagnosticsAddress: ":9091", Profiling: true,
				Namespace: "cp", ExecutorNamespace: "ex", Kubeconfig: "/k/config",
				SecurityManifest: "/s/manifest.yaml", HighWaterConfigMap: "mark", ProfilesFile: "/p/profiles.yaml",
				KubeQPS: 12.5, KubeBurst: 40, Log: logging.Options{Format: logging.FormatText, Level: "debug"},
				server: testServer,
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := serverDefaults()
			fs := flag.NewFlagSet("testd", flag.ContinueOnError)
			c.RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want(), c, cmp.AllowUnexported(Config{})); diff != "" {
				t.Errorf("parsed config (-want +got):\n%s", diff)
			}
		})
	}
}

func TestRegisterFlagsHelpCarriesTheServersWords(t *testing.T) {
	cases := []struct {
		flag string
		want string
	}{
		{"listen-address", testServer.Listens},
		{"namespace", testServer.NamespaceHolds},
		{"executor-namespace", testServer.ExecutorsHold},
	}
	c := Defaults(testServer)
	fs := flag.NewFlagSet("testd", flag.ContinueOnError)
	c.RegisterFlags(fs)
	for _, tc := range cases {
		t.Run(tc.flag, func(t *testing.T) {
			f := fs.Lookup(tc.flag)
			if f == nil {
				t.Fatalf("--%s is not registered", tc.flag)
			}
			if !strings.Contains(f.Usage, tc.want) {
				t.Errorf("help of --%s is %q, want it to say %q", tc.flag, f.Usage, tc.want)
			}
		})
	}
}

func TestExecutorsDefaultsToNamespace(t *testing.T) {
	cases := []struct {
		name              string
		namespace, execNS string
		want              string
	}{
		{"unset: the control plane's namespace", "cp", "", "cp"},
		{"set: its own", "cp", "ex", "ex"},
		{"set to the same", "cp", "cp", "cp"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Namespace: tc.namespace, ExecutorNamespace: tc.execNS}
			if got := c.Executors(); got != tc.want {
				t.Errorf("Executors() = %q, want %q", got, tc.want)
			}
		})
	}
}

// A server's configuration embeds Config; Shared hands back that part, server included,
// which is what Begin opens.
func TestSharedIsTheEmbeddedPart(t *testing.T) {
	type serverConfig struct {
		Config
		Own string
	}
	sc := serverConfig{Config: validConfig(), Own: "x"}
	if diff := cmp.Diff(validConfig(), sc.Shared(), cmp.AllowUnexported(Config{})); diff != "" {
		t.Errorf("Shared() (-want +got):\n%s", diff)
	}
}
