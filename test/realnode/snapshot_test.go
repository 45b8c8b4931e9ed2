package realnode_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/execplane/execplane/internal/dev/devcluster"
	"github.com/execplane/execplane/internal/dev/devcluster/clustertest"
	"github.com/execplane/execplane/internal/executor"
	"github.com/execplane/execplane/pkg/client"
	"github.com/execplane/execplane/pkg/profile"
	"github.com/execplane/execplane/pkg/store"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// copyReport is the helper's mirror report (helper.MirrorReport), read from the copy Pod's
// termination message.
type copyReport struct {
	Entries, Copied, Bytes, Unchanged, Removed, Special uint64
	Error                                               string
}

// The copy path of snapshots on real volumes: a workspace of 1,000 files (and a symlink
// out of it, a 1 MiB file, a FIFO, the durable commands' records) copied by a copy Pod —
// the helper's --mirror in a container of the profile's image, the source mounted
// read-only — into a snapshot's claim, and the snapshot copied into two fork claims by the
// helper image's copy; the copies equal the source less what a copy does not carry, file
// by file (content, permissions, modification time), each is independent of the others,
// and a change of the source after the cut is not in the snapshot.
func TestCopyPathOnRealVolumes(t *testing.T) {
	s := startSystem(t)
	reg, err := profile.Parse([]byte(profiles))
	if err != nil {
		t.Fatal(err)
	}
	w := s.ensure(t, "snapshot-source", profileExample)
	w.must(t, `set -e
mkdir -p d/a d/b sub/deep
i=0; while [ $i -lt 1000 ]; do echo "file $i $$" > d/$((i % 2 == 0 ? 0 : 1))-$i; i=$((i+1)); done
mv d/0-* d/a/ && mv d/1-* d/b/
head -c 1048576 /dev/urandom > sub/deep/blob
chmod 600 sub/deep/blob && chmod 750 sub
ln -s /etc/passwd escape && ln -s ../d/a sub/link
mkfifo pipe`)
	// A durable command's record in the workspace: not carried.
	started, err := w.run.Start(ctx(t), client.Command{Shell: "echo detached", Timeout: time.Minute}, client.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.run.Wait(ctx(t), started.ID); err != nil {
		t.Fatal(err)
	}
	pod := s.pod(t, w)
	ns := s.ExecutorNamespace()
	var source string
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			source = v.PersistentVolumeClaim.ClaimName
		}
	}
	kube := s.cluster.Kube()
	volumeDir := func(claim string) string {
		t.Helper()
		var dir string
		clustertest.Eventually(t, time.Minute, "claim "+claim+" bound", func() bool {
			c, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx(t), claim, metav1.GetOptions{})
			if err != nil || c.Spec.VolumeName == "" {
				return false
			}
			dir = filepath.Join(s.cluster.StateDir(), "node", "volumes", c.Spec.VolumeName)
			return true
		})
		return dir
	}
	ownerKey := "0123456789abcdef"
	copyInto := func(entry profile.Entry, from, to, node string) copyReport {
		t.Helper()
		claim := executor.SnapshotClaim(to, ns, "xsnap-test", ownerKey, devcluster.StorageClassName, 1<<30)
		if _, err := kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx(t), claim, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		p, err := executor.CopyPod(entry, executor.CopyOptions{Name: to + "-copy", Namespace: ns, Snapshot: "xsnap-test", OwnerKey: ownerKey,
			Source: from, Target: to, Node: node, ServiceAccount: "default", Deadline: 2 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().Pods(ns).Create(ctx(t), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var done *corev1.Pod
		clustertest.Eventually(t, 2*time.Minute, "the copy Pod "+p.Name+" done", func() bool {
			done, err = kube.CoreV1().Pods(ns).Get(ctx(t), p.Name, metav1.GetOptions{})
			return err == nil && (done.Status.Phase == corev1.PodSucceeded || done.Status.Phase == corev1.PodFailed)
		})
		var rep copyReport
		for _, cs := range done.Status.ContainerStatuses {
			if term := cs.State.Terminated; term != nil {
				if err := json.Unmarshal([]byte(term.Message), &rep); err != nil {
					t.Fatalf("the copy's report %q: %v", term.Message, err)
				}
			}
		}
		if done.Status.Phase != corev1.PodSucceeded || rep.Error != "" {
			t.Fatalf("the copy Pod %s: %s, report %+v", p.Name, done.Status.Phase, rep)
		}
		t.Logf("%s → %s: %+v", from, to, rep)
		return rep
	}
	snapshot := store.SnapshotStorageName(ownerKey, "real")
	example, _ := reg.Get(profileExample)
	rep := copyInto(example, source, snapshot, pod.Spec.NodeName)
	// 1,000 files, the blob, 5 directories (d, d/a, d/b, sub, sub/deep), 2 symlinks, the FIFO.
	if rep.Copied != 1001 || rep.Bytes < 1<<20 || rep.Special != 1 {
		t.Fatalf("the snapshot's copy: %+v", rep)
	}
	sourceTree := tree(t, volumeDir(source))
	want := maps.Clone(sourceTree)
	for k := range sourceTree {
		if k == "pipe" || k == ".execplane" || strings.HasPrefix(k, ".execplane/") {
			delete(want, k)
		}
	}
	if len(want) == len(sourceTree) {
		t.Fatalf("the source holds no records or FIFO: %v", slices.Sorted(maps.Keys(sourceTree)))
	}
	sameTree(t, "the snapshot", tree(t, volumeDir(snapshot)), want)

	// The source changes after the cut: the snapshot does not.
	w.must(t, "echo changed > d/a/0-0 && rm -r d/b && echo new > added")
	sameTree(t, "the snapshot after the source changed", tree(t, volumeDir(snapshot)), want)

	// Two forks from the snapshot, by the helper image's copy; each changed differently.
	installed, _ := reg.Get(profileHelperImage)
	forks := []string{store.SnapshotStorageName(ownerKey, "fork-1"), store.SnapshotStorageName(ownerKey, "fork-2")}
	for _, f := range forks {
		copyInto(installed, snapshot, f, "")
		sameTree(t, "fork "+f, tree(t, volumeDir(f)), want)
	}
	if err := os.WriteFile(filepath.Join(volumeDir(forks[0]), "only-in-fork-1"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(volumeDir(forks[1]), "d", "a", "0-0")); err != nil {
		t.Fatal(err)
	}
	one, two := tree(t, volumeDir(forks[0])), tree(t, volumeDir(forks[1]))
	if _, ok := two["only-in-fork-1"]; ok {
		t.Fatal("a file written in one fork is in the other")
	}
	if _, ok := one["d/a/0-0"]; !ok {
		t.Fatal("a file removed in one fork is gone from the other")
	}
	sameTree(t, "the snapshot after its forks changed", tree(t, volumeDir(snapshot)), want)
}

// tree describes the files beneath root as the mirror must carry them: type, permission
// bits, size, SHA-256 and modification time of regular files, the text of symlinks.
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		info, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			text, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink " + text
		case info.IsDir():
			out[rel] = fmt.Sprintf("dir %o", info.Mode().Perm())
		case info.Mode().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(data)
			out[rel] = fmt.Sprintf("file %o %d %s %d", info.Mode().Perm(), info.Size(), hex.EncodeToString(sum[:]), info.ModTime().UnixNano())
		default:
			out[rel] = "special"
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	bad := 0
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if got[k] != want[k] && bad < 10 {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], want[k])
			bad++
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok && bad < 10 {
			t.Errorf("%s: %s (%q) should not be there", what, k, got[k])
			bad++
		}
	}
	if bad > 0 {
		t.FailNow()
	}
}

