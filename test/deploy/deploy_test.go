// Package deploy_test installs the chart as an operator does, on the local cluster's real
// node (internal/dev/devdeploy): images built in Go and pulled from the cluster's registry,
// `helm install --wait`, the controllers and gateways as Pods behind Services, a caller
// through the gateway's NodePort; then a `helm upgrade` that changes both Pod templates
// rolls to completion, and the eviction API evicts the leading controller. The certificates
// come from cert-manager (built from its module, hack/build-cert-manager.sh) as
// docs/deployment.md's recipe has it, and one renewal of them in place is forced while a
// caller calls.
package deploy_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devbundle"
	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/dev/devdeploy"
	"github.com/execplane/execplane/internal/dev/devimage"
	"github.com/execplane/execplane/internal/dev/precondition"
	"github.com/execplane/execplane/internal/dev/walkthrough"
	"github.com/execplane/execplane/pkg/client"
)

const (
	chartDir = "../../deploy/helm/execplane"
	// version is the test release's image tag.
	version = "0.0.0-deploy-test"
	// leaseDuration is the chart's default leaderElection.leaseDuration: the bound within
	// which a new leader must serve after the old one's eviction.
	leaseDuration = 15 * time.Second
)

var (
	helmBin string
	images  []devimage.Built
	// certManager is hack/build-cert-manager.sh's directory.
	certManager string
	// unavailable says why this machine cannot run the real node (nil when it can).
	unavailable error
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		fmt.Println("skipping the deployment test under -short (it builds images and uses the real node)")
		return 0
	}
	if unavailable = devcluster.RealNodeAvailable(); unavailable != nil {
		return m.Run() // the test reports the missing precondition
	}
	dir, err := os.MkdirTemp("", "deploy-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	if images, err = buildImages(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if certManager, err = devdeploy.FindCertManager(context.Background()); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	node, err := clustertest.RealNodeImages(dir, "../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	node.ClusterDNS = true
	return clustertest.Main(m, clustertest.Options{RealNode: node})
}

// buildImages builds helm and the release's images as make images does: static programs,
// then devimage.BuildRelease for this machine's platform.
func buildImages(dir string) ([]devimage.Built, error) {
	helmBin = filepath.Join(dir, "helm")
	if err := clustertest.GoBuild("../..", helmBin, "helm.sh/helm/v3/cmd/helm", "-modfile=hack/tools/go.mod"); err != nil {
		return nil, err
	}
	platform := "linux_" + runtime.GOARCH
	for _, p := range []string{"gateway", "controller", "helper", "e2b"} {
		if err := clustertest.StaticBuild("../..", filepath.Join(dir, platform, p), "./cmd/"+p); err != nil {
			return nil, err
		}
	}
	ps, err := devimage.ParsePlatforms("linux/" + runtime.GOARCH)
	if err != nil {
		return nil, err
	}
	return devimage.BuildRelease(devimage.Release{Version: version, Commit: "deploy-test", Created: time.Unix(1<<30, 0),
		Platforms: ps, BinDir: dir, Userland: devimage.BusyboxUserland(devimage.BusyboxPath)})
}

