package usage

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
)

// checkpointSnapshots writes the ledgers of snapshots' storage (docs/usage.md
// "Snapshots"): storage alone accrues, at the source claim's requested size, from the
// snapshot's beginning; a failed snapshot's ledger ends (its storage is removed with it),
// and a deleted one's is ended by Checkpoint's sweep of ledgers whose subject is gone. A
// snapshot that failed before its first checkpoint gets none: its storage lived seconds.
func (r *Recorder) checkpointSnapshots(ctx context.Context, seen map[string]bool, now time.Time) {
	snaps, err := r.snaps.ExecutionSnapshots(r.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, sn := range snaps {
		name := LedgerName(sn.Name, sn.UID)
		seen[name] = true
		state, storage := executionv1alpha1.UsageOther, sn.Spec.Storage.Bytes
		if sn.Status.Phase == executionv1alpha1.SnapshotFailed {
			if !r.hasLedgerOrPending(name) {
				continue
			}
			state, storage = executionv1alpha1.UsageEnded, 0
		}
		create := func() *executionv1alpha1.ExecutionUsage { return newSnapshotLedger(name, sn) }
		if err := r.write(ctx, name, create, storage, state, time.Time{}, now); err != nil && ctx.Err() == nil {
			r.log.Warn("a snapshot's usage ledger cannot be written; retried at the next checkpoint", logging.KeyName, sn.Name, logging.KeyError, err)
		}
	}
}

// snapshotGone confirms with the API server that a snapshot is gone.
func (r *Recorder) snapshotGone(ctx context.Context, obj executionv1alpha1.ObjectIdentity) bool {
	sn, err := r.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(r.cfg.Namespace).Get(ctx, obj.Name, metav1.GetOptions{})
	return apierrors.IsNotFound(err) || (err == nil && sn.UID != obj.UID)
}

// newSnapshotLedger is a snapshot's ledger: its source's environment, owner, binding and
// profile, the snapshot named beside them.
func newSnapshotLedger(name string, sn *executionv1alpha1.ExecutionSnapshot) *executionv1alpha1.ExecutionUsage {
	src := sn.Spec.Source
	return &executionv1alpha1.ExecutionUsage{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: sn.Namespace, Labels: map[string]string{executor.LabelSnapshot: sn.Name}},
		Spec: executionv1alpha1.ExecutionUsageSpec{
			Environment: executionv1alpha1.ObjectIdentity{Name: src.Environment, UID: types.UID(src.UID)},
			OwnerHash:   sn.Spec.OwnerHash, ClientHash: sn.Spec.ClientHash, BindingID: src.BindingID, Profile: src.Profile,
			Snapshot: &executionv1alpha1.UsageSnapshot{Object: executionv1alpha1.ObjectIdentity{Name: sn.Name, UID: sn.UID}, Name: sn.Spec.Name},
		},
		// Its storage from its beginning (BeginSnapshot counts it against the quota then).
		Status: executionv1alpha1.ExecutionUsageStatus{Accrual: executionv1alpha1.UsageAccrual{
			State: executionv1alpha1.UsageOther, Since: metav1.NewMicroTime(sn.CreationTimestamp.Time), StorageBytes: sn.Spec.Storage.Bytes,
		}},
	}
}
