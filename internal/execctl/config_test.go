package execctl

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/cli"
)

func TestDefaultsFromEnvironment(t *testing.T) {
	env := map[string]string{
		"EXECPLANE_ADDRESS": "127.0.0.1:8443", "EXECPLANE_CA": "/ca.pem",
		"EXECPLANE_CERT": "/c.pem", "EXECPLANE_KEY": "/k.pem", "EXECPLANE_SERVER_NAME": "gw",
	}
	c := DefaultConfig(func(k string) string { return env[k] })
	if c.Address != "127.0.0.1:8443" || c.CAFile != "/ca.pem" || c.CertFile != "/c.pem" || c.KeyFile != "/k.pem" || c.ServerName != "gw" {
		t.Fatalf("env not applied: %+v", c)
	}
	if err := c.ValidateConnection(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateConnectionReportsEveryMissingFlag(t *testing.T) {
	c := DefaultConfig(func(string) string { return "" })
	c.Output = "yaml"
	c.Timeout = 0
	err := c.ValidateConnection()
	if !errors.Is(err, cli.ErrInvalidConfig) {
		t.Fatalf("got %v", err)
	}
	for _, want := range []string{"--o", "--timeout", "--address", "--ca", "--cert", "--key"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %s in %v", want, err)
		}
	}
}

func TestValidateOnlyChecksOutput(t *testing.T) {
	c := DefaultConfig(func(string) string { return "" })
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Timeout = 3 * time.Hour
	if err := c.Validate(); err == nil {
		t.Fatal("3h timeout accepted")
	}
}
