package store

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/execplane/execplane/pkg/apierror"
	executionv1alpha1 "github.com/execplane/execplane/pkg/apis/execution/v1alpha1"
	"github.com/execplane/execplane/pkg/authority"
	"github.com/execplane/execplane/pkg/ident"
	"github.com/execplane/execplane/pkg/profile"
)

// Snapshots' labels and finalizer (docs/snapshots.md).
const (
	// SnapshotOwnerKeyLabel carries a snapshot's owner key (OwnerKey), so that an owner's
	// snapshots are listed by the API server's selection.
	SnapshotOwnerKeyLabel = "execution.mecatl.dev/owner-key"
	// SnapshotFinalizer holds a snapshot until the controller has removed its storage.
	SnapshotFinalizer = "execution.mecatl.dev/snapshot-storage"
	// SnapshotSourceLabel carries the name of a snapshot's source environment: one cut at a
	// time per source (two quiesces of one executor would undo each other).
	SnapshotSourceLabel = "execution.mecatl.dev/source-environment"
	// MaxSnapshotsPerOwner bounds one owner's snapshots of one client (listed whole).
	MaxSnapshotsPerOwner = 1000
)

// SnapshotInput asks for a snapshot of an environment, named by its owner.
type SnapshotInput struct {
	ReferenceInput
	// Name is the caller's name for it (a DNS label), unique per owner.
	Name string
}

// SnapshotTarget names an owner's snapshot.
type SnapshotTarget struct {
	Caller Caller
	Owner  Owner
	Name   string
}

// BeginSnapshot records a snapshot of the environment the binding holds a reference on,
// for its owner: the source's incarnation and executor as they are now (the cut is fenced
// by them), the profile's method, and where its state will be kept. Its status is empty
// (pending) until CutSnapshot. The same name and operation id answer the same snapshot; the
// name taken by another request is ALREADY_EXISTS.
func (s *Store) BeginSnapshot(ctx context.Context, in SnapshotInput) (*executionv1alpha1.ExecutionSnapshot, error) {
	if err := checkReferenceInput(in.ReferenceInput); err != nil {
		return nil, err
	}
	var c checker
	c.DNSLabel("name", in.Name)
	if c.Err() != nil {
		return nil, c.Err()
	}
	ownerHash := OwnerHash(in.Owner)
	name := SnapshotName(in.Caller.Client, ownerHash, in.Name)
	snaps := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace)
	if existing, err := snaps.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return sameSnapshotRequest(existing, in)
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%w: read snapshot: %v", apierror.ErrUnavailable, err)
	}
	env, err := s.client().Get(ctx, in.Environment.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierror.ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("%w: read environment: %v", apierror.ErrUnavailable, err)
	}
	if err := ownedBy(in.Caller, in.Owner, in.Environment)(env); err != nil {
		return nil, err
	}
	if err := authority.BoundReference(env, in.BindingID); err != nil {
		return nil, err
	}
	st := &env.Status
	switch op := st.LifecycleOperation; {
	case env.DeletionTimestamp != nil:
		return nil, notReady("the environment is being deleted")
	case st.FenceState == executionv1alpha1.FenceUnknown:
		return nil, apierror.ErrFenced
	case st.NeverHadExecutor(), st.PVC == nil:
		return nil, notReady("the first executor is still being provisioned")
	case op.InProgress():
		return nil, notReady(fmt.Sprintf("%s in progress", op.Kind))
	}
	cutting, err := snaps.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{SnapshotSourceLabel: env.Name}.String()})
	if err != nil {
		return nil, fmt.Errorf("%w: list snapshots: %v", apierror.ErrUnavailable, err)
	}
	for _, other := range cutting.Items {
		if ph := other.Status.Phase; other.DeletionTimestamp == nil && (ph == "" || ph == executionv1alpha1.SnapshotPending || ph == executionv1alpha1.SnapshotCutting) {
			return nil, notReady("another snapshot of this environment is being cut: retry once it is")
		}
	}
	count, err := snaps.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{SnapshotOwnerKeyLabel: OwnerKey(in.Caller.Client, ownerHash)}.String()})
	if err != nil {
		return nil, fmt.Errorf("%w: list snapshots: %v", apierror.ErrUnavailable, err)
	}
	if len(count.Items) >= MaxSnapshotsPerOwner {
		return nil, fmt.Errorf("%w: an owner keeps at most %d snapshots: delete one", apierror.ErrLimitExceeded, MaxSnapshotsPerOwner)
	}
	claim, err := s.cfg.Kube.CoreV1().PersistentVolumeClaims(s.cfg.Namespace).Get(ctx, st.PVC.Name, metav1.GetOptions{})
	if err != nil || claim.UID != st.PVC.UID {
		return nil, notReady("the workspace claim cannot be read")
	}
	snap := s.newSnapshot(in, name, env, claim)
	if s.cfg.Admission != nil {
		// Its storage counts against the owner's and the client's storage quotas until it
		// is removed, keyed by the storage's name (never reused, unlike the snapshot's).
		if err := s.cfg.Admission.AdmitSnapshot(ctx, Admitted{ClientHash: snap.Spec.ClientHash, OwnerHash: snap.Spec.OwnerHash,
			Name: snap.Spec.Storage.Name, StorageBytes: snap.Spec.Storage.Bytes}); err != nil {
			return nil, err
		}
	}
	created, err := snaps.Create(ctx, snap, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		existing, gerr := snaps.Get(ctx, name, metav1.GetOptions{})
		if gerr != nil {
			return nil, fmt.Errorf("%w: read snapshot: %v", apierror.ErrConflict, gerr)
		}
		return sameSnapshotRequest(existing, in)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: create snapshot: %v", apierror.ErrUnavailable, err)
	}
	return created, nil
}

