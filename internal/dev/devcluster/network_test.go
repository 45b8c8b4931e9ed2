package devcluster_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

// webPod is a Pod on the real node serving "hello from <name>" over HTTP on port 8080
// (busybox's httpd, as the executor image's non-root user).
func webPod(name string) *corev1.Pod {
	pod := realExecutorPod(name, "")
	pod.Labels = map[string]string{"app": "web"}
	pod.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}
	pod.Spec.Containers[0].Command = []string{"sh", "-c",
		"echo hello from " + name + " > /workspace/index.html && exec httpd -f -p 8080 -h /workspace"}
	pod.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 8080}}
	return pod
}

// The real node is a node as Services need one: a Pod on it reaches a ClusterIP Service
// whose endpoint is another Pod on the same bridge, and itself through its own Service
// (hairpin), and the API server through the kubernetes Service; the machine reaches a
// NodePort on the node's address; Pods resolve Service names through the cluster DNS, whose
// server runs on the node from an image pulled from the local registry. kube-proxy (nftables
// mode) routes all of it; after Stop its tables, the forwarding settings and the bridge's
// gateway address are gone.
func TestRealNodeRoutesServicesAndResolvesTheirNames(t *testing.T) {
	node := realNodeOptions(t)
	node.ClusterDNS = true
	ctx := clustertest.Context(t, realNodeStartTimeout)
	c, stop := startCompared(t, ctx, node)
	ns, err := c.CreateNamespace(ctx, "net")
	if err != nil {
		t.Fatal(err)
	}
	server := runPod(t, c, ns, webPod("server"))
	client := runPod(t, c, ns, webPod("client"))
	for _, p := range []*corev1.Pod{server, client} {
		if p.Spec.NodeName != devcluster.RealNodeName {
			t.Fatalf("%s scheduled onto %q, not the real node", p.Name, p.Spec.NodeName)
		}
	}
	svc, err := c.Kube().CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{"app": "web"},
			Ports:    []corev1.ServicePort{{Port: 80, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The two Pods answer for the one Service: a few calls from each reach both (the
	// client through the Service to itself is the hairpin case). Busybox's wget crashes on
	// its own -T: timeout bounds it.
	// Routes appear within kube-proxy's sync after the endpoints do: a minute bounds each.
	wait := clustertest.Context(t, time.Minute)
	clusterURL := "http://" + svc.Spec.ClusterIP + "/index.html"
	for _, from := range []string{client.Name, server.Name} {
		seen := map[string]bool{}
		waitFor(t, wait, from+" reaches both Pods through "+clusterURL, func() bool {
			r := execIn(t, c, ns, from, websocket, "", "timeout", "3", "wget", "-q", "-O", "-", clusterURL)
			if r.err == nil && r.exitCode == 0 {
				seen[strings.TrimSpace(r.stdout)] = true
			}
			return seen["hello from server"] && seen["hello from client"]
		})
	}
	// The API server through the kubernetes Service's address. Busybox's TLS client cannot
	// complete a handshake with it (no cipher suite in common), so the request is plain
	// HTTP on the TLS port, which Go's HTTPS server answers in words of its own.
	waitFor(t, wait, "a Pod reaches the API server through the kubernetes Service", func() bool {
		r := execIn(t, c, ns, client.Name, websocket, "", "sh", "-c", `printf 'GET /readyz HTTP/1.0\r\n\r\n' | timeout 3 nc 10.0.0.1 443`)
		return r.err == nil && strings.Contains(r.stdout, "Client sent an HTTP request to an HTTPS server")
	})
	// The DNS server runs on the real node, from the image pushed to the local registry.
	dns, err := c.Kube().CoreV1().Pods(devcluster.DNSNamespace).List(ctx, metav1.ListOptions{LabelSelector: "k8s-app=kube-dns"})
	if err != nil || len(dns.Items) != 1 {
		t.Fatalf("the DNS server's Pods: %v (%v)", dns, err)
	}
	if p := dns.Items[0]; p.Spec.NodeName != devcluster.RealNodeName || len(p.Status.ContainerStatuses) != 1 ||
		p.Status.ContainerStatuses[0].ImageID != c.DNSImage() {
		t.Fatalf("the DNS server runs on %q from %v, want %s from %s", p.Spec.NodeName, p.Status.ContainerStatuses, devcluster.RealNodeName, c.DNSImage())
	}
	for name, want := range map[string]string{
		"kubernetes.default.svc.cluster.local": "10.0.0.1",
		"web." + ns + ".svc.cluster.local":     svc.Spec.ClusterIP,
	} {
		waitFor(t, wait, "a Pod resolves "+name, func() bool {
			r := execIn(t, c, ns, client.Name, websocket, "", "nslookup", name)
			return r.err == nil && r.exitCode == 0 && strings.Contains(r.stdout, "Address: "+want)
		})
	}
	// A short name, through the search path the kubelet writes.
	waitFor(t, wait, "a Pod reaches http://web/", func() bool {
		r := execIn(t, c, ns, client.Name, websocket, "", "timeout", "3", "wget", "-q", "-O", "-", "http://web/index.html")
		return r.err == nil && strings.HasPrefix(r.stdout, "hello from ")
	})
	nodePortURL := fmt.Sprintf("http://%s:%d/index.html", c.RealNodeIP(), svc.Spec.Ports[0].NodePort)
	waitFor(t, wait, "the machine reaches "+nodePortURL, func() bool {
		body, err := httpGet(ctx, nodePortURL)
		return err == nil && strings.HasPrefix(body, "hello from ")
	})
	stop()
}

func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<10))
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(body), err
}
