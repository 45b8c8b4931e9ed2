package devcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/execplane/execplane/internal/dev/csidriver"
)

// CSI on the real node (RealNodeOptions.CSI): the project's host-path CSI driver
// (internal/dev/csidriver) in this process, registered with the node's kubelet through its
// plugins_registry, and the upstream sidecars beside it as processes — csi-provisioner,
// csi-snapshotter and snapshot-controller (hack/build-csi-bins.sh) — with the VolumeSnapshot
// CRDs, a CSIDriver, a storage class and a snapshot class. No Pod of it runs privileged: the
// driver's mounts are made by this (root) process in the node's mount namespace.
const (
	// CSIBinEnv names the environment variable that points at the sidecars' directory;
	// when unset, hack/build-csi-bins.sh finds or builds it.
	CSIBinEnv = "EXECPLANE_CSI_BIN"
	// CSIStorageClassName provisions the driver's volumes; CSISnapshotClassName snapshots them.
	CSIStorageClassName  = "csi-hostpath"
	CSISnapshotClassName = "csi-hostpath-snapclass"
	// CSIDriverName is the driver's name.
	CSIDriverName = csidriver.DefaultName
	// csiRegisterTimeout bounds the kubelet's registration of the driver.
	csiRegisterTimeout = 90 * time.Second
	// csiCallTimeout is the sidecars' timeout of one CSI call: a snapshot or a restore copies
	// the volume inside it.
	csiCallTimeout = "--timeout=5m"
)

// csiSidecars are the programs run from the sidecars' directory.
var csiSidecars = []string{"csi-provisioner", "csi-snapshotter", "snapshot-controller"}

// volumeSnapshotClasses is the VolumeSnapshotClass resource.
var volumeSnapshotClasses = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotclasses"}

// FindCSIBinaries returns the directory of the CSI sidecars, csi-sanity and the
// VolumeSnapshot CRDs (crd/): $EXECPLANE_CSI_BIN when set, otherwise the output of
// hack/build-csi-bins.sh (built once, cached by version).
func FindCSIBinaries(ctx context.Context) (string, error) {
	dir, err := BinaryDir(ctx, CSIBinEnv, "build-csi-bins.sh", "the CSI sidecars")
	if err != nil {
		return "", err
	}
	for _, name := range append(slices.Clone(csiSidecars), "csi-sanity", "crd/snapshot.storage.k8s.io_volumesnapshots.yaml") {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("%w in %s: %s (run hack/build-csi-bins.sh)", ErrBinariesMissing, dir, name)
		}
	}
	return dir, nil
}

// startCSI starts the driver and its sidecars on the ready real node and returns once the
// kubelet has registered the driver.
func (c *Cluster) startCSI(ctx, bg context.Context) error {
	n := c.realNode
	bin, err := FindCSIBinaries(ctx)
	if err != nil {
		return err
	}
	// The ledger names the sidecars before they run: a crash leaves none behind.
	n.ledger.CSIBinDir = bin
	if err := n.ledger.write(); err != nil {
		return err
	}
	if _, err := c.InstallCRDs(ctx, filepath.Join(bin, "crd")); err != nil {
		return err
	}
	if err := c.createCSIObjects(ctx); err != nil {
		return err
	}
	driver, err := csidriver.New(csidriver.Options{NodeID: RealNodeName, StateDir: filepath.Join(n.dir, "csi-hostpath"),
		Logf: c.opts.Logf})
	if err != nil {
		return err
	}
	kubeletDir := filepath.Join(n.dir, "kubelet")
	socket := filepath.Join(kubeletDir, "plugins", CSIDriverName, "csi.sock")
	serve := func(name string, f func() error) {
		go func() {
			if err := f(); err != nil {
				c.opts.Logf("devcluster: the CSI driver's %s stopped: %v", name, err)
			}
		}()
	}
	serve("service", func() error { return driver.Serve(bg, socket) })
	if err := waitForSocket(ctx, socket); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"csi-provisioner", "--csi-address=" + socket, csiCallTimeout},
		{"csi-snapshotter", "--csi-address=" + socket, csiCallTimeout},
		{"snapshot-controller"},
	} {
		if _, err := n.procs.start(n.logDir, args[0], filepath.Join(bin, args[0]),
			append(args[1:], "--kubeconfig="+c.kubeconfig, "--v=2")...); err != nil {
			return err
		}
	}
	serve("registration", func() error {
		return driver.ServeRegistration(bg, filepath.Join(kubeletDir, "plugins_registry"), socket, func(ok bool, reason string) {
			if !ok {
				c.opts.Logf("devcluster: the kubelet refused the CSI driver: %s", reason)
			}
		})
	})
	return c.waitCSIRegistered(ctx)
}

