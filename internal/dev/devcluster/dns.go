package devcluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/execplane/execplane/internal/dev/devimage"
)

// Cluster DNS, as a cluster's: CoreDNS (built from the Go module proxy, hack/coredns-tools)
// runs as a Deployment on the real node, its image pulled from the local registry, behind
// the kube-dns Service at the address the kubelet gives Pods (clusterDNSIP). It answers for
// the cluster's domain and nothing else: the local cluster's Pods have no route out.
const (
	// DNSBinEnv names the environment variable that points at the directory holding the DNS
	// server (hack/build-dns-bins.sh); when unset, that script finds or builds it.
	DNSBinEnv = "EXECPLANE_DNS_BIN"
	// DNSNamespace and DNSName are where CoreDNS runs and the Deployment's name.
	DNSNamespace = "kube-system"
	DNSName      = "coredns"
	// dnsPort is CoreDNS's port in its Pod: an unprivileged one, so that it runs as the
	// restricted profile's non-root user with no capability; the Service maps 53 onto it.
	dnsPort         = 1053
	dnsHealthPort   = 8080
	dnsReadyPort    = 8181
	dnsReadyTimeout = 2 * time.Minute
	// dnsUID is CoreDNS's user (the conventional non-root 65532).
	dnsUID = 65532
)

// corefile serves the cluster's domain and its reverse zones from the API (EndpointSlices
// and Services), with a health and a readiness endpoint for the kubelet's probes.
var corefile = fmt.Sprintf(`.:%d {
    errors
    health :%d
    ready :%d
    kubernetes %s in-addr.arpa ip6.arpa {
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 30
}
`, dnsPort, dnsHealthPort, dnsReadyPort, clusterDomain)

// FindDNSBinaries returns the directory of the cluster DNS server (coredns): $EXECPLANE_DNS_BIN
// when set, otherwise the output of hack/build-dns-bins.sh (built once, cached by version).
func FindDNSBinaries(ctx context.Context) (string, error) {
	dir, err := BinaryDir(ctx, DNSBinEnv, "build-dns-bins.sh", "the cluster DNS server")
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, "coredns")); err != nil {
		return "", fmt.Errorf("%w in %s: coredns (run hack/build-dns-bins.sh)", ErrBinariesMissing, dir)
	}
	return dir, nil
}

// dnsImage is CoreDNS alone: the static binary at /coredns, run as dnsUID.
func dnsImage(binDir string) (v1.Image, error) {
	bin, err := os.ReadFile(filepath.Join(binDir, "coredns"))
	if err != nil {
		return nil, fmt.Errorf("devcluster: %w", err)
	}
	return devimage.FilesImage([]devimage.File{{Path: "/coredns", Mode: 0o555, Content: bin}}, "COPY coredns /coredns",
		v1.Config{User: fmt.Sprintf("%d:%d", dnsUID, dnsUID), Entrypoint: []string{"/coredns"}})
}

// startDNS pushes CoreDNS's image to the local registry, creates its objects and waits for
// its Pod to be Ready on the real node. It returns the image reference the node pulled.
func (c *Cluster) startDNS(ctx context.Context, binDir string) (string, error) {
	img, err := dnsImage(binDir)
	if err != nil {
		return "", err
	}
	ref, err := c.PushImage(ctx, "execplane/coredns", "dev", img)
	if err != nil {
		return "", err
	}
	labels := map[string]string{"k8s-app": "kube-dns"}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: DNSName, Namespace: DNSNamespace}}
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "system:" + DNSName},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services", "namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "system:" + DNSName},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}},
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DNSName, Namespace: DNSNamespace}, Data: map[string]string{"Corefile": corefile}}
	probe := func(path string, port int) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: path, Port: intstr.FromInt(port)}},
			PeriodSeconds: 2, TimeoutSeconds: 2}
	}
	deploy := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: DNSName, Namespace: DNSNamespace, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](1),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					ServiceAccountName: sa.Name,
					// Its own resolver is the machine's: ClusterFirst would point it at itself.
					DNSPolicy:    corev1.DNSDefault,
					NodeSelector: map[string]string{RealNodeLabel: "true"},
					Tolerations:  []corev1.Toleration{{Key: RealNodeTaint, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](dnsUID), RunAsGroup: ptr.To[int64](dnsUID),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					TerminationGracePeriodSeconds: ptr.To[int64](2),
					Containers: []corev1.Container{{
						Name: "coredns", Image: ref, ImagePullPolicy: corev1.PullIfNotPresent,
						Args: []string{"-conf", "/etc/coredns/Corefile"},
						Ports: []corev1.ContainerPort{
							{Name: "dns", ContainerPort: dnsPort, Protocol: corev1.ProtocolUDP},
							{Name: "dns-tcp", ContainerPort: dnsPort, Protocol: corev1.ProtocolTCP},
						},
						ReadinessProbe: probe("/ready", dnsReadyPort),
						LivenessProbe:  probe("/health", dnsHealthPort),
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false), ReadOnlyRootFilesystem: ptr.To(true),
							Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: cm.Name}}}}},
				},
			},
		},
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-dns", Namespace: DNSNamespace, Labels: labels},
		Spec: corev1.ServiceSpec{
			ClusterIP: clusterDNSIP, Selector: labels,
			Ports: []corev1.ServicePort{
				{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt(dnsPort)},
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt(dnsPort)},
			},
		},
	}
	k := c.kube
	creates := []func() error{
		func() error {
			_, err := k.CoreV1().ServiceAccounts(DNSNamespace).Create(ctx, sa, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := k.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := k.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := k.CoreV1().ConfigMaps(DNSNamespace).Create(ctx, cm, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := k.CoreV1().Services(DNSNamespace).Create(ctx, svc, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := k.AppsV1().Deployments(DNSNamespace).Create(ctx, deploy, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range creates {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return "", fmt.Errorf("devcluster: cluster DNS: %w", err)
		}
	}
	err = poll(ctx, dnsReadyTimeout, func() (bool, error) {
		if err := c.procs.firstExited(); err != nil {
			return false, err
		}
		d, err := k.AppsV1().Deployments(DNSNamespace).Get(ctx, DNSName, metav1.GetOptions{})
		return err == nil && d.Status.ObservedGeneration == d.Generation && d.Status.ReadyReplicas == 1, nil
	}, "the cluster DNS server Ready")
	return ref, err
}