// newSnapshot builds the snapshot BeginSnapshot creates.
func (s *Store) newSnapshot(in SnapshotInput, name string, env *executionv1alpha1.ExecutionEnvironment, claim *corev1.PersistentVolumeClaim) *executionv1alpha1.ExecutionSnapshot {
	ownerHash := OwnerHash(in.Owner)
	key := OwnerKey(in.Caller.Client, ownerHash)
	var spec profile.ProfileSpec
	if entry, ok := s.cfg.Profiles.Get(env.Spec.Profile); ok {
		spec = entry.Spec
	}
	method := executionv1alpha1.SnapshotCopy
	class := ""
	if spec.SnapshotMethod() == profile.SnapshotCSI {
		method, class = executionv1alpha1.SnapshotCSI, spec.Snapshots.VolumeSnapshotClassName
	}
	source := executionv1alpha1.SnapshotSource{
		Environment: env.Name, UID: string(env.UID), BindingID: in.BindingID, Profile: env.Spec.Profile,
	}
	if pod := env.Status.Pod; pod != nil && !env.Status.Suspended() {
		source.Epoch, source.PodUID = env.Status.Epoch, string(pod.UID)
	}
	storageClass := ""
	if claim.Spec.StorageClassName != nil {
		storageClass = *claim.Spec.StorageClassName
	}
	return &executionv1alpha1.ExecutionSnapshot{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: s.cfg.Namespace,
			Labels:     map[string]string{SnapshotOwnerKeyLabel: key, SnapshotSourceLabel: env.Name},
			Finalizers: []string{SnapshotFinalizer},
		},
		Spec: executionv1alpha1.ExecutionSnapshotSpec{
			ClientHash: ident.ClientHash(in.Caller.Client), OwnerHash: ownerHash, OwnerKey: key,
			Name: in.Name, OperationID: in.OperationID, Source: source, Method: method,
			Storage: executionv1alpha1.SnapshotStorage{
				// A name of its own, never the name's: a snapshot deleted and taken again at
				// once must not meet its predecessor's claim or copy Pod, still going.
				Name:        SnapshotStorageName(key, randomID()[:20]),
				SourceClaim: claim.Name, StorageClass: storageClass, VolumeSnapshotClass: class,
				Bytes: max(claim.Spec.Resources.Requests.Storage().Value(), 1),
			},
		},
	}
}

// SnapshotStorageName is the name of a snapshot's VolumeSnapshot or claim in the executor
// namespace: the owner key first, for admission (internal/executor's builders take it).
func SnapshotStorageName(ownerKey, snapshotID string) string {
	return SnapshotPrefix + ownerKey + "-" + snapshotID
}

// sameSnapshotRequest answers an existing snapshot to the request that created it, and
// refuses any other.
func sameSnapshotRequest(existing *executionv1alpha1.ExecutionSnapshot, in SnapshotInput) (*executionv1alpha1.ExecutionSnapshot, error) {
	sp := existing.Spec
	if sp.ClientHash != ident.ClientHash(in.Caller.Client) || sp.OwnerHash != OwnerHash(in.Owner) {
		// A hash collision of the name, nothing else: not this caller's.
		return nil, fmt.Errorf("%w: the name is taken", apierror.ErrAlreadyExists)
	}
	if existing.DeletionTimestamp != nil {
		return nil, notReady("a snapshot of this name is being deleted")
	}
	if sp.OperationID != in.OperationID || sp.Source.Environment != in.Environment.Name || sp.Source.UID != in.Environment.UID || sp.Source.BindingID != in.BindingID {
		return nil, fmt.Errorf("%w: the owner has a snapshot of this name", apierror.ErrAlreadyExists)
	}
	return existing, nil
}

