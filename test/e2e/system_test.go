// Package e2e_test runs the whole system as it is deployed: the local cluster (real
// kube-apiserver, etcd, controller-manager, scheduler; KWOK nodes whose pods/exec runs the
// real helper), a controller process and gateway processes, and callers over mTLS.
package e2e_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/devcluster/clustertest"
	"github.com/execplane/execplane/internal/security"
	"github.com/execplane/execplane/internal/security/devbundle"
	"github.com/execplane/execplane/internal/security/highwater"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

var controllerBin, gatewayBin, grpcurlBin, healthProbeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controllerBin, gatewayBin = filepath.Join(dir, "controller"), filepath.Join(dir, "gateway")
	for bin, pkg := range map[string]string{controllerBin: "./cmd/controller", gatewayBin: "./cmd/gateway"} {
		cmd := exec.Command("go", "build", "-race", "-o", bin, pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	// Third-party clients, pinned in hack/tools/go.mod.
	grpcurlBin, healthProbeBin = filepath.Join(dir, "grpcurl"), filepath.Join(dir, "grpc-health-probe")
	for bin, pkg := range map[string]string{grpcurlBin: "github.com/fullstorydev/grpcurl/cmd/grpcurl", healthProbeBin: "github.com/grpc-ecosystem/grpc-health-probe"} {
		cmd := exec.Command("go", "build", "-modfile=hack/tools/go.mod", "-o", bin, pkg)
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "building %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	files, err := clustertest.ExecutorFiles(dir, "../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := clustertest.Main(m, clustertest.Options{ImageFiles: files})
	os.RemoveAll(dir)
	os.Exit(code)
}

// Extra client identities of every system, beside devbundle's caller and admin.
const (
	otherClient = "other"  // another client that may attest owners
	plainClient = "plain"  // a client with no capability
	scopedAdmin = "scoped" // an administrator of "other"'s environments only
)

// system is one deployment in its own namespace.
type system struct {
	ns         string
	kubeconfig string
	material   *devbundle.Result
	profiles   string
	controller *process
	gateways   []*process
}

// process is a controller or gateway process of a system.
type process struct {
	name   string
	cmd    *exec.Cmd
	listen string
	diag   string
	log    *clustertest.SyncBuffer
	done   chan error
}

// startSystem starts a controller and n gateways (real helper) in a fresh namespace and waits
// until all are ready.
func startSystem(t *testing.T, n int) *system {
	t.Helper()
	c := clustertest.Cluster(t)
	if _, err := c.InstallCRDs(t.Context(), "../../deploy/helm/execplane/crds"); err != nil {
		t.Fatal(err)
	}
	s := &system{ns: clustertest.Namespace(t), kubeconfig: c.Kubeconfig()}
	var err error
	s.material, err = devbundle.Generate(filepath.Join(t.TempDir(), "security"), devbundle.Options{Extra: []devbundle.ExtraClient{
		{Name: otherClient, MayAttestOwner: true},
		{Name: plainClient},
		{Name: scopedAdmin, Administrator: true, AdministratorFor: []string{"spiffe://" + devbundle.DefaultTrustDomain + "/client/" + otherClient}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if err := highwater.CreateInitial(t.Context(), c.Kube(), s.ns, "execplane-security-high-water"); err != nil {
		t.Fatal(err)
	}
	s.profiles = filepath.Join(t.TempDir(), "profiles.yaml")
	if err := os.WriteFile(s.profiles, []byte(profiletest.YAML(50)), 0o600); err != nil {
		t.Fatal(err)
	}
	addrs := clustertest.FreeAddrs(t, 2)
	s.controller = s.start(t, "controller", controllerBin, addrs,
		"--identity", "controller-0", "--gateway-identity", s.material.Gateway.Identity, "--executor-service-account", "default",
		"--lease-duration", "2s", "--renew-deadline", "1500ms", "--retry-period", "200ms")
	for i := range n {
		s.gateways = append(s.gateways, s.startGateway(t, fmt.Sprintf("gateway-%d", i), clustertest.HelperPath))
	}
	clustertest.Eventually(t, 60*time.Second, "the controller and the gateways ready", func() bool {
		for _, p := range append([]*process{s.controller}, s.gateways...) {
			if !p.ready() {
				return false
			}
		}
		return true
	})
	return s
}

// startGateway starts one more gateway whose executors run helperPath.
func (s *system) startGateway(t *testing.T, name, helperPath string, extra ...string) *process {
	t.Helper()
	args := append([]string{"--controller-address", s.controller.listen, "--controller-server-name", "localhost",
		"--controller-client-cert", s.material.Gateway.CertFile, "--controller-client-key", s.material.Gateway.KeyFile,
		"--controller-ca", s.material.CACert, "--helper-path", helperPath}, extra...)
	return s.start(t, name, gatewayBin, clustertest.FreeAddrs(t, 2), args...)
}

func (s *system) start(t *testing.T, name, bin string, addrs []string, args ...string) *process {
	t.Helper()
	p := &process{name: name, diag: addrs[0], listen: addrs[1], log: &clustertest.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd = exec.Command(bin, append([]string{"--namespace", s.ns, "--kubeconfig", s.kubeconfig, "--profiles", s.profiles,
		"--security-manifest", s.material.Manifest, "--listen-address", p.listen, "--diagnostics-address", p.diag,
		"--log-format", "text", "--log-level", "debug"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", name, p.log.String())
		}
	})
	return p
}

// ready reports the process's /readyz status.
func (p *process) ready() bool {
	c := http.Client{Timeout: 500 * time.Millisecond}
	resp, err := c.Get("http://" + p.diag + "/readyz")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode == http.StatusOK
}

// metric returns the sum of the samples of a metric whose line starts with prefix.
func (p *process) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	c := http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + p.diag + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for line := range strings.SplitSeq(string(body), "\n") {
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatal(err)
		}
		total += v
	}
	return total
}

// credentials returns the client files of a named client: "caller", "admin" or an extra one.
func (s *system) credentials(name string) devbundle.Client {
	switch name {
	case "caller":
		return s.material.Caller
	case "admin":
		return s.material.Administrator
	case "gateway":
		return s.material.Gateway
	}
	return s.material.Extra[name]
}

// dial returns an API client of the named client to gateway i.
func (s *system) dial(t *testing.T, name string, i int) executionv1grpc.ExecutionProviderServiceClient {
	t.Helper()
	return executionv1grpc.NewExecutionProviderServiceClient(s.conn(t, name, i))
}

func (s *system) conn(t *testing.T, name string, i int) *grpc.ClientConn {
	t.Helper()
	id := s.credentials(name)
	cfg, err := security.LoadClientTLSConfig(security.ClientFiles{CertFile: id.CertFile, KeyFile: id.KeyFile, CAFile: s.material.CACert, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(s.gateways[i].listen, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callCtx(t *testing.T) context.Context {
	return clustertest.Context(t, 30*time.Second)
}
