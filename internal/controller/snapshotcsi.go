package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// Bounds of a csi cut.
const (
	// csiRecheck is how often a VolumeSnapshot being cut is read (no informer: the CRDs may
	// be absent from a cluster whose profiles never snapshot with csi).
	csiRecheck = 500 * time.Millisecond
	// csiReadyTimeout bounds how long a VolumeSnapshot cut in time may take to become ready
	// to use (a cloud driver uploads after the cut; the source runs again meanwhile).
	csiReadyTimeout = 30 * time.Minute
)

// volumeSnapshotState is what is read of a VolumeSnapshot's status.
type volumeSnapshotState struct {
	created      time.Time
	ready        bool
	restoreBytes int64
	failure      string
}

func readVolumeSnapshot(u *unstructured.Unstructured) volumeSnapshotState {
	var st volumeSnapshotState
	if s, ok, _ := unstructured.NestedString(u.Object, "status", "creationTime"); ok {
		if t, err := time.Parse(time.RFC3339, s); err == nil {
			st.created = t
		}
	}
	st.ready, _, _ = unstructured.NestedBool(u.Object, "status", "readyToUse")
	if s, ok, _ := unstructured.NestedString(u.Object, "status", "restoreSize"); ok {
		if q, err := resource.ParseQuantity(s); err == nil {
			st.restoreBytes = q.Value()
		}
	}
	st.failure, _, _ = unstructured.NestedString(u.Object, "status", "error", "message")
	return st
}

// cutCSI creates the snapshot's VolumeSnapshot of the quiesced source; one whose driver cut
// it by the deadline (its creationTime) is the snapshot once ready to use, one cut later
// (or not at all) fails it.
func (s *Snapshots) cutCSI(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot, now time.Time) (time.Duration, error) {
	by := snap.Status.CutBy
	if by == nil {
		return 0, s.fail(ctx, snap, apierror.ErrInternal, "cut without a deadline")
	}
	if s.cfg.Dynamic == nil {
		return 0, s.fail(ctx, snap, apierror.ErrUnimplemented, "the controller has no client for VolumeSnapshots")
	}
	vss := s.cfg.Dynamic.Resource(executor.VolumeSnapshotGVR).Namespace(s.cfg.Namespace)
	st := snap.Spec.Storage
	u, err := vss.Get(ctx, st.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		if !now.Before(by.Time) {
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the cut's deadline passed before its VolumeSnapshot was made")
		}
		// As for a copy: only from the API server's copy of the snapshot.
		live, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace).Get(ctx, snap.Name, metav1.GetOptions{})
		if err != nil || live.UID != snap.UID || live.Status.Phase != executionv1alpha1.SnapshotCutting {
			return 0, err
		}
		vs := executor.VolumeSnapshot(st.Name, s.cfg.Namespace, snap.Name, snap.Spec.OwnerKey, st.SourceClaim, st.VolumeSnapshotClass)
		if _, err := vss.Create(ctx, vs, metav1.CreateOptions{}); apierrors.IsNotFound(err) {
			return 0, s.fail(ctx, snap, apierror.ErrUnimplemented, "the cluster serves no VolumeSnapshot API (the external snapshotter's CRDs)")
		} else if err != nil && !apierrors.IsAlreadyExists(err) {
			return 0, fmt.Errorf("create the VolumeSnapshot: %w", err)
		}
		return csiRecheck, nil
	} else if err != nil {
		return 0, err
	}
	vs := readVolumeSnapshot(u)
	// The snapshotter's status.error is its last error, also of a retry that then
	// succeeded: it decides nothing while the snapshot may still be cut in time or become
	// ready, and is the reason given when it does not.
	why := func(msg string) string {
		if vs.failure != "" {
			msg += ": " + truncate(vs.failure, 512)
		}
		return msg
	}
	switch {
	case vs.created.IsZero():
		if !now.Before(by.Time) {
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, why("the CSI driver did not cut the volume by the cut's deadline (the profile's snapshots.maxQuiesce)"))
		}
		return min(csiRecheck, by.Time.Sub(now)), nil
	case vs.created.After(by.Time):
		return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, "the CSI driver cut the volume after the cut's deadline: it is not a state the source passed through")
	}
	if snap.Status.CutAt == nil {
		// Cut in time: whether the source was the quiesced executor is judged now, not once
		// a slow driver has made the snapshot ready (the quiesce has ended by then).
		if why := s.sourceMoved(ctx, snap); why != "" {
			return 0, s.fail(ctx, snap, apierror.ErrStaleEpoch, why)
		}
		snap.Status.CutAt = &metav1.Time{Time: vs.created}
		if !vs.ready {
			return csiRecheck, s.writeStatus(ctx, snap)
		}
	}
	if !vs.ready {
		if now.After(vs.created.Add(csiReadyTimeout)) {
			return 0, s.fail(ctx, snap, apierror.ErrLimitExceeded, why("the VolumeSnapshot was cut but never became ready to use"))
		}
		return min(csiReadyRecheck(now.Sub(vs.created)), csiReadyTimeout), nil
	}
	snap.Status.Phase = executionv1alpha1.SnapshotReady
	snap.Status.ReadyAt = &metav1.Time{Time: now}
	snap.Status.RestoreBytes = max(vs.restoreBytes, st.Bytes)
	return 0, s.writeStatus(ctx, snap)
}

// csiReadyRecheck backs off while a cut VolumeSnapshot becomes ready (a cloud driver's
// upload takes minutes): every csiRecheck for its first 10 s, then every 5 s.
func csiReadyRecheck(since time.Duration) time.Duration {
	if since < 10*time.Second {
		return csiRecheck
	}
	return snapshotRecheck
}

// removeVolumeSnapshot deletes a csi snapshot's VolumeSnapshot (its class's deletion policy
// decides what becomes of the driver's copy).
func (s *Snapshots) removeVolumeSnapshot(ctx context.Context, snap *executionv1alpha1.ExecutionSnapshot) error {
	if s.cfg.Dynamic == nil {
		return nil
	}
	err := s.cfg.Dynamic.Resource(executor.VolumeSnapshotGVR).Namespace(s.cfg.Namespace).Delete(ctx, snap.Spec.Storage.Name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