// CutSnapshot begins the cut of a pending snapshot: its source is quiesced (or has no
// executor), so its storage may be made now; the cut must be done by cutBy. Commands are
// the source's durable commands as of the quiesce. Fenced: the source must still be the
// incarnation, at the epoch and with the executor, that BeginSnapshot recorded — otherwise
// what was quiesced is not what would be cut (STALE_EPOCH). A snapshot already cut, or
// being cut, is answered as it is.
func (s *Store) CutSnapshot(ctx context.Context, t SnapshotTarget, quiesced bool, commands []executionv1alpha1.SnapshotCommand, cutBy time.Time) (*executionv1alpha1.ExecutionSnapshot, error) {
	if len(commands) > executionv1alpha1.MaxSnapshotCommands {
		commands = commands[:executionv1alpha1.MaxSnapshotCommands]
	}
	snaps := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace)
	for range maxAttempts {
		snap, err := s.GetSnapshot(ctx, t)
		if err != nil {
			return nil, err
		}
		if snap.Status.Phase != "" && snap.Status.Phase != executionv1alpha1.SnapshotPending {
			return snap, nil
		}
		if snap.DeletionTimestamp != nil {
			return nil, notReady("the snapshot is being deleted")
		}
		src := snap.Spec.Source
		env, err := s.client().Get(ctx, src.Environment, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			return nil, fmt.Errorf("%w: the source environment is gone", apierror.ErrStaleEpoch)
		case err != nil:
			return nil, fmt.Errorf("%w: read environment: %v", apierror.ErrUnavailable, err)
		}
		running := env.Status.Pod != nil && !env.Status.Suspended()
		switch {
		case string(env.UID) != src.UID || env.DeletionTimestamp != nil || env.Status.Deleted():
			return nil, fmt.Errorf("%w: the source environment is gone", apierror.ErrStaleEpoch)
		case env.Status.FenceState == executionv1alpha1.FenceUnknown:
			return nil, apierror.ErrFenced
		case src.PodUID == "" && running, src.PodUID != "" && (!running || string(env.Status.Pod.UID) != src.PodUID || env.Status.Epoch != src.Epoch):
			return nil, fmt.Errorf("%w: the source's executor changed since the snapshot began", apierror.ErrStaleEpoch)
		case running && !quiesced:
			return nil, fmt.Errorf("%w: a running source is cut quiesced", apierror.ErrInvalidArgument)
		}
		snap.Status.Phase = executionv1alpha1.SnapshotCutting
		snap.Status.CutBy = &metav1.Time{Time: cutBy}
		snap.Status.Commands = slices.Clone(commands)
		written, err := snaps.UpdateStatus(ctx, snap, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: write snapshot: %v", apierror.ErrUnavailable, err)
		}
		return written, nil
	}
	return nil, fmt.Errorf("%w: CutSnapshot lost the compare-and-swap %d times", apierror.ErrConflict, maxAttempts)
}

// GetSnapshot reads an owner's snapshot live. Another owner's, or another client's, is
// NOT_FOUND, exactly as an absent one.
func (s *Store) GetSnapshot(ctx context.Context, t SnapshotTarget) (*executionv1alpha1.ExecutionSnapshot, error) {
	if err := checkSnapshotTarget(t); err != nil {
		return nil, err
	}
	ownerHash := OwnerHash(t.Owner)
	snap, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace).Get(ctx, SnapshotName(t.Caller.Client, ownerHash, t.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, apierror.ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("%w: read snapshot: %v", apierror.ErrUnavailable, err)
	}
	if snap.Spec.ClientHash != ident.ClientHash(t.Caller.Client) || snap.Spec.OwnerHash != ownerHash || snap.Spec.Name != t.Name {
		return nil, apierror.ErrNotFound
	}
	return snap, nil
}

