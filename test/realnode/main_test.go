// Package realnode_test proves the executor Pod's run-time guarantees on a real node of the
// local cluster (containerd, runc, a kubelet): what Pod Security admission and the Pod spec
// only promise, checked on the running container, through the gateway like a caller, and
// on the node.
package realnode_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/devsystem"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/generated/clientset/versioned"
)

var (
	controllerBin, gatewayBin string
	// unavailable says why this machine cannot run the real node (nil when it can).
	unavailable error
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if unavailable = devcluster.RealNodeAvailable(); unavailable != nil {
		return m.Run() // every test reports the missing precondition
	}
	dir, err := os.MkdirTemp("", "realnode-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	controllerBin, gatewayBin = filepath.Join(dir, "controller"), filepath.Join(dir, "gateway")
	for out, pkg := range map[string]string{controllerBin: "./cmd/controller", gatewayBin: "./cmd/gateway"} {
		if err := clustertest.GoBuild("../..", out, pkg, "-race"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	node, err := clustertest.RealNodeImages(dir, "../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	node.CSI = true // the csi snapshot method's tests
	return clustertest.Main(m, clustertest.Options{RealNode: node})
}

// Profiles of the real node's executors. Their limits are small so that the bombs below are
// quick: 256 MiB of memory (room for the node's 512 processes a Pod, so that a fork bomb
// meets the pid limit first), a 8 MiB /tmp.
const (
	// profileExample runs the example executor image, the helper inside it.
	profileExample = "example"
	// profileHelperImage runs an image without the helper; its helperImage installs it.
	profileHelperImage = "installed"
	// profileCSI runs the example image on the CSI driver's volumes, snapshotted by it.
	profileCSI   = "csi"
	tmpSizeLimit = 8 << 20
)

var profiles = "profiles:\n" + profileYAML(profileExample, devimage.ExecutorRef, "") +
	profileYAML(profileHelperImage, devimage.UserlandRef, "    helperImage: "+devimage.HelperRef+"\n") +
	strings.Replace(profileYAML(profileCSI, devimage.ExecutorRef, "    snapshots:\n      volumeSnapshotClassName: "+devcluster.CSISnapshotClassName+"\n"),
		"storageClass: "+devcluster.StorageClassName, "storageClass: "+devcluster.CSIStorageClassName, 1)

// profileYAML is one profile of image on the real node, with extra lines.
func profileYAML(name, image, extra string) string {
	return fmt.Sprintf(`  %s:
    image: %s
%s    storageClass: %s
    storageSize: 1Gi
    memoryLimit: 256Mi
    tmpSizeLimit: 8Mi
    maxFileBytes: 1048576
    maxCommandBytes: 65536
    maxCommandDuration: 5m
    maxEnvironments: 20
`, name, image, extra, devcluster.StorageClassName) + devcluster.RealNodePlacement
}

// system is execplane on the cluster with the real node: its controller and a gateway, a
// caller and an administrator.
type system struct {
	*devsystem.System
	cluster       *devcluster.Cluster
	exec          versioned.Interface
	caller, admin *client.Client
}

// startSystem starts a controller and a gateway (with gatewayArgs) on the package's cluster.
func startSystem(t *testing.T, gatewayArgs ...string) *system {
	t.Helper()
	return startSystemArgs(t, nil, gatewayArgs...)
}

// startSystemArgs is startSystem with controllerArgs appended to the controller's flags.
func startSystemArgs(t *testing.T, controllerArgs []string, gatewayArgs ...string) *system {
	t.Helper()
	if unavailable != nil {
		precondition.Missing(t, "the real node: %v", unavailable)
	}
	c := clustertest.Cluster(t)
	if !c.HasRealNode() {
		t.Fatal("the package's cluster has no real node")
	}
	if _, err := c.InstallCRDs(t.Context(), "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	sys, err := devsystem.Start(t.Context(), devsystem.Options{
		Kubeconfig: c.Kubeconfig(), Namespace: clustertest.Namespace(t), ExecutorNamespace: clustertest.Namespace(t),
		Dir: logs, ControllerBin: controllerBin, GatewayBin: gatewayBin, Gateways: 1,
		HelperPath: devimage.HelperPath, Profiles: []byte(profiles),
		ControllerArgs: append([]string{"--log-format", "text"}, controllerArgs...), GatewayArgs: append([]string{"--log-format", "text"}, gatewayArgs...),
	})
	if sys != nil {
		t.Cleanup(func() {
			sys.Stop()
			if t.Failed() {
				for _, p := range append([]*devsystem.Process{sys.Controller}, sys.Gateways...) {
					if data, err := os.ReadFile(p.LogPath); err == nil {
						t.Logf("--- %s log ---\n%s", p.Name, data)
					}
				}
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	s := &system{System: sys, cluster: c}
	if s.exec, err = versioned.NewForConfig(c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	s.caller, s.admin = s.dial(t, sys.Material.Caller), s.dial(t, sys.Material.Administrator)
	return s
}

func (s *system) dial(t *testing.T, who devbundle.Client) *client.Client {
	t.Helper()
	c, err := client.Dial(client.Config{Address: s.Gateways[0].Listen, CAFile: s.Material.CACert,
		CertFile: who.CertFile, KeyFile: who.KeyFile, ServerName: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ctx bounds one test's calls.
func ctx(t *testing.T) context.Context { return clustertest.Context(t, 3*time.Minute) }

// workspace is one environment with a run, as a caller holds it.
type workspace struct {
	env *client.Environment
	run *client.Run
}

var owner = client.Owner{Issuer: "https://idp.example", Subject: "real-node"}

// ensure creates the binding's environment on profile, waits until it is Ready, and
// acquires a run.
func (s *system) ensure(t *testing.T, binding, profile string) *workspace {
	t.Helper()
	env, err := s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: owner, BindingID: binding, Profile: profile})
	if err != nil {
		t.Fatalf("ensure %s on %s: %v", binding, profile, err)
	}
	return &workspace{env: env, run: acquire(t, env, "run-1")}
}

func acquire(t *testing.T, env *client.Environment, runID string) *client.Run {
	t.Helper()
	run, err := env.Acquire(ctx(t), client.AcquireOptions{RunID: runID})
	if err != nil {
		t.Fatalf("acquire: %v", err)
	}
	t.Cleanup(func() { _ = run.Close(context.Background()) })
	return run
}

// sh runs script and returns the result, failing the test when the call itself fails.
func (w *workspace) sh(t *testing.T, script string) *client.CommandResult {
	t.Helper()
	res, err := w.run.Run(ctx(t), client.Command{Shell: script, Timeout: time.Minute})
	if err != nil {
		t.Fatalf("run %q: %v", script, err)
	}
	return res
}

// must runs script and returns its stdout, failing the test unless it succeeds.
func (w *workspace) must(t *testing.T, script string) string {
	t.Helper()
	res := w.sh(t, script)
	if !res.Succeeded() {
		t.Fatalf("%q: %v exit %d\nstdout: %s\nstderr: %s", script, res.State, res.ExitCode, res.Stdout, res.Stderr)
	}
	return res.Stdout.String()
}
