package controller

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Fence reasons of a restore that cannot be made.
const (
	fenceSnapshotGone = "the snapshot the workspace is restored from is gone or not ready; it cannot be restored"
	fenceRestoreCopy  = "the copy of the snapshot into the workspace failed"
)

// restoreRecheck is how often a restore's copy is looked at (its Pod carries no
// environment label, so its events do not bring the environment back).
const restoreRecheck = 2 * time.Second

// restoreSource is the snapshot a new environment's workspace is restored from: Ready and
// the one Ensure named (its UID). Otherwise the environment is fenced (a restore that can
// never be made) and nil is returned.
func (p *pass) restoreSource(ctx context.Context) (*executionv1alpha1.ExecutionSnapshot, error) {
	from := p.env.Spec.From
	snap, err := p.r.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(p.env.Namespace).Get(ctx, from.Snapshot, metav1.GetOptions{})
	if apierrors.IsNotFound(err) || (err == nil && (string(snap.UID) != from.SnapshotUID || snap.Status.Phase != executionv1alpha1.SnapshotReady)) {
		p.fence(fenceSnapshotGone)
		return nil, nil
	}
	return snap, err
}

// restoreCopyName is the copy Pod that fills a restored workspace.
func restoreCopyName(env *executionv1alpha1.ExecutionEnvironment) string {
	return env.Name + "-restore"
}

// restored reports whether the environment's workspace holds what it starts as: always
// for an environment restored from nothing or from a csi snapshot (its claim's dataSource
// did it), and for a copy restore once its copy Pod succeeded — which this starts (the
// snapshot's claim into the workspace's, the helper's mirror) and waits for.
func (p *pass) restored(ctx context.Context) (bool, error) {
	if p.env.Spec.From == nil {
		return true, nil
	}
	pods := p.r.cfg.Kube.CoreV1().Pods(p.env.Namespace)
	pod, err := pods.Get(ctx, restoreCopyName(p.env), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		snap, err := p.restoreSource(ctx)
		if err != nil || snap == nil {
			return false, err
		}
		if snap.Spec.Method != executionv1alpha1.SnapshotCopy {
			return true, nil
		}
		_, maxCopy := p.entry.Spec.SnapshotBounds()
		copyPod, err := executor.CopyPod(p.entry, executor.CopyOptions{
			Name: restoreCopyName(p.env), Namespace: p.env.Namespace, Snapshot: snap.Name, OwnerKey: snap.Spec.OwnerKey,
			Source: snap.Spec.Storage.Name, Target: p.claimName(), EnvironmentUID: string(p.env.UID),
			ServiceAccount: p.r.cfg.Profiles.ExecutorServiceAccount(), Deadline: maxCopy,
		})
		if err != nil {
			return false, err
		}
		if _, err := pods.Create(ctx, copyPod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return false, err
		}
		p.wake = restoreRecheck
		return false, nil
	case err != nil:
		return false, err
	case pod.Labels[executor.LabelEnvironmentUID] != string(p.env.UID):
		// Another incarnation's (the binding's previous environment): never this one's.
		if err := pods.Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}); err != nil && !apierrors.IsNotFound(err) {
			return false, err
		}
		p.wake = restoreRecheck
		return false, nil
	}
	_, maxCopy := p.entry.Spec.SnapshotBounds()
	switch pod.Status.Phase {
	case corev1.PodSucceeded:
		if _, report := copyOutcome(pod); report.Error != "" {
			p.r.log.Warn("a restore's copy was refused", logging.KeyEnvironment, p.env.Name, "reason", truncate(report.Error, 256))
			p.fence(fenceRestoreCopy)
			return false, nil
		}
		return true, nil
	case corev1.PodFailed:
		_, report := copyOutcome(pod)
		p.r.log.Warn("a restore's copy failed", logging.KeyEnvironment, p.env.Name, "reason", truncate(report.Error, 256))
		p.fence(fenceRestoreCopy)
		return false, nil
	}
	if p.now.After(pod.CreationTimestamp.Add(maxCopy + restoreGrace)) {
		// Never started (a claim that cannot be mounted), so its own deadline never ran.
		p.fence(fenceRestoreCopy)
		return false, nil
	}
	p.wake = restoreRecheck
	return false, nil
}

// restoreGrace is how long past its deadline a restore's copy Pod may take to be seen ended
// before the environment is fenced.
const restoreGrace = time.Minute

// restoreDone removes a restore's copy Pod once the executor is created (a copy run again
// before that is harmless: the mirror is idempotent).
func (p *pass) restoreDone(ctx context.Context) {
	if p.env.Spec.From == nil {
		return
	}
	err := p.r.cfg.Kube.CoreV1().Pods(p.env.Namespace).Delete(ctx, restoreCopyName(p.env), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		p.r.log.Debug("a restore's copy Pod stays", logging.KeyEnvironment, p.env.Name, logging.KeyError, err)
	}
}