// createCSIObjects creates the CSIDriver, the storage class and the snapshot class.
func (c *Cluster) createCSIObjects(ctx context.Context) error {
	file := storagev1.FSGroupPolicy(storagev1.FileFSGroupPolicy)
	objs := []func() error{
		func() error {
			_, err := c.kube.StorageV1().CSIDrivers().Create(ctx, &storagev1.CSIDriver{
				ObjectMeta: metav1.ObjectMeta{Name: CSIDriverName},
				Spec: storagev1.CSIDriverSpec{AttachRequired: ptr.To(false), PodInfoOnMount: ptr.To(false), FSGroupPolicy: &file,
					VolumeLifecycleModes: []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}},
			}, metav1.CreateOptions{})
			return err
		},
		func() error {
			_, err := c.kube.StorageV1().StorageClasses().Create(ctx, &storagev1.StorageClass{
				ObjectMeta: metav1.ObjectMeta{Name: CSIStorageClassName}, Provisioner: CSIDriverName,
				ReclaimPolicy: ptr.To(corev1.PersistentVolumeReclaimDelete), VolumeBindingMode: ptr.To(storagev1.VolumeBindingImmediate),
			}, metav1.CreateOptions{})
			return err
		},
	}
	for _, create := range objs {
		if err := create(); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	dyn, err := dynamic.NewForConfig(c.restConfig)
	if err != nil {
		return err
	}
	class := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshotClass",
		"metadata": map[string]any{"name": CSISnapshotClassName}, "driver": CSIDriverName, "deletionPolicy": "Delete",
	}}
	// The CRD was just established: its resource may take a moment to be served.
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(volumeSnapshotClasses).Create(ctx, class, metav1.CreateOptions{})
		return err == nil || apierrors.IsAlreadyExists(err), nil
	})
}

// waitCSIRegistered waits for the node's CSINode to list the driver (the kubelet writes it
// once registration succeeded).
func (c *Cluster) waitCSIRegistered(ctx context.Context) error {
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, csiRegisterTimeout, true, func(ctx context.Context) (bool, error) {
		node, err := c.kube.StorageV1().CSINodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return slices.ContainsFunc(node.Spec.Drivers, func(d storagev1.CSINodeDriver) bool { return d.Name == CSIDriverName }), nil
	})
	if err != nil {
		return fmt.Errorf("devcluster: the kubelet did not register the CSI driver within %s: %w", csiRegisterTimeout, err)
	}
	return nil
}

func waitForSocket(ctx context.Context, path string) error {
	return wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		_, err := os.Stat(path)
		return err == nil, nil
	})
}

// The VolumeSnapshot and VolumeSnapshotContent resources.
var (
	volumeSnapshots        = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshots"}
	volumeSnapshotContents = schema.GroupVersionResource{Group: "snapshot.storage.k8s.io", Version: "v1", Resource: "volumesnapshotcontents"}
)

// ClaimDir is the directory on this machine that holds a bound claim's files: a volume of
// the local provisioner's class or of the CSI driver. For tests that check a workspace on
// the node.
func (c *Cluster) ClaimDir(ctx context.Context, namespace, claim string) (string, error) {
	pvc, err := c.kube.CoreV1().PersistentVolumeClaims(namespace).Get(ctx, claim, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pvc.Spec.VolumeName == "" {
		return "", fmt.Errorf("devcluster: claim %s/%s is not bound", namespace, claim)
	}
	pv, err := c.kube.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if pv.Spec.CSI == nil {
		return filepath.Join(c.opts.StateDir, "node", "volumes", pv.Name), nil
	}
	if pv.Spec.CSI.Driver != CSIDriverName || c.realNode == nil {
		return "", fmt.Errorf("devcluster: volume %s is not this cluster's CSI driver's", pv.Name)
	}
	return csidriver.VolumeDir(filepath.Join(c.realNode.dir, "csi-hostpath"), pv.Spec.CSI.VolumeHandle), nil
}

// VolumeSnapshotDir is the directory on this machine that holds a ready VolumeSnapshot's
// files (the CSI driver's copy).
func (c *Cluster) VolumeSnapshotDir(ctx context.Context, namespace, name string) (string, error) {
	if c.realNode == nil {
		return "", errors.New("devcluster: no real node, so no CSI driver")
	}
	dyn, err := dynamic.NewForConfig(c.restConfig)
	if err != nil {
		return "", err
	}
	vs, err := dyn.Resource(volumeSnapshots).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	content, _, _ := unstructured.NestedString(vs.Object, "status", "boundVolumeSnapshotContentName")
	if content == "" {
		return "", fmt.Errorf("devcluster: VolumeSnapshot %s/%s is not bound to a content", namespace, name)
	}
	vsc, err := dyn.Resource(volumeSnapshotContents).Get(ctx, content, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	handle, _, _ := unstructured.NestedString(vsc.Object, "status", "snapshotHandle")
	if handle == "" {
		return "", fmt.Errorf("devcluster: VolumeSnapshotContent %s has no snapshot handle", content)
	}
	return csidriver.SnapshotDir(filepath.Join(c.realNode.dir, "csi-hostpath"), handle), nil
}
