package devcluster

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// provisionerWorkers process claims and volumes in parallel; the API server, not this
// loop, should bound how fast claims bind.
const provisionerWorkers = 8

// provisionedBy marks the volumes this provisioner created (and may delete).
const provisionedBy = "pv.kubernetes.io/provisioned-by"

// provisioner is the local cluster's external provisioner for the kwok-volume class, doing
// what a CSI external-provisioner does: for each unbound claim of the class it creates a
// PersistentVolume pre-bound to the claim (claimRef with the claim's UID), and
// kube-controller-manager's PV controller completes the binding; a released volume with
// the Delete policy is deleted. KWOK's volume stages did the same with CEL selectors
// re-evaluated over every object, which made binding quadratic in the number of claims.
type provisioner struct {
	kube kubernetes.Interface
	// dir holds the volumes' directories.
	dir    string
	claims cache.Indexer
	vols   cache.Indexer
	queue  workqueue.TypedRateLimitingInterface[string]
	// delay holds a claim back this long after it was first seen (Options.VolumeBindDelay).
	delay     time.Duration
	mu        sync.Mutex
	firstSeen map[types.UID]time.Time
}

// executorUID and executorGID are the executor Pods' fixed identity (executor.RunAsUser and
// RunAsGroup, repeated: internal/executor's own tests run on this cluster).
const executorUID, executorGID = 65532, 65532

// runProvisioner starts the provisioner; it stops when ctx ends.
// Volumes are directories beneath dir: the node exec endpoint maps a claim to
// dir/<PV name>, and the real node's kubelet mounts the same path (hostPath).
func runProvisioner(ctx context.Context, kube kubernetes.Interface, dir string, delay time.Duration) error {
	factory := informers.NewSharedInformerFactory(kube, 0)
	claimInf := factory.Core().V1().PersistentVolumeClaims().Informer()
	volInf := factory.Core().V1().PersistentVolumes().Informer()
	p := &provisioner{
		kube: kube, dir: dir, claims: claimInf.GetIndexer(), vols: volInf.GetIndexer(),
		queue: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]()),
		delay: delay, firstSeen: map[types.UID]time.Time{},
	}
	enqueue := func(prefix string) func(any) {
		return func(obj any) {
			if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
				p.queue.Add(prefix + key)
			}
		}
	}
	for inf, prefix := range map[cache.SharedIndexInformer]string{claimInf: "pvc/", volInf: "pv/"} {
		add := enqueue(prefix)
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: add, UpdateFunc: func(_, n any) { add(n) }}); err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), claimInf.HasSynced, volInf.HasSynced) {
		return errors.New("devcluster: provisioner caches did not sync")
	}
	for range provisionerWorkers {
		go wait.UntilWithContext(ctx, p.work, time.Second)
	}
	context.AfterFunc(ctx, p.queue.ShutDown)
	return nil
}

func (p *provisioner) work(ctx context.Context) {
	for {
		key, quit := p.queue.Get()
		if quit {
			return
		}
		var err error
		if rest, ok := strings.CutPrefix(key, "pvc/"); ok {
			err = p.provision(ctx, rest)
		} else if rest, ok := strings.CutPrefix(key, "pv/"); ok {
			err = p.reclaim(ctx, rest)
		}
		if err != nil && ctx.Err() == nil {
			utilruntime.HandleError(err)
			p.queue.AddRateLimited(key)
		} else {
			p.queue.Forget(key)
		}
		p.queue.Done(key)
	}
}

func (p *provisioner) provision(ctx context.Context, key string) error {
	obj, exists, err := p.claims.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	pvc := obj.(*corev1.PersistentVolumeClaim)
	if pvc.DeletionTimestamp != nil || pvc.Spec.VolumeName != "" || pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName != StorageClassName {
		return nil
	}
	name := "pvc-" + string(pvc.UID)
	if _, exists, _ := p.vols.GetByKey(name); exists {
		return nil
	}
	if wait := p.held(pvc.UID); wait > 0 {
		p.queue.AddAfter("pvc/"+key, wait) // the queue's keys carry their kind
		return nil
	}
	// Owned by the executor's user, as a real provisioner honouring the Pod's fsGroup would
	// leave it: the kubelet applies no fsGroup to hostPath volumes, and the executor runs as
	// non-root.
	path := filepath.Join(p.dir, name)
	if err := os.MkdirAll(path, 0o770); err != nil {
		return err
	}
	if err := os.Chown(path, executorUID, executorGID); err != nil {
		return err
	}
	if err := os.Chmod(path, 0o770); err != nil {
		return err
	}
	mode := corev1.PersistentVolumeFilesystem
	if pvc.Spec.VolumeMode != nil {
		mode = *pvc.Spec.VolumeMode
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{provisionedBy: kwokProvisioner}},
		Spec: corev1.PersistentVolumeSpec{
			AccessModes:                   pvc.Spec.AccessModes,
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: pvc.Spec.Resources.Requests[corev1.ResourceStorage]},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			StorageClassName:              StorageClassName,
			VolumeMode:                    &mode,
			ClaimRef: &corev1.ObjectReference{APIVersion: "v1", Kind: "PersistentVolumeClaim",
				Namespace: pvc.Namespace, Name: pvc.Name, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: path}},
		},
	}
	_, err = p.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func (p *provisioner) reclaim(ctx context.Context, name string) error {
	obj, exists, err := p.vols.GetByKey(name)
	if err != nil || !exists {
		return err
	}
	pv := obj.(*corev1.PersistentVolume)
	if pv.Annotations[provisionedBy] != kwokProvisioner || pv.DeletionTimestamp != nil ||
		pv.Status.Phase != corev1.VolumeReleased || pv.Spec.PersistentVolumeReclaimPolicy != corev1.PersistentVolumeReclaimDelete {
		return nil
	}
	uid := pv.UID
	err = p.kube.CoreV1().PersistentVolumes().Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}

// held reports how much longer the claim of this UID is held back (Options.VolumeBindDelay).
func (p *provisioner) held(uid types.UID) time.Duration {
	if p.delay <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	first, ok := p.firstSeen[uid]
	if !ok {
		first = time.Now()
		p.firstSeen[uid] = first
	}
	if left := p.delay - time.Since(first); left > 0 {
		return left
	}
	delete(p.firstSeen, uid)
	return 0
}
