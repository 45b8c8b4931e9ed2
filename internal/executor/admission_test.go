package executor

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
)

func TestMain(m *testing.M) { os.Exit(clustertest.Main(m, clustertest.Options{})) }

// A namespace enforcing Pod Security "restricted" admits the built Pod and refuses a variant
// breaking each restriction. Server-side dry run: admission runs in full, nothing persists.
func TestPodSecurityRestrictedAdmitsTheExecutorPod(t *testing.T) {
	c := clustertest.Cluster(t)
	ns := clustertest.Namespace(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	reg := testProfiles(t)
	env := testEnvironment()
	env.Namespace = ns
	// The full profile names a RuntimeClass; the RuntimeClass admission plugin wants it to exist.
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: "gvisor"}, Handler: "runsc"}
	if _, err := c.Kube().NodeV1().RuntimeClasses().Create(ctx, rc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, name := range reg.Names() {
		entry, _ := reg.Get(name)
		pod, err := Pod(env, entry, PodOptions{ServiceAccount: "default"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Kube().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
			t.Fatalf("profile %s: the restricted namespace refused the executor Pod: %v", name, err)
		}
	}
	entry, _ := reg.Get("minimal")
	variants := map[string]func(*corev1.Pod){
		"privileged":               func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Privileged = ptr.To(true) },
		"privilege escalation":     func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.AllowPrivilegeEscalation = ptr.To(true) },
		"capabilities not dropped": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.Capabilities = nil },
		"capability added": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.Capabilities.Add = []corev1.Capability{"NET_RAW"}
		},
		"runs as root": func(p *corev1.Pod) { p.Spec.SecurityContext.RunAsUser = ptr.To[int64](0) },
		"runAsNonRoot false": func(p *corev1.Pod) {
			p.Spec.SecurityContext.RunAsNonRoot = ptr.To(false)
			p.Spec.Containers[0].SecurityContext.RunAsNonRoot = nil
		},
		"seccomp unconfined": func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.SeccompProfile.Type = corev1.SeccompProfileTypeUnconfined
		},
		"no seccomp profile": func(p *corev1.Pod) {
			p.Spec.SecurityContext.SeccompProfile = nil
			p.Spec.Containers[0].SecurityContext.SeccompProfile = nil
		},
		"host network": func(p *corev1.Pod) { p.Spec.HostNetwork = true },
		"host PID":     func(p *corev1.Pod) { p.Spec.HostPID = true },
		"hostPath volume": func(p *corev1.Pod) {
			p.Spec.Volumes[1].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		},
		"host port": func(p *corev1.Pod) {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 80}}
		},
		"unmasked /proc": func(p *corev1.Pod) { p.Spec.Containers[0].SecurityContext.ProcMount = ptr.To(corev1.UnmaskedProcMount) },
	}
	for name, mutate := range variants {
		t.Run(name, func(t *testing.T) {
			pod, err := Pod(env, entry, PodOptions{ServiceAccount: "default"})
			if err != nil {
				t.Fatal(err)
			}
			mutate(pod)
			_, err = c.Kube().CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
				t.Fatalf("variant admitted (or failed otherwise): %v", err)
			}
			if apierrors.IsForbidden(err) && !strings.Contains(err.Error(), "PodSecurity") {
				t.Fatalf("refused, but not by Pod Security: %v", err)
			}
		})
	}
}
