package csidriver

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// volume is one volume: a directory under volumes/.
type volume struct {
	ID    string `json:"id"`
	Name  string `json:"name"`
	Bytes int64  `json:"bytes"`
	// Snapshot or Clone is what it was filled from (an ID), at most one.
	Snapshot string `json:"snapshot,omitempty"`
	Clone    string `json:"clone,omitempty"`
}

// snapshot is one snapshot: a directory under snapshots/.
type snapshot struct {
	ID     string    `json:"id"`
	Name   string    `json:"name"`
	Source string    `json:"source"`
	Bytes  int64     `json:"bytes"`
	Taken  time.Time `json:"taken"`
}

// state is what the driver knows, kept in state.json so that it survives a restart.
type state struct {
	Volumes   map[string]*volume   `json:"volumes"`
	Snapshots map[string]*snapshot `json:"snapshots"`
}

// Directories and files under the state directory.
const (
	stateFile    = "state.json"
	volumesDir   = "volumes"
	snapshotsDir = "snapshots"
	scratchDir   = "tmp"
)

// objectID is the ID of the volume or snapshot (kind "v" or "s") named name: derived from the
// name, so that a request repeated after a crash finds what the first one made.
func objectID(kind, name string) string {
	sum := sha256.Sum256([]byte(name))
	return kind + "-" + hex.EncodeToString(sum[:16])
}

// load reads the state directory's state (empty when new) and removes the scratch copies a
// crash left.
func load(dir string) (*state, error) {
	for _, d := range []string{volumesDir, snapshotsDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o750); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(filepath.Join(dir, scratchDir)); err != nil {
		return nil, err
	}
	if err := os.Mkdir(filepath.Join(dir, scratchDir), 0o750); err != nil {
		return nil, err
	}
	st := &state{Volumes: map[string]*volume{}, Snapshots: map[string]*snapshot{}}
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, fs.ErrNotExist) {
		return st, nil
	} else if err != nil {
		return nil, err
	}
	if err := json.Unmarshal(data, st); err != nil {
		return nil, fmt.Errorf("csidriver: %s: %w", stateFile, err)
	}
	if st.Volumes == nil {
		st.Volumes = map[string]*volume{}
	}
	if st.Snapshots == nil {
		st.Snapshots = map[string]*snapshot{}
	}
	return st, nil
}

// save writes the state atomically.
func (st *state) save(dir string) error {
	data, err := json.Marshal(st)
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, scratchDir, stateFile)
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, stateFile))
}

// copyTree makes dst a copy of the directory src — contents, modes, owners, times, links —
// through a scratch directory, so that dst is whole or absent. Its callers' state does not
// list dst: what is there is an earlier attempt's (its state not written, perhaps of
// another source), and is replaced.
func copyTree(stateDir, src, dst string) error {
	if err := discard(stateDir, dst); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Join(stateDir, scratchDir), "copy-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	into := filepath.Join(tmp, "tree")
	if out, err := exec.Command("cp", "-a", "--reflink=auto", src, into).CombinedOutput(); err != nil {
		return fmt.Errorf("csidriver: copy: %v: %s", err, bounded(out))
	}
	return os.Rename(into, dst)
}

// makeDir makes dst an empty volume directory, through the scratch directory (what an
// earlier attempt left there is replaced, as copyTree's).
func makeDir(stateDir, dst string) error {
	if err := discard(stateDir, dst); err != nil {
		return err
	}
	tmp, err := os.MkdirTemp(filepath.Join(stateDir, scratchDir), "new-")
	if err != nil {
		return err
	}
	// The kubelet gives the root to the Pods' fsGroup (the CSIDriver's fsGroupPolicy File).
	if err := os.Chmod(tmp, 0o750); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

// discard moves dir (if any) into the scratch directory, which the next start empties, and
// removes it: a crash midway never leaves a half-removed tree under an ID.
func discard(stateDir, dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(stateDir, scratchDir), "gone-")
	if err != nil {
		return err
	}
	if err := os.Rename(dir, filepath.Join(tmp, "tree")); err != nil {
		return err
	}
	return os.RemoveAll(tmp)
}

// treeBytes is the size of the regular files under dir.
func treeBytes(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	return n, err
}

func bounded(b []byte) string {
	if len(b) > 512 {
		b = b[:512]
	}
	return string(b)
}

// VolumeDir is where a driver with state directory stateDir keeps the volume id's files.
func VolumeDir(stateDir, id string) string {
	return filepath.Join(stateDir, volumesDir, filepath.Base(id))
}

// SnapshotDir is where a driver with state directory stateDir keeps the snapshot id's files.
func SnapshotDir(stateDir, id string) string {
	return filepath.Join(stateDir, snapshotsDir, filepath.Base(id))
}
