package allocation

import (
	"context"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/execplane/execplane/internal/logging"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/store"
)

// AdmitSnapshot implements store.Admission: the snapshot's storage counted against each
// scope with a storage quota, beside its environments'; a refusal gives back what an
// earlier scope took.
func (a *Allocator) AdmitSnapshot(ctx context.Context, in store.Admitted) error {
	var done []scope
	for _, s := range a.scopes(in.ClientHash, in.OwnerHash) {
		if s.limits.Storage == nil {
			continue
		}
		now := metav1.NewTime(a.cfg.Now())
		changed := false
		err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
			changed = false
			if slices.ContainsFunc(st.Snapshots, func(sn executionv1alpha1.AllocatedSnapshot) bool { return sn.Name == in.Name }) {
				return false, nil // counted already
			}
			if used := storageUsed(st); used+in.StorageBytes > s.limits.Storage.Value() {
				return false, exceeded(s, "storage", s.limits.Storage.Value(), used)
			}
			st.Snapshots = append(st.Snapshots, executionv1alpha1.AllocatedSnapshot{Name: in.Name, StorageBytes: in.StorageBytes, AdmittedAt: now})
			changed = true
			return true, nil
		})
		if err != nil {
			a.cfg.Metrics.refused(s.label(), err)
			for _, d := range done {
				a.dropSnapshot(context.WithoutCancel(ctx), d, in.Name)
			}
			return err
		}
		if changed {
			done = append(done, s)
		}
	}
	return nil
}

func (a *Allocator) dropSnapshot(ctx context.Context, s scope, name string) {
	err := a.update(ctx, s, func(st *executionv1alpha1.ExecutionAllocationStatus) (bool, error) {
		n := len(st.Snapshots)
		st.Snapshots = slices.DeleteFunc(st.Snapshots, func(sn executionv1alpha1.AllocatedSnapshot) bool { return sn.Name == name })
		return len(st.Snapshots) != n, nil
	})
	if err != nil && ctx.Err() == nil {
		a.log.Warn("a snapshot's admission could not be given back; the next sync does", logging.KeyName, name, logging.KeyError, err)
	}
}

// storageUsed is what a scope's environments and snapshots hold.
func storageUsed(st *executionv1alpha1.ExecutionAllocationStatus) int64 {
	var n int64
	for _, e := range st.Environments {
		n += e.StorageBytes
	}
	for _, sn := range st.Snapshots {
		n += sn.StorageBytes
	}
	return n
}

// holdsStorage reports whether a snapshot's storage exists or may still: every snapshot
// but a failed one (its storage removed), until the object is gone.
func holdsStorage(sn *executionv1alpha1.ExecutionSnapshot) bool {
	return sn.Status.Phase != executionv1alpha1.SnapshotFailed
}

// eachSnapshot calls add with each snapshot holding storage, for each of its scopes with a
// storage quota.
func (a *Allocator) eachSnapshot(add func(scope, executionv1alpha1.AllocatedSnapshot)) {
	list, err := a.snaps.ExecutionSnapshots(a.cfg.Namespace).List(labels.Everything())
	if err != nil {
		return
	}
	for _, sn := range list {
		if !holdsStorage(sn) {
			continue
		}
		for _, s := range a.scopes(sn.Spec.ClientHash, sn.Spec.OwnerHash) {
			if s.limits.Storage != nil {
				add(s, executionv1alpha1.AllocatedSnapshot{Name: sn.Spec.Storage.Name, StorageBytes: sn.Spec.Storage.Bytes})
			}
		}
	}
}

// snapshotGone confirms, on the API server, that no snapshot holds the storage named
// storage (xsnap-<owner key>-<id>: the owner's snapshots are listed by their key).
func (a *Allocator) snapshotGone(ctx context.Context, storage string) bool {
	key, _, ok := strings.Cut(strings.TrimPrefix(storage, store.SnapshotPrefix), "-")
	if !ok {
		return true // never a snapshot's storage
	}
	list, err := a.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(a.cfg.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: labels.Set{store.SnapshotOwnerKeyLabel: key}.String()})
	if err != nil {
		return false
	}
	for i := range list.Items {
		if sn := &list.Items[i]; sn.Spec.Storage.Name == storage {
			return !holdsStorage(sn)
		}
	}
	return true
}

// reconcileSnapshots makes st list want (name → entry), keeping fresh admissions (a
// snapshot being created) and entries whose snapshot the API server still has; it reports
// whether anything changed.
func reconcileSnapshots(st *executionv1alpha1.ExecutionAllocationStatus, want map[string]executionv1alpha1.AllocatedSnapshot, now time.Time, gone func(string) bool) bool {
	changed := false
	have := map[string]bool{}
	kept := st.Snapshots[:0:0]
	for _, sn := range st.Snapshots {
		have[sn.Name] = true
		if _, ok := want[sn.Name]; !ok && now.Sub(sn.AdmittedAt.Time) >= grace && gone(sn.Name) {
			changed = true
			continue
		}
		kept = append(kept, sn)
	}
	for name, w := range want {
		if !have[name] {
			w.AdmittedAt = metav1.NewTime(now)
			kept = append(kept, w)
			changed = true
		}
	}
	slices.SortFunc(kept, func(a, b executionv1alpha1.AllocatedSnapshot) int { return strings.Compare(a.Name, b.Name) })
	st.Snapshots = kept
	return changed
}

// ReleaseSnapshot gives back a snapshot's storage at once, when the controller has removed
// its storage (deleted, or failed); the sync would otherwise give it back only past the
// grace of a fresh admission.
func (a *Allocator) ReleaseSnapshot(ctx context.Context, in store.Admitted) {
	for _, s := range a.scopes(in.ClientHash, in.OwnerHash) {
		if s.limits.Storage != nil {
			a.dropSnapshot(ctx, s, in.Name)
		}
	}
}
