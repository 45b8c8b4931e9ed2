package realnode_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
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
