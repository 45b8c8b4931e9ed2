package devdeploy

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster"
)

// CheckPods checks that each of the release's Deployments has two live Pods, each as
// CheckPod has it with images[component] ("controller", "gateway"), and that each passes
// also (when set): every difference, joined.
func (d *Deployment) CheckPods(ctx context.Context, images map[string]string, also func(corev1.Pod) error) error {
	var errs []error
	for _, name := range []string{"controller", "gateway"} {
		pods, err := d.opts.Cluster.Kube().CoreV1().Pods(d.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=" + name + ",app.kubernetes.io/instance=" + d.Release})
		if err != nil {
			return fmt.Errorf("devdeploy: %w", err)
		}
		live := 0
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil {
				continue
			}
			live++
			errs = append(errs, CheckPod(p, images[name]))
			if also != nil {
				errs = append(errs, also(p))
			}
		}
		if live != 2 {
			errs = append(errs, fmt.Errorf("%d %s Pods, want 2", live, name))
		}
	}
	return errors.Join(errs...)
}

// CheckPod checks that p is Ready on the real node and runs image (the kubelet's imageID,
// the registry's digest).
func CheckPod(p corev1.Pod, image string) error {
	var errs []error
	if p.Spec.NodeName != devcluster.RealNodeName {
		errs = append(errs, fmt.Errorf("pod %s runs on %q, not the real node", p.Name, p.Spec.NodeName))
	}
	ready := false
	for _, cond := range p.Status.Conditions {
		ready = ready || cond.Type == corev1.PodReady && cond.Status == corev1.ConditionTrue
	}
	if !ready {
		errs = append(errs, fmt.Errorf("pod %s is not Ready: %+v", p.Name, p.Status.Conditions))
	}
	if len(p.Status.ContainerStatuses) != 1 || p.Status.ContainerStatuses[0].ImageID != image {
		errs = append(errs, fmt.Errorf("pod %s runs %v, want image %s", p.Name, p.Status.ContainerStatuses, image))
	}
	return errors.Join(errs...)
}