// The chart installed with helm on the real node, its certificates from cert-manager,
// serves a caller through the gateway's Service; cert-manager's renewal of them is taken in
// place; an upgrade that changes both Pod templates rolls to completion; the leader's
// eviction hands the control API to the other replica within the lease.
func TestChartOnTheRealNode(t *testing.T) {
	if unavailable != nil {
		precondition.Missing(t, "the real node: %v", unavailable)
	}
	c := clustertest.Cluster(t)
	ctx := t.Context()
	var helmLog, certManagerLog clustertest.SyncBuffer
	cm, err := devdeploy.StartCertManager(ctx, c, certManager, devdeploy.Namespace, &certManagerLog)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cm.Stop)
	start := time.Now()
	d, err := devdeploy.Install(ctx, devdeploy.Options{Cluster: c, Helm: helmBin, Chart: chartDir, Dir: t.TempDir(), Images: images,
		Log: &helmLog, CertManager: true})
	if err != nil {
		t.Fatalf("install: %v\ncert-manager:\n%s\n%s", err, certManagerLog.String(), diagnose(c, devdeploy.Namespace))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helm:\n%s\ncert-manager:\n%s\n%s", helmLog.String(), certManagerLog.String(), diagnose(c, d.Namespace))
		}
	})

	t.Logf("images pushed and helm install --wait done in %s", time.Since(start).Round(time.Millisecond))

	// helm --wait returned: the four Pods run on the real node, from the pushed digests, as
	// does the cluster's DNS server they resolve the controller's Service name with.
	checkPods(t, d, "installed", "")
	dns, err := c.Kube().CoreV1().Pods(devcluster.DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dns.Items) != 1 {
		t.Fatalf("the DNS server's Pods: %v (%v)", dns, err)
	}
	if err := devdeploy.CheckPod(dns.Items[0], c.DNSImage()); err != nil {
		t.Error(err)
	}

	// The walkthrough, as a user: through the gateway Service's NodePort on the node.
	caller, admin := dial(t, d, d.Bundle.Caller), dial(t, d, d.Bundle.Administrator)
	var out bytes.Buffer
	if err := walkthrough.Run(ctx, walkthrough.Session{
		Caller: caller, Admin: admin, CallerIdentity: d.Bundle.Caller.Identity, AdminIdentity: d.Bundle.Administrator.Identity,
		Gateway: d.GatewayAddress, Namespace: d.Namespace, ExecutorNamespace: d.ExecutorNamespace, Where: "on the real node",
		Profile: devdeploy.Profile, Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"},
	}, &out); err != nil {
		t.Fatalf("walkthrough: %v\n%s", err, out.String())
	}
	t.Logf("walkthrough through %s:\n%s", d.GatewayAddress, out.String())

	renewInPlace(t, c, d, caller)

	// An upgrade that changes both Pod templates (an annotation): helm --wait and then
	// kubectl's rollout status say both rolled out; every Pod is then one of the new ones.
	start = time.Now()
	if err := d.Upgrade(ctx, "--set-string", "controller.podAnnotations.execplane\\.dev/rollout=2",
		"--set-string", "gateway.podAnnotations.execplane\\.dev/rollout=2"); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	status, err := d.WaitRolledOut(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kubectl rollout status: %v", status)
	t.Logf("upgrade rolled out in %s", time.Since(start).Round(time.Second))
	checkPods(t, d, "upgraded", "2")

	// The leader's eviction: the budget allows it, the other replica leads within the lease
	// and serves a control call through the gateway.
	// The upgrade replaced the leader too: its successor takes the released Lease at its
	// next try.
	kube := c.Kube()
	var leader string
	clustertest.Eventually(t, leaseDuration, "a controller leading after the upgrade", func() bool {
		leader = holder(t, c, d)
		return leader != ""
	})
	start = time.Now()
	if err := kube.PolicyV1().Evictions(d.Namespace).Evict(ctx, &policyv1.Eviction{
		ObjectMeta: metav1.ObjectMeta{Name: leader, Namespace: d.Namespace}}); err != nil {
		t.Fatalf("evicting the leader %s: %v", leader, err)
	}
	var took time.Duration
	clustertest.Eventually(t, 2*leaseDuration, "a new leader serving a control call", func() bool {
		if h := holder(t, c, d); h == "" || h == leader {
			return false
		}
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := caller.Ensure(cctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"},
			BindingID: "after-eviction", Profile: devdeploy.Profile, NoWait: true})
		if err != nil {
			t.Logf("ensure after the eviction: %v", err)
			return false
		}
		took = time.Since(start)
		return true
	})
	t.Logf("the leader %s evicted; the new leader %s served a control call after %s", leader, holder(t, c, d), took.Round(time.Millisecond))
	if took > leaseDuration {
		t.Errorf("a new leader served after %s, beyond the lease (%s)", took, leaseDuration)
	}
}

// checkPods checks that the release's Deployments each have two Pods Ready on the real
// node, from the pushed images, annotated rollout=want ("" for none).
func checkPods(t *testing.T, d *devdeploy.Deployment, when, want string) {
	t.Helper()
	err := d.CheckPods(t.Context(), d.Images, func(p corev1.Pod) error {
		if got := p.Annotations["execplane.dev/rollout"]; got != want {
			return fmt.Errorf("Pod %s annotated rollout=%q, want %q", p.Name, got, want)
		}
		return nil
	})
	if err != nil {
		t.Errorf("%s: %v", when, err)
	}
}

