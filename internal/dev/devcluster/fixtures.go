package devcluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/util/retry"
)

const (
	// kwokNodeAnnotation marks the Nodes KWOK manages.
	kwokNodeAnnotation = "kwok.x-k8s.io/node"
	// StorageClassName is the default StorageClass: the in-process provisioner creates a
	// volume per claim and kube-controller-manager binds them.
	StorageClassName = "kwok-volume"
	// kwokProvisioner is the StorageClass's provisioner name (provisioner.go).
	kwokProvisioner = "kwok.x-k8s.io/volume"
	// NodeLabel is set on every fake node, for node selectors in tests.
	NodeLabel = "execplane.dev/devcluster-node"
	// PodSecurityEnforceLabel enforces a Pod Security level on a namespace.
	PodSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"
)

// installFixtures creates the StorageClass and the fake Nodes.
func (c *Cluster) installFixtures(ctx context.Context) error {
	bind := storagev1.VolumeBindingImmediate
	reclaim := corev1.PersistentVolumeReclaimDelete
	sc := &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{
			Name:        StorageClassName,
			Annotations: map[string]string{"storageclass.kubernetes.io/is-default-class": "true"},
		},
		Provisioner:       kwokProvisioner,
		ReclaimPolicy:     &reclaim,
		VolumeBindingMode: &bind,
	}
	if _, err := c.kube.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("devcluster: storage class: %w", err)
	}
	for _, name := range c.nodeNames {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Labels:      map[string]string{NodeLabel: "true", "type": "kwok", corev1.LabelOSStable: "linux", corev1.LabelHostname: name},
			Annotations: map[string]string{kwokNodeAnnotation: "fake"},
		}}
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("devcluster: node %s: %w", name, err)
		}
	}
	return nil
}

// waitReady waits until every node is Ready with no taints (kube-controller-manager removes
// the not-ready taint) and the default ServiceAccount exists (kube-controller-manager runs).
func (c *Cluster) waitReady(ctx context.Context) error {
	timeout := clusterReadyTimeout
	if c.realNode != nil {
		timeout = realNodeReadyTimeout
	}
	return poll(ctx, timeout, func() (bool, error) {
		if err := c.procs.firstExited(); err != nil {
			return false, err
		}
		for _, name := range c.nodeNames {
			node, err := c.kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(node.Spec.Taints) > 0 || !nodeReady(node) {
				return false, nil
			}
		}
		if c.realNode != nil {
			if ok, err := c.realNode.ready(ctx, c); !ok || err != nil {
				return false, err
			}
		}
		_, err := c.kube.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}, "nodes Ready and untainted, kube-controller-manager running")
}

func nodeReady(node *corev1.Node) bool {
	for _, cond := range node.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CreateNamespace creates a namespace named prefix-<random> that enforces Pod Security
// "restricted", with its default ServiceAccount (created here rather than waiting for
// kube-controller-manager, since Pods cannot be admitted without it).
func (c *Cluster) CreateNamespace(ctx context.Context, prefix string) (string, error) {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		GenerateName: prefix + "-",
		Labels: map[string]string{
			PodSecurityEnforceLabel:                      "restricted",
			"pod-security.kubernetes.io/enforce-version": "latest",
		},
	}}
	created, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
	if _, err := c.kube.CoreV1().ServiceAccounts(created.Name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	return created.Name, nil
}

// InstallCRDs creates (or updates) every CustomResourceDefinition in the YAML files of dir
// and waits until each is Established.
func (c *Cluster) InstallCRDs(ctx context.Context, dir string) ([]string, error) {
	client, err := apiextensionsclient.NewForConfig(c.restConfig)
	if err != nil {
		return nil, err
	}
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, file := range files {
		f, err := os.Open(file)
		if err != nil {
			return nil, err
		}
		dec := yaml.NewYAMLOrJSONDecoder(f, 4096)
		for {
			var crd apiextensionsv1.CustomResourceDefinition
			if err := dec.Decode(&crd); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				f.Close()
				return nil, fmt.Errorf("%s: %w", file, err)
			}
			if crd.Name == "" {
				continue
			}
			// Tests in parallel install the same CRDs: a lost race is retried as an update.
			raced := func(err error) bool { return apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) }
			err := retry.OnError(retry.DefaultRetry, raced, func() error {
				existing, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
				switch {
				case apierrors.IsNotFound(err):
					_, err = client.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, &crd, metav1.CreateOptions{})
				case err == nil:
					crd.ResourceVersion = existing.ResourceVersion
					_, err = client.ApiextensionsV1().CustomResourceDefinitions().Update(ctx, &crd, metav1.UpdateOptions{})
				}
				return err
			})
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("%s: %s: %w", file, crd.Name, err)
			}
			names = append(names, crd.Name)
		}
		f.Close()
	}
	err = poll(ctx, clusterReadyTimeout, func() (bool, error) {
		for _, name := range names {
			crd, err := client.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			established := slices.ContainsFunc(crd.Status.Conditions, func(c apiextensionsv1.CustomResourceDefinitionCondition) bool {
				return c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue
			})
			if !established {
				return false, nil
			}
		}
		return true, nil
	}, "CRDs established: "+strings.Join(names, ", "))
	return names, err
}
