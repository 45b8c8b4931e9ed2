package csidriver

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

var mountRW = []*csi.VolumeCapability{{
	AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
	AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
}}

func newDriver(t *testing.T, dir string) *Driver {
	t.Helper()
	d, err := New(Options{NodeID: "n", StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func write(t *testing.T, path, data string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(data), 0o640); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func code(err error) codes.Code { return status.Code(err) }

// A snapshot is the volume as it was; a volume restored from it or cloned is its own copy;
// all of it survives a restart of the driver.
func TestSnapshotRestoreAndClone(t *testing.T) {
	ctx, dir := context.Background(), t.TempDir()
	c := controller{d: newDriver(t, dir)}
	vol, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: mountRW,
		CapacityRange: &csi.CapacityRange{RequiredBytes: 1 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	src := c.d.path(volumesDir, vol.Volume.VolumeId)
	write(t, filepath.Join(src, "a/b.txt"), "before")
	if err := os.Symlink("a/b.txt", filepath.Join(src, "link")); err != nil {
		t.Fatal(err)
	}
	snap, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: vol.Volume.VolumeId})
	if err != nil {
		t.Fatal(err)
	}
	if !snap.Snapshot.ReadyToUse || snap.Snapshot.SizeBytes != int64(len("before")) || snap.Snapshot.CreationTime == nil {
		t.Fatalf("snapshot = %v", snap.Snapshot)
	}
	write(t, filepath.Join(src, "a/b.txt"), "after")
	// The same request is the same snapshot; the same name of another volume is refused.
	again, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: vol.Volume.VolumeId})
	if err != nil || again.Snapshot.SnapshotId != snap.Snapshot.SnapshotId || !again.Snapshot.CreationTime.AsTime().Equal(snap.Snapshot.CreationTime.AsTime()) {
		t.Fatalf("repeated CreateSnapshot = %v, %v", again, err)
	}
	if _, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "snap-1", SourceVolumeId: "v-other"}); code(err) != codes.AlreadyExists {
		t.Fatalf("same name, other source: %v", err)
	}

	c = controller{d: newDriver(t, dir)} // restarted
	restored, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-2", VolumeCapabilities: mountRW,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}}})
	if err != nil {
		t.Fatal(err)
	}
	dst := c.d.path(volumesDir, restored.Volume.VolumeId)
	if got := read(t, filepath.Join(dst, "link")); got != "before" {
		t.Fatalf("restored file (through its link) = %q, want the snapshot's", got)
	}
	if info, err := os.Stat(filepath.Join(dst, "a/b.txt")); err != nil || info.Mode().Perm() != 0o640 {
		t.Fatalf("restored mode = %v, %v", info, err)
	}
	clone, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-3", VolumeCapabilities: mountRW,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: vol.Volume.VolumeId}}}})
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dst, "a/b.txt"), "restored changed")
	if got := read(t, filepath.Join(c.d.path(volumesDir, clone.Volume.VolumeId), "a/b.txt")); got != "after" {
		t.Fatalf("clone = %q, want the source as it is now", got)
	}
	if got := read(t, filepath.Join(src, "a/b.txt")); got != "after" {
		t.Fatalf("source = %q after its restore changed", got)
	}
	if _, err := c.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-4", VolumeCapabilities: mountRW,
		VolumeContentSource: &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: "s-absent"}}}}); code(err) != codes.NotFound {
		t.Fatalf("restore of an absent snapshot: %v", err)
	}

	if _, err := c.DeleteSnapshot(ctx, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.d.path(snapshotsDir, snap.Snapshot.SnapshotId)); !os.IsNotExist(err) {
		t.Fatalf("deleted snapshot's directory: %v", err)
	}
	if got := read(t, filepath.Join(dst, "a/b.txt")); got != "restored changed" {
		t.Fatalf("a restored volume lost its files with its snapshot: %q", got)
	}
	list, err := c.ListSnapshots(ctx, &csi.ListSnapshotsRequest{})
	if err != nil || len(list.Entries) != 0 {
		t.Fatalf("ListSnapshots after delete = %v, %v", list, err)
	}
}

// IDs are names, never paths: an ID with a separator or a dot-dot reaches nothing outside
// the state directory.
func TestIDsAreNotPaths(t *testing.T) {
	ctx, dir := context.Background(), t.TempDir()
	outside := filepath.Join(t.TempDir(), "keep")
	write(t, filepath.Join(outside, "file"), "x")
	c := controller{d: newDriver(t, dir)}
	for _, id := range []string{"..", "../../" + filepath.Base(filepath.Dir(outside)), outside} {
		if _, err := c.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
			t.Fatalf("DeleteVolume(%q): %v", id, err)
		}
		if _, err := c.CreateSnapshot(ctx, &csi.CreateSnapshotRequest{Name: "s", SourceVolumeId: id}); code(err) != codes.NotFound {
			t.Fatalf("CreateSnapshot of %q: %v", id, err)
		}
	}
	if got := read(t, filepath.Join(outside, "file")); got != "x" {
		t.Fatal("a file outside the state directory changed")
	}
	if _, err := os.Stat(filepath.Join(dir, volumesDir)); err != nil {
		t.Fatalf("the volumes directory: %v", err)
	}
}
