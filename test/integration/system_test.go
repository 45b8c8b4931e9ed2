// Package integration_test runs the whole system as it is deployed: the local cluster (real
// kube-apiserver, etcd, controller-manager, scheduler; KWOK nodes whose pods/exec runs the
// real helper; the real node, where it runs in a container), a controller process and
// gateway processes, and callers over mTLS.
package integration_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/pkg/profile/profiletest"
	"github.com/execplane/execplane/proto/execution/v1/executionv1grpc"
)

var controllerBin, gatewayBin, execctlBin, e2bBin, grpcurlBin, healthProbeBin string

// realNodeMissing says why the package's cluster has no real node (nil when it has one).
var realNodeMissing error

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	controllerBin, gatewayBin, execctlBin = filepath.Join(dir, "controller"), filepath.Join(dir, "gateway"), filepath.Join(dir, "execctl")
	e2bBin = filepath.Join(dir, "e2b")
	grpcurlBin, healthProbeBin = filepath.Join(dir, "grpcurl"), filepath.Join(dir, "grpc-health-probe")
	builds := []struct {
		out, pkg string
		flags    []string
	}{
		{controllerBin, "./cmd/controller", []string{"-race"}},
		{gatewayBin, "./cmd/gateway", []string{"-race"}},
		{execctlBin, "./cmd/execctl", []string{"-race"}},
		{e2bBin, "./cmd/e2b", []string{"-race"}},
		// Third-party clients, pinned in hack/tools/go.mod.
		{grpcurlBin, "github.com/fullstorydev/grpcurl/cmd/grpcurl", []string{"-modfile=hack/tools/go.mod"}},
		{healthProbeBin, "github.com/grpc-ecosystem/grpc-health-probe", []string{"-modfile=hack/tools/go.mod"}},
	}
	for _, b := range builds {
		if err := clustertest.GoBuild("../..", b.out, b.pkg, b.flags...); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	var node *devcluster.RealNodeOptions
	if realNodeMissing = devcluster.RealNodeAvailable(); realNodeMissing == nil {
		if node, err = clustertest.RealNodeImages(dir, "../.."); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := clustertest.MainWithExecutors(m, "../..", node)
	os.RemoveAll(dir)
	os.Exit(code)
}

// Extra client identities of every system, beside devbundle's caller and admin.
const (
	otherClient = "other"  // another client that may attest owners
	plainClient = "plain"  // a client with no capability
	scopedAdmin = "scoped" // an administrator of "other"'s environments only
)

// realNodeProfile runs the example executor image on the cluster's real node (the
// profiletest profile's limits), beside profiletest's on the fake nodes.
const realNodeProfile = "real-node"

var realNodeProfileYAML = profileYAML(realNodeProfile, devimage.ExecutorRef, devcluster.StorageClassName, 50, devcluster.RealNodePlacement)

// profileYAML is a profiles-file entry with profiletest's limits: an image, a storage
// class, a capacity, and extra lines (placement, a warm pool).
func profileYAML(name, image, class string, capacity int, extra string) string {
	return fmt.Sprintf(`  %s:
    image: %s
    storageClass: %s
    storageSize: 1Gi
    memoryLimit: 64Mi
    tmpSizeLimit: 16Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 5m
    maxEnvironments: %d
`, name, image, class, capacity) + extra
}

// system is one deployment in its own namespaces: ns for the control plane, executors for
// the environments and their Pods (the chart's shape).
type system struct {
	*devsystem.System
	ns         string
	executors  string
	kubeconfig string
	material   *devbundle.Result
	controller *process
	gateways   []*process
	logs       map[string]*clustertest.SyncBuffer
	// perExec: the system's gateways run with helper sessions off (--sessions=false).
	perExec bool
}

// process is a controller or gateway process of a system.
type process struct {
	*devsystem.Process
}

// sessionsArgs are the gateway flags that $EXECPLANE_E2E_SESSIONS asks for: "false" runs the
// suite with helper sessions off (make test-per-exec); unset or "true", the default, on.
func sessionsArgs() []string {
	switch v := os.Getenv("EXECPLANE_E2E_SESSIONS"); v {
	case "", "true":
		return nil
	default:
		return []string{"--sessions=" + v}
	}
}

// startSystem starts a controller and n gateways (real helper, gatewayArgs appended to their
// flags) in a fresh namespace and waits until all are ready.
func startSystem(t *testing.T, n int, gatewayArgs ...string) *system {
	t.Helper()
	return startSystemProfiles(t, "", n, gatewayArgs...)
}

// startSystemProfiles is startSystem with more profiles (YAML entries under profiles:).
func startSystemProfiles(t *testing.T, extraProfiles string, n int, gatewayArgs ...string) *system {
	t.Helper()
	return startSystemWith(t, systemOptions{profiles: extraProfiles, gateways: n, gatewayArgs: gatewayArgs})
}

// systemOptions shape a system beyond startSystemProfiles' arguments.
type systemOptions struct {
	profiles    string
	gateways    int
	gatewayArgs []string
	// controllers is the number of controller replicas (named controller-<i>); 0 is one,
	// named controller-0.
	controllers int
	// controllerArgs are appended to the controllers' flags.
	controllerArgs []string
}

func startSystemWith(t *testing.T, o systemOptions) *system {
	t.Helper()
	extraProfiles, n, gatewayArgs := o.profiles, o.gateways, o.gatewayArgs
	controllerArgs := []string{"--lease-duration", "15s", "--renew-deadline", "10s", "--retry-period", "2s"}
	if o.controllers <= 1 {
		controllerArgs = append([]string{"--identity", "controller-0"}, controllerArgs...)
	}
	c := clustertest.Cluster(t)
	if _, err := c.InstallCRDs(t.Context(), "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	s := &system{ns: clustertest.Namespace(t), executors: clustertest.Namespace(t), kubeconfig: c.Kubeconfig(), logs: map[string]*clustertest.SyncBuffer{}}
	for _, a := range append(sessionsArgs(), gatewayArgs...) { // the last one says
		if v, ok := strings.CutPrefix(a, "--sessions="); ok {
			s.perExec = v == "false"
		}
	}
	var mu sync.Mutex
	verbose := []string{"--log-format", "text", "--log-level", "debug"}
	sys, err := devsystem.Start(t.Context(), devsystem.Options{
		Kubeconfig: s.kubeconfig, Namespace: s.ns, ExecutorNamespace: s.executors, Dir: t.TempDir(),
		ControllerBin: controllerBin, GatewayBin: gatewayBin, Gateways: n, Controllers: o.controllers,
		HelperPath: clustertest.HelperPath, Profiles: []byte(profiletest.YAML(50) + realNodeProfileYAML + extraProfiles),
		ExtraClients: []devbundle.ExtraClient{
			{Name: otherClient, MayAttestOwner: true},
			{Name: plainClient},
			{Name: scopedAdmin, Administrator: true, AdministratorFor: []string{"spiffe://" + devbundle.DefaultTrustDomain + "/client/" + otherClient}},
		},
		ControllerArgs: append(append(controllerArgs, verbose...), o.controllerArgs...),
		GatewayArgs:    append(append(verbose, sessionsArgs()...), gatewayArgs...),
		Logs: func(name string) io.Writer {
			mu.Lock()
			defer mu.Unlock()
			s.logs[name] = &clustertest.SyncBuffer{}
			return s.logs[name]
		},
	})
	t.Cleanup(func() {
		if sys != nil {
			sys.Stop()
		}
		if t.Failed() {
			mu.Lock()
			defer mu.Unlock()
			for name, log := range s.logs {
				t.Logf("--- %s log ---\n%s", name, log.String())
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	s.System, s.material = sys, sys.Material
	s.controller = &process{Process: sys.Controller}
	for _, g := range sys.Gateways {
		s.gateways = append(s.gateways, &process{Process: g})
	}
	return s
}

// startGateway starts one more gateway whose executors run helperPath; the caller waits for
// it to be ready.
func (s *system) startGateway(t *testing.T, name, helperPath string, extra ...string) *process {
	t.Helper()
	g, err := s.StartGateway(name, helperPath, extra...)
	if err != nil {
		t.Fatal(err)
	}
	return &process{Process: g}
}

// ready reports the process's /readyz status.
func (p *process) ready() bool { return p.Ready(context.Background()) }

// metric returns the sum of the samples of a metric whose line starts with prefix.
func (p *process) metric(t *testing.T, prefix string) float64 {
	t.Helper()
	v, err := p.Metric(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// dial returns an API client of the named client to gateway i.
func (s *system) dial(t *testing.T, name string, i int) executionv1grpc.ExecutionProviderServiceClient {
	t.Helper()
	return executionv1grpc.NewExecutionProviderServiceClient(s.conn(t, name, i))
}

func (s *system) conn(t *testing.T, name string, i int) *grpc.ClientConn {
	t.Helper()
	conn, err := s.Dial(name, i)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func callCtx(t *testing.T) context.Context {
	return clustertest.Context(t, 30*time.Second)
}
