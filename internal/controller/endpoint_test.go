package controller_test

import (
	"fmt"
	"net"
	"slices"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

// leaderService is the selector-less Service of the control API in the test's namespace.
const leaderService = "execplane-controller"

// publishing are the flags by which the chart has a replica publish itself while it leads:
// its Pod IP (a documentation address here: the API server refuses loopback endpoints, and
// nothing dials it) and its Pod's name.
func publishing(ip, pod string) []string {
	return []string{"--leader-service", leaderService, "--advertise-address", ip, "--pod-name", pod}
}

// published is the endpoint the Service's slice names (address, Pod, port), or why it names
// none.
func published(t *testing.T, kube kubernetes.Interface, ns string) (string, error) {
	t.Helper()
	s, err := kube.DiscoveryV1().EndpointSlices(ns).Get(t.Context(), leaderService, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if len(s.Endpoints) != 1 || len(s.Endpoints[0].Addresses) != 1 || len(s.Ports) != 1 {
		return "", fmt.Errorf("not one endpoint and one port: %+v", s)
	}
	e, p := s.Endpoints[0], s.Ports[0]
	if !ptr.Deref(e.Conditions.Ready, false) || e.TargetRef == nil || ptr.Deref(p.Name, "") != "control" ||
		s.Labels[discoveryv1.LabelServiceName] != leaderService || s.Labels[discoveryv1.LabelManagedBy] != "execplane-controller" {
		return "", fmt.Errorf("not a ready endpoint of the control port, labelled for the Service: %+v", s)
	}
	return fmt.Sprintf("%s %s %d", e.Addresses[0], e.TargetRef.Name, ptr.Deref(p.Port, 0)), nil
}

// leftEndpoints is the core/v1 Endpoints object the endpoints controller leaves when a
// Service's selector is removed (it is deprecated; the Kubernetes controllers still keep it).
//
//lint:ignore SA1019 the object an old chart's Service left behind
func leftEndpoints() *corev1.Endpoints {
	//lint:ignore SA1019 as above
	return &corev1.Endpoints{
		ObjectMeta: metav1.ObjectMeta{Name: leaderService},
		//lint:ignore SA1019 as above
		Subsets: []corev1.EndpointSubset{{Addresses: []corev1.EndpointAddress{{IP: "192.0.2.98"}},
			Ports: []corev1.EndpointPort{{Name: "control", Port: 9443}}}},
	}
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// endpointWrites counts the replica's writes to EndpointSlices.
func (r *replica) endpointWrites(t *testing.T) int {
	t.Helper()
	n := 0
	for req, count := range r.requests(t) {
		if req.resource == "endpointslices" && req.method != "GET" {
			n += count
		}
	}
	return n
}

// The leader publishes itself as the only endpoint of the control API's selector-less
// Service, on the real API server: right after it takes the Lease it writes the slice (its
// address, its Pod, its control port, ready) and removes what Kubernetes' controllers left
// from when the Service had a selector — a slice of the endpoint controller, and the
// Endpoints object the mirroring controller mirrors (with its mirror). Both replicas are
// ready, one as leader and one as standby; the standby never writes a slice. A slice changed
// behind the leader's back is put back. The leader stopped with SIGTERM releases the Lease
// and the standby takes over within a retry period, rewriting the slice to its own address.
func TestLeaderPublishesItsEndpoint(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx := t.Context()
	if _, err := c.InstallCRDs(ctx, "../../deploy/helm/execplane/files/crds"); err != nil {
		t.Fatal(err)
	}
	kube := c.Kube()
	// The chart's Service, and what an upgrade from a chart with a selector leaves.
	if _, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: leaderService},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "control", Port: 9443, TargetPort: intstr.FromInt32(9443)}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: leaderService + "-x7k2p", Labels: map[string]string{
			discoveryv1.LabelServiceName: leaderService, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.99"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("control"), Port: ptr.To[int32](9443)}},
	}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &stale, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Endpoints(ns).Create(ctx, leftEndpoints(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	others := func() []string {
		list, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + leaderService})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, s := range list.Items {
			if s.Name != leaderService {
				names = append(names, s.Name+" ("+s.Labels[discoveryv1.LabelManagedBy]+")")
			}
		}
		return names
	}
	// The cluster's mirroring controller mirrors the Endpoints object, as it does after an
	// upgrade: the leftovers are real.
	clustertest.Eventually(t, 30*time.Second, "the Endpoints object mirrored", func() bool { return len(others()) == 2 })

	a := startReplicaWith(t, c.Kubeconfig(), ns, "replica-a", slices.Concat(fastLease, publishing("192.0.2.11", "pod-a")))
	clustertest.Eventually(t, 30*time.Second, "replica-a leads", a.leads)
	wantA := "192.0.2.11 pod-a " + portOf(t, a.listen)
	if got, err := published(t, kube, ns); got != wantA {
		t.Fatalf("the leader's endpoint: %q (%v), want %q", got, err, wantA)
	}
	clustertest.Eventually(t, 30*time.Second, "the leftovers removed", func() bool { return len(others()) == 0 })
	if _, err := kube.CoreV1().Endpoints(ns).Get(ctx, leaderService, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the mirrored Endpoints object is left: %v", err)
	}

	b := startReplicaWith(t, c.Kubeconfig(), ns, "replica-b", slices.Concat(fastLease, publishing("192.0.2.12", "pod-b")))
	clustertest.Eventually(t, 30*time.Second, "replica-b a ready standby", func() bool { return b.ready() && b.state() == "standby" })
	if !a.ready() || !a.leads() {
		t.Fatalf("the leader: ready %v, state %q", a.ready(), a.state())
	}

	// A slice changed behind the leader's back is put back.
	s, err := kube.DiscoveryV1().EndpointSlices(ns).Get(ctx, leaderService, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Endpoints[0].Addresses = []string{"192.0.2.50"}
	if _, err := kube.DiscoveryV1().EndpointSlices(ns).Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 10*time.Second, "the leader's endpoint put back", func() bool {
		got, _ := published(t, kube, ns)
		return got == wantA
	})
	if n := b.endpointWrites(t); n != 0 {
		t.Fatalf("the standby wrote EndpointSlices %d times", n)
	}

	// Evicted: SIGTERM releases the Lease, the standby takes over within a retry period
	// (fastLease: 200 ms, jittered) — not a lease duration — and publishes itself.
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	wantB := "192.0.2.12 pod-b " + portOf(t, b.listen)
	clustertest.Eventually(t, 20*time.Second, "replica-b publishes itself", func() bool {
		got, _ := published(t, kube, ns)
		return got == wantB
	})
	t.Logf("the endpoint moved %s after the leader's SIGTERM", time.Since(stopped).Round(10*time.Millisecond))
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("the old leader's SIGTERM: exit %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the old leader did not stop on SIGTERM")
	}
	clustertest.Eventually(t, 20*time.Second, "replica-b leads, ready", func() bool { return b.leads() && b.ready() })
	if got := others(); len(got) != 0 {
		t.Errorf("other slices of the Service: %v", got)
	}
	if b.endpointWrites(t) == 0 {
		t.Error("the new leader's slice write was not counted")
	}
}