// ListSnapshots lists an owner's snapshots of this client, by name.
func (s *Store) ListSnapshots(ctx context.Context, c Caller, o Owner) ([]*executionv1alpha1.ExecutionSnapshot, error) {
	if err := checkSnapshotTarget(SnapshotTarget{Caller: c, Owner: o, Name: "x"}); err != nil {
		return nil, err
	}
	ownerHash, client := OwnerHash(o), ident.ClientHash(c.Client)
	list, err := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace).List(ctx,
		metav1.ListOptions{LabelSelector: labels.Set{SnapshotOwnerKeyLabel: OwnerKey(c.Client, ownerHash)}.String()})
	if err != nil {
		return nil, fmt.Errorf("%w: list snapshots: %v", apierror.ErrUnavailable, err)
	}
	var out []*executionv1alpha1.ExecutionSnapshot
	for i := range list.Items {
		if sn := &list.Items[i]; sn.Spec.ClientHash == client && sn.Spec.OwnerHash == ownerHash {
			out = append(out, sn)
		}
	}
	slices.SortFunc(out, func(a, b *executionv1alpha1.ExecutionSnapshot) int { return strings.Compare(a.Spec.Name, b.Spec.Name) })
	return out, nil
}

// DeleteSnapshot deletes an owner's snapshot: the controller removes its storage, then the
// snapshot. Idempotent: a snapshot being deleted is answered as it is; an absent one is
// NOT_FOUND. Environments restored from it keep their files (a restored claim does not
// depend on its snapshot once bound).
func (s *Store) DeleteSnapshot(ctx context.Context, t SnapshotTarget) (*executionv1alpha1.ExecutionSnapshot, error) {
	snap, err := s.GetSnapshot(ctx, t)
	if err != nil {
		return nil, err
	}
	if snap.DeletionTimestamp != nil {
		return snap, nil
	}
	snaps := s.cfg.Execution.ExecutionV1alpha1().ExecutionSnapshots(s.cfg.Namespace)
	err = snaps.Delete(ctx, snap.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &snap.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil, apierror.ErrNotFound
	} else if err != nil {
		return nil, fmt.Errorf("%w: delete snapshot: %v", apierror.ErrUnavailable, err)
	}
	deleted, err := snaps.Get(ctx, snap.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		now := metav1.NewTime(s.cfg.Now())
		snap.DeletionTimestamp = &now
		return snap, nil
	} else if err != nil {
		return nil, fmt.Errorf("%w: read snapshot: %v", apierror.ErrUnavailable, err)
	}
	return deleted, nil
}

func checkSnapshotTarget(t SnapshotTarget) error {
	var c checker
	c.caller(t.Caller)
	c.owner("owner", t.Owner)
	c.DNSLabel("name", t.Name)
	if c.Err() != nil {
		return c.Err()
	}
	if !t.Caller.Capabilities.MayAttestOwner {
		return fmt.Errorf("%w: the client may not attest owners", apierror.ErrPermissionDenied)
	}
	return nil
}

// restorable is the owner's snapshot a new environment may start from: Ready, and not being
// deleted. Another owner's is NOT_FOUND like an absent one.
func (s *Store) restorable(ctx context.Context, t SnapshotTarget) (*executionv1alpha1.ExecutionSnapshot, error) {
	snap, err := s.GetSnapshot(ctx, t)
	if err != nil {
		return nil, fmt.Errorf("%w: from_snapshot", err)
	}
	switch {
	case snap.DeletionTimestamp != nil:
		return nil, notReady("the snapshot is being deleted")
	case snap.Status.Phase == executionv1alpha1.SnapshotFailed:
		return nil, fmt.Errorf("%w: the snapshot failed and holds no state", apierror.ErrNotReady)
	case snap.Status.Phase != executionv1alpha1.SnapshotReady:
		return nil, notReady("the snapshot is not cut yet")
	}
	return snap, nil
}

// QuiesceBound is how long a snapshot of an environment of the profile may hold its source
// quiesced (the profile's snapshots.maxQuiesce; the default for a withdrawn profile).
func (s *Store) QuiesceBound(profileName string) time.Duration {
	var spec profile.ProfileSpec
	if entry, ok := s.cfg.Profiles.Get(profileName); ok {
		spec = entry.Spec
	}
	q, _ := spec.SnapshotBounds()
	return q
}

// SourcePod is the name of the executor Pod a pending snapshot began on, "" when its source
// no longer records it.
func (s *Store) SourcePod(snap *executionv1alpha1.ExecutionSnapshot) string {
	env, err := s.cfg.Environments.ExecutionEnvironments(s.cfg.Namespace).Get(snap.Spec.Source.Environment)
	if err != nil || string(env.UID) != snap.Spec.Source.UID || env.Status.Pod == nil || string(env.Status.Pod.UID) != snap.Spec.Source.PodUID {
		return ""
	}
	return env.Status.Pod.Name
}