// A snapshot through the public API, on the real node, of a workspace a detached command
// is writing: CreateSnapshot quiesces the source's executor (the helper's --quiesce), the
// controller's copy Pod copies it on the source's node while the hold lasts, and the answer
// is READY with its cut time and size; another owner neither sees it nor restores from it. The snapshot's files equal the source's unchanging ones file by file, and
// the writer's two files are a state it passed through (the counter file one ahead of the
// log at most: never the torn pair a copy taken while it runs would show). Deleted, its
// claim goes and then the snapshot.
func TestSnapshotThroughTheController(t *testing.T) {
	snapshotThroughTheController(t, profileExample, executionv1.SnapshotMethod_SNAPSHOT_METHOD_COPY)
}

// The same through the CSI driver: a VolumeSnapshot of the quiesced workspace, forks
// restored by their claims' dataSource.
func TestCSISnapshotThroughTheController(t *testing.T) {
	snapshotThroughTheController(t, profileCSI, executionv1.SnapshotMethod_SNAPSHOT_METHOD_CSI)
}

func snapshotThroughTheController(t *testing.T, profileName string, method executionv1.SnapshotMethod) {
	s := startSystem(t)
	csi := method == executionv1.SnapshotMethod_SNAPSHOT_METHOD_CSI
	w := s.ensure(t, "snapshot-writer", profileName)
	w.must(t, `set -e
mkdir -p fixed gen
i=0; while [ $i -lt 1000 ]; do echo "file $i" > fixed/f$i; i=$((i+1)); done`)
	// The writer: gen/count holds the number of lines gen/log has or will have next.
	if _, err := w.run.Start(ctx(t), client.Command{Shell: `i=0; while :; do i=$((i+1)); echo $i > gen/count.new && mv gen/count.new gen/count; echo $i >> gen/log; done`,
		Timeout: 4 * time.Minute}, client.StartOptions{}); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, 30*time.Second, "the writer writing", func() bool {
		b, err := w.run.ReadFile(ctx(t), "gen/log")
		return err == nil && len(b) > 1000
	})
	snap, err := w.env.Snapshot(ctx(t), "mid-write")
	if err != nil {
		t.Fatal(err)
	}
	if snap.GetState() != client.SnapshotReady || snap.GetCutAt() == nil || snap.GetMethod() != method ||
		snap.GetSource().GetId() != w.env.Ref().GetId() || snap.GetSizeBytes() <= 0 {
		t.Fatalf("the snapshot: %v", snap)
	}
	t.Logf("cut in %v", snap.GetCutAt().AsTime().Sub(snap.GetCreatedAt().AsTime()))
	// The same request again answers it; another owner sees nothing.
	if again, err := s.caller.GetSnapshot(ctx(t), owner, "mid-write"); err != nil || again.GetCutAt().AsTime() != snap.GetCutAt().AsTime() {
		t.Fatalf("get: %v %v", again, err)
	}
	stranger := client.Owner{Issuer: owner.Issuer, Subject: "someone-else"}
	if _, err := s.caller.GetSnapshot(ctx(t), stranger, "mid-write"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another owner's get: %v", err)
	}
	if list, err := s.caller.Snapshots(ctx(t), stranger); err != nil || len(list) != 0 {
		t.Fatalf("another owner's list: %v %v", list, err)
	}
	if _, err := s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: stranger, BindingID: "stolen", Profile: profileName, FromSnapshot: "mid-write"}); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("another owner's restore: %v", err)
	}
	stored, err := s.exec.ExecutionV1alpha1().ExecutionSnapshots(s.ExecutorNamespace()).List(ctx(t), metav1.ListOptions{})
	if err != nil || len(stored.Items) != 1 {
		t.Fatalf("the snapshot objects: %v %v", stored, err)
	}
	storage := stored.Items[0].Spec.Storage

	kube := s.cluster.Kube()
	ns := s.ExecutorNamespace()
	claimDir := func(name string) string {
		t.Helper()
		dir, err := s.cluster.ClaimDir(ctx(t), ns, name)
		if err != nil {
			t.Fatalf("claim %s: %v", name, err)
		}
		return dir
	}
	// A copy's files are its claim's; a csi snapshot's the driver's copy of the volume.
	snapDir := ""
	if csi {
		if snapDir, err = s.cluster.VolumeSnapshotDir(ctx(t), ns, storage.Name); err != nil {
			t.Fatal(err)
		}
	} else {
		snapDir = claimDir(storage.Name)
	}
	snapTree, srcTree := tree(t, snapDir), tree(t, claimDir(storage.SourceClaim))
	for k, v := range srcTree {
		if strings.HasPrefix(k, "fixed") && snapTree[k] != v {
			t.Fatalf("%s: %q in the snapshot, %q in the source", k, snapTree[k], v)
		}
	}
	for k := range snapTree {
		// A volume's snapshot holds the records too: sealed to the source, nothing a fork
		// lists (checked below).
		if !csi && strings.HasPrefix(k, ".execplane") {
			t.Fatalf("the snapshot carries the records: %s", k)
		}
	}
	countB, err := os.ReadFile(filepath.Join(snapDir, "gen", "count"))
	if err != nil {
		t.Fatal(err)
	}
	logB, err := os.ReadFile(filepath.Join(snapDir, "gen", "log"))
	if err != nil {
		t.Fatal(err)
	}
	count, _ := strconv.Atoi(strings.TrimSpace(string(countB)))
	lines := strings.Count(string(logB), "\n")
	if count != lines && count != lines+1 {
		t.Fatalf("a torn state: the counter says %d, the log has %d lines", count, lines)
	}
	t.Logf("the writer as cut: counter %d, log %d lines", count, lines)

	// Two forks from the snapshot through the public API: each a new environment whose
	// workspace holds the snapshot's files (checked on the node, file by file), no durable
	// command, and each changed differently without the other or the source seeing it.
	fork := func(binding string) (*workspace, map[string]string) {
		t.Helper()
		env, err := s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: owner, BindingID: binding, Profile: profileName, FromSnapshot: "mid-write"})
		if err != nil {
			t.Fatalf("ensure %s from the snapshot: %v", binding, err)
		}
		f := &workspace{env: env, run: acquire(t, env, "run-1")}
		claim := s.pod(t, f).Spec.Volumes[0].PersistentVolumeClaim.ClaimName
		return f, tree(t, claimDir(claim))
	}
	want := withoutRecords(snapTree)
	one, oneTree := fork("fork-1")
	sameTree(t, "fork 1", withoutRecords(oneTree), want)
	two, twoTree := fork("fork-2")
	sameTree(t, "fork 2", withoutRecords(twoTree), want)
	for _, f := range []*workspace{one, two} {
		if cmds, _, err := f.run.Commands(ctx(t), 10); err != nil || len(cmds) != 0 {
			t.Fatalf("a fork's durable commands: %v %v", cmds, err)
		}
	}
	one.must(t, "echo one > only-in-one && rm fixed/f1")
	two.must(t, "echo two > only-in-two && echo changed > fixed/f2")
	if out := one.must(t, "cat fixed/f2; ls only-in-two 2>&1 || true"); !strings.HasPrefix(out, "file 2\n") || !strings.Contains(out, "No such file") {
		t.Fatalf("fork 1 sees fork 2's changes: %q", out)
	}
	if out := two.must(t, "cat fixed/f1; ls only-in-one 2>&1 || true"); !strings.HasPrefix(out, "file 1\n") || !strings.Contains(out, "No such file") {
		t.Fatalf("fork 2 sees fork 1's changes: %q", out)
	}
	if out := w.must(t, "cat fixed/f1 fixed/f2; ls only-in-one only-in-two 2>&1 || true"); !strings.HasPrefix(out, "file 1\nfile 2\n") || strings.Count(out, "No such file") != 2 {
		t.Fatalf("the source sees the forks' changes: %q", out)
	}

	// The snapshot outlives its source: deleted (its workspace with it), the snapshot is
	// still restored whole.
	if err := w.run.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if err := w.env.Delete(ctx(t), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "the source's workspace claim gone", func() bool {
		_, err := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx(t), storage.SourceClaim, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	if got, err := s.caller.GetSnapshot(ctx(t), owner, "mid-write"); err != nil || got.GetState() != client.SnapshotReady {
		t.Fatalf("the snapshot after its source's deletion: %v %v", got, err)
	}
	_, threeTree := fork("fork-3")
	sameTree(t, "fork 3, of a deleted source", withoutRecords(threeTree), want)

	if list, err := s.caller.Snapshots(ctx(t), owner); err != nil || len(list) != 1 || list[0].GetName() != "mid-write" {
		t.Fatalf("the owner's list: %v %v", list, err)
	}
	if _, err := s.caller.DeleteSnapshot(ctx(t), owner, "mid-write"); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "the snapshot and its storage gone", func() bool {
		_, err := s.exec.ExecutionV1alpha1().ExecutionSnapshots(ns).Get(ctx(t), stored.Items[0].Name, metav1.GetOptions{})
		if csi {
			_, serr := os.Stat(snapDir)
			return apierrors.IsNotFound(err) && errors.Is(serr, os.ErrNotExist)
		}
		_, cerr := kube.CoreV1().PersistentVolumeClaims(ns).Get(ctx(t), storage.Name, metav1.GetOptions{})
		return apierrors.IsNotFound(err) && apierrors.IsNotFound(cerr)
	})
	if _, err := s.caller.GetSnapshot(ctx(t), owner, "mid-write"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a deleted snapshot: %v", err)
	}
	// The forks keep their files without the snapshot.
	if out := one.must(t, "cat fixed/f3 only-in-one"); out != "file 3\none\n" {
		t.Fatalf("fork 1 after the snapshot's deletion: %q", out)
	}
}

