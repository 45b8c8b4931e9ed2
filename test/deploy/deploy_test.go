// Package deploy_test installs the chart as an operator does, on the local cluster's real
// node (internal/dev/devdeploy): images built in Go and pulled from the cluster's registry,
// `helm install --wait`, the controllers and gateways as Pods behind Services, a caller
// through the gateway's NodePort; then a `helm upgrade` that changes both Pod templates
// rolls to completion, and the eviction API evicts the leading controller.
package deploy_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
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
	for _, p := range []string{"gateway", "controller", "helper"} {
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

// The chart installed with helm on the real node serves a caller through the gateway's
// Service; an upgrade that changes both Pod templates rolls to completion; the leader's
// eviction hands the control API to the other replica within the lease.
func TestChartOnTheRealNode(t *testing.T) {
	if unavailable != nil {
		precondition.Missing(t, "the real node: %v", unavailable)
	}
	c := clustertest.Cluster(t)
	ctx := t.Context()
	var helmLog clustertest.SyncBuffer
	start := time.Now()
	d, err := devdeploy.Install(ctx, devdeploy.Options{Cluster: c, Helm: helmBin, Chart: chartDir, Dir: t.TempDir(), Images: images, Log: &helmLog})
	if err != nil {
		t.Fatalf("install: %v\n%s", err, diagnose(c, devdeploy.Namespace))
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("helm:\n%s\n%s", helmLog.String(), diagnose(c, d.Namespace))
		}
	})

	t.Logf("images pushed and helm install --wait done in %s", time.Since(start).Round(time.Millisecond))

	// helm --wait returned: the four Pods run on the real node, from the pushed digests, as
	// does the cluster's DNS server they resolve the controller's Service name with.
	checkPods(t, c, d, "installed", "")
	dns, err := c.Kube().CoreV1().Pods(devcluster.DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dns.Items) != 1 {
		t.Fatalf("the DNS server's Pods: %v (%v)", dns, err)
	}
	checkPod(t, dns.Items[0], c.DNSImage())

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
	checkPods(t, c, d, "upgraded", "2")

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
func checkPods(t *testing.T, c *devcluster.Cluster, d *devdeploy.Deployment, when, want string) {
	t.Helper()
	for _, name := range []string{"controller", "gateway"} {
		pods, err := c.Kube().CoreV1().Pods(d.Namespace).List(t.Context(), metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=" + name + ",app.kubernetes.io/instance=" + d.Release})
		if err != nil {
			t.Fatal(err)
		}
		var live []corev1.Pod
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				live = append(live, p)
			}
		}
		if len(live) != 2 {
			t.Fatalf("%s: %d %s Pods, want 2", when, len(live), name)
		}
		for _, p := range live {
			checkPod(t, p, d.Images[name])
			if got := p.Annotations["execplane.dev/rollout"]; got != want {
				t.Errorf("%s: Pod %s annotated rollout=%q, want %q", when, p.Name, got, want)
			}
		}
	}
}

// checkPod checks that p is Ready on the real node and runs image (the kubelet's imageID,
// the registry's digest).
func checkPod(t *testing.T, p corev1.Pod, image string) {
	t.Helper()
	if p.Spec.NodeName != devcluster.RealNodeName {
		t.Errorf("Pod %s runs on %q, not the real node", p.Name, p.Spec.NodeName)
	}
	ready := false
	for _, cond := range p.Status.Conditions {
		ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
	}
	if !ready {
		t.Errorf("Pod %s is not Ready: %+v", p.Name, p.Status.Conditions)
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ImageID != image {
		t.Errorf("Pod %s runs %v, want image %s", p.Name, p.Status.ContainerStatuses, image)
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
