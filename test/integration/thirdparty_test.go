package integration_test

import (
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

// Third-party clients with no execplane code: grpcurl lists the service through reflection
// and calls ValidateProfile; grpc-health-probe reports the gateway serving. Both over mTLS
// with a client of the policy (nothing is served to anyone else).
func TestThirdPartyClients(t *testing.T) {
	sys := startSystem(t, 1)
	id := sys.material.Caller
	tlsArgs := []string{"-cacert", sys.material.CACert, "-cert", id.CertFile, "-key", id.KeyFile, "-servername", "localhost"}
	run := func(bin string, args ...string) string {
		t.Helper()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	list := run(grpcurlBin, append(tlsArgs, sys.gateways[0].Listen, "list")...)
	if !strings.Contains(list, "execution.v1.ExecutionProviderService") || !strings.Contains(list, "grpc.health.v1.Health") {
		t.Fatalf("grpcurl list: %s", list)
	}
	desc := run(grpcurlBin, append(tlsArgs, sys.gateways[0].Listen, "describe", "execution.v1.ExecutionProviderService")...)
	if !strings.Contains(desc, "rpc StartCommand") {
		t.Fatalf("grpcurl describe: %s", desc)
	}
	vp := run(grpcurlBin, append(tlsArgs, "-d", `{"profile":"python"}`, sys.gateways[0].Listen, "execution.v1.ExecutionProviderService/ValidateProfile")...)
	if !strings.Contains(vp, `"digest": "sha256:`) || !strings.Contains(vp, `"maxFileBytes": "1048576"`) {
		t.Fatalf("grpcurl ValidateProfile: %s", vp)
	}
	// The health status follows readiness within a quarter second.
	var health []byte
	clustertest.Eventually(t, 5*time.Second, "grpc-health-probe reporting SERVING", func() bool {
		var err error
		health, err = exec.Command(healthProbeBin, "-addr", sys.gateways[0].Listen, "-tls", "-tls-ca-cert", sys.material.CACert,
			"-tls-client-cert", id.CertFile, "-tls-client-key", id.KeyFile, "-tls-server-name", "localhost").CombinedOutput()
		return err == nil && strings.Contains(string(health), "status: SERVING")
	})
	t.Logf("grpc-health-probe: %s", strings.TrimSpace(string(health)))
	// Without a client certificate, nothing: not even reflection.
	if out, err := exec.Command(grpcurlBin, "-cacert", sys.material.CACert, "-servername", "localhost", sys.gateways[0].Listen, "list").CombinedOutput(); err == nil {
		t.Fatalf("grpcurl without a client certificate listed the services:\n%s", out)
	}
}