// withoutRecords is a tree less the durable commands' records (a fork's own helper makes
// them).
func withoutRecords(tr map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range tr {
		if k != ".execplane" && !strings.HasPrefix(k, ".execplane/") {
			out[k] = v
		}
	}
	return out
}

// A snapshot's storage counts against the owner's storage quota with the environments': a
// snapshot, or an environment, beyond it is refused QUOTA_EXCEEDED before anything is made,
// and the storage is given back when the snapshot is deleted. The usage ledger counts its
// storage over time in a record of its own.
func TestSnapshotCountsAgainstTheStorageQuota(t *testing.T) {
	quotas := filepath.Join(t.TempDir(), "quotas.yaml")
	if err := os.WriteFile(quotas, []byte("defaults:\n  owner:\n    storage: 2Gi\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startSystemArgs(t, []string{"--quotas", quotas, "--usage-checkpoint-interval", "2s"})
	quotaOwner := client.Owner{Issuer: owner.Issuer, Subject: "quota"}
	env, err := s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: quotaOwner, BindingID: "quota-source", Profile: profileExample})
	if err != nil {
		t.Fatal(err)
	}
	if snap, err := env.Snapshot(ctx(t), "within"); err != nil || snap.GetState() != client.SnapshotReady {
		t.Fatalf("a snapshot within the quota (1 GiB of 2 GiB held): %v %v", snap, err)
	}
	clustertest.Eventually(t, time.Minute, "the snapshot's storage in the usage ledger", func() bool {
		for rec, err := range s.caller.ListUsage(ctx(t), client.ListUsageOptions{Owner: quotaOwner}) {
			if err != nil {
				t.Fatal(err)
			}
			if rec.GetSnapshot() == "within" && rec.GetBindingId() == "quota-source" && rec.GetWindow().GetUsage().GetStorageKibSeconds() > 0 &&
				rec.GetWindow().GetUsage().GetCpuNanoseconds() == 0 {
				return true
			}
		}
		return false
	})
	storageRefusal := func(what string, err error) {
		t.Helper()
		var e *client.Error
		if !errors.Is(err, client.ErrQuotaExceeded) || !errors.As(err, &e) || e.Metadata["quota"] != "storage" || e.Metadata["used"] != strconv.Itoa(2<<30) {
			t.Fatalf("%s beyond the storage quota: %v", what, err)
		}
	}
	_, err = env.Snapshot(ctx(t), "beyond")
	storageRefusal("a snapshot", err)
	if _, err := s.caller.GetSnapshot(ctx(t), quotaOwner, "beyond"); !errors.Is(err, client.ErrNotFound) {
		t.Fatalf("a refused snapshot left something: %v", err)
	}
	_, err = s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: quotaOwner, BindingID: "quota-other", Profile: profileExample})
	storageRefusal("an environment", err)
	if _, err := s.caller.DeleteSnapshot(ctx(t), quotaOwner, "within"); err != nil {
		t.Fatal(err)
	}
	clustertest.Eventually(t, time.Minute, "the storage given back with the snapshot", func() bool {
		_, err := s.caller.Ensure(ctx(t), client.EnsureRequest{Owner: quotaOwner, BindingID: "quota-other", Profile: profileExample})
		return err == nil
	})
}