// holder is the Pod holding the controller's Lease ("" when none).
func holder(t *testing.T, c *devcluster.Cluster, d *devdeploy.Deployment) string {
	t.Helper()
	lease, err := c.Kube().CoordinationV1().Leases(d.Namespace).Get(t.Context(), d.Release+"-controller", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

// dial is who's client of the gateway, through its Service's NodePort.
func dial(t *testing.T, d *devdeploy.Deployment, who devbundle.Client) *client.Client {
	t.Helper()
	cl, err := client.Dial(client.Config{Address: d.GatewayAddress, ServerName: d.ServerName, CAFile: d.Bundle.CACert, CertFile: who.CertFile, KeyFile: who.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}

// diagnose describes the namespace's Pods and events, for a failure's log.
func diagnose(c *devcluster.Cluster, ns string) string {
	var b strings.Builder
	kubectl := filepath.Join(c.BinDir(), "kubectl")
	for _, args := range [][]string{
		{"get", "pods,services,endpointslices,leases", "-o", "wide"},
		{"describe", "pods"},
		{"logs", "--all-containers", "--prefix", "--tail=60", "-l", "app.kubernetes.io/instance=" + devdeploy.Release},
	} {
		out, _ := exec.Command(kubectl, append([]string{"--kubeconfig", c.Kubeconfig(), "--namespace", ns}, args...)...).CombinedOutput()
		fmt.Fprintf(&b, "--- kubectl %s ---\n%s\n", strings.Join(args, " "), out)
	}
	return b.String()
}

// renewalTimeout bounds a renewal's way to the gateways: cert-manager's issuance, the
// kubelet's swap of the projected volume (its sync period is 10 s here, about a minute by
// default), the controller's check and the mark's watch.
const renewalTimeout = 3 * time.Minute

// renewInPlace forces cert-manager to renew the server certificate and the gateway's
// control-API client certificate, as `cmctl renew` does, while a caller calls through the
// gateway to the controller (Ensure) on its open connection and on a new one each time: the
// gateways serve the renewed server certificate, the mark records it at the same
// generation, and no call fails.
func renewInPlace(t *testing.T, c *devcluster.Cluster, d *devdeploy.Deployment, caller *client.Client) {
	ctx := t.Context()
	ensure := func(cl *client.Client) error {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := cl.Ensure(cctx, client.EnsureRequest{Owner: client.Owner{Issuer: "https://idp.example", Subject: "alice"},
			BindingID: "renewal", Profile: devdeploy.Profile, NoWait: true})
		return err
	}
	var (
		mu     sync.Mutex
		calls  int
		failed []string
	)
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			select {
			case <-stop:
				return
			case <-time.After(250 * time.Millisecond):
			}
			errs := []error{ensure(caller)}
			fresh, err := client.Dial(client.Config{Address: d.GatewayAddress, ServerName: d.ServerName, CAFile: d.Bundle.CACert,
				CertFile: d.Bundle.Caller.CertFile, KeyFile: d.Bundle.Caller.KeyFile})
			if err == nil {
				err = ensure(fresh)
				fresh.Close()
			}
			errs = append(errs, err)
			mu.Lock()
			for _, err := range errs {
				calls++
				if err != nil {
					failed = append(failed, fmt.Sprintf("%s: %v", time.Now().Format(time.TimeOnly), err))
				}
			}
			mu.Unlock()
		}
	}()

	start := time.Now()
	before, after, err := d.Renew(ctx, devdeploy.ServerCertName)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Renew(ctx, devdeploy.ControlCertName); err != nil {
		t.Fatal(err)
	}
	issued := time.Since(start)
	old, renewed := leaf(t, before), leaf(t, after)
	if !renewed.NotBefore.After(old.NotBefore) || renewed.Issuer.String() != old.Issuer.String() ||
		!slices.Equal(renewed.DNSNames, old.DNSNames) || bytes.Equal(renewed.RawSubjectPublicKeyInfo, old.RawSubjectPublicKeyInfo) {
		t.Fatalf("cert-manager's renewal is not one in place with a new key: notBefore %s → %s, names %v → %v",
			old.NotBefore, renewed.NotBefore, old.DNSNames, renewed.DNSNames)
	}
	roots := x509.NewCertPool()
	ca, err := os.ReadFile(d.Bundle.CACert)
	if err != nil || !roots.AppendCertsFromPEM(ca) {
		t.Fatalf("the CA: %v", err)
	}
	// Both gateways, behind the Service: ten handshakes in a row present the renewed one.
	clustertest.Eventually(t, renewalTimeout, "the gateways serving the renewed certificate", func() bool {
		for range 10 {
			conn, err := tls.Dial("tcp", d.GatewayAddress, &tls.Config{ServerName: d.ServerName, RootCAs: roots, MinVersion: tls.VersionTLS13})
			if err != nil {
				return false
			}
			served := conn.ConnectionState().PeerCertificates[0]
			conn.Close()
			if !served.Equal(renewed) {
				return false
			}
		}
		return true
	})
	took := time.Since(start)
	mark, err := c.Kube().CoreV1().ConfigMaps(d.Namespace).Get(ctx, "execplane-security-high-water", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(renewed.Raw)
	if mark.Data["generation"] != "1" || !strings.Contains(mark.Data["serverLeaf"], hex.EncodeToString(sum[:])) {
		t.Errorf("the mark after the renewal: %v", mark.Data)
	}
	// Ten more calls after the switch (five rounds), then the tally.
	mu.Lock()
	switched := calls
	mu.Unlock()
	clustertest.Eventually(t, time.Minute, "ten calls after the switch", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return calls >= switched+10
	})
	close(stop)
	<-stopped
	mu.Lock()
	defer mu.Unlock()
	t.Logf("cert-manager renewed both certificates in %s; the gateways served the renewed one %s after the renewal began; %d calls, %d failed",
		issued.Round(time.Millisecond), took.Round(time.Millisecond), calls, len(failed))
	if len(failed) > 0 || calls == 0 {
		t.Errorf("calls across the renewal: %d of %d failed: %v", len(failed), calls, failed)
	}
}

// leaf parses the first certificate of a PEM bundle.
func leaf(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	if block == nil {
		t.Fatal("not a PEM certificate")
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	return cert
}
