package quiesce

import (
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// MarkerPath is where a hold is recorded while it lasts: the temporary directory, in an
// executor the Pod's own /tmp (a tmpfs of that Pod, $TMPDIR), which every helper invocation
// in the Pod sees. A variable for tests.
var MarkerPath = filepath.Join(os.TempDir(), ".execplane-quiesce")

// MaxHold bounds a hold (a profile's maxQuiesce is at most 30 minutes); a marker whose
// deadline is further away than this is not a hold the helper wrote, and is dropped.
const MaxHold = 31 * time.Minute

// maxMarkerBytes bounds what is read of a marker (the workload may write the file too: it
// runs as the same user; all it can do with it is hold or free its own commands).
const maxMarkerBytes = 1 << 20

// Marker records a hold: until when, and what it stopped.
type Marker struct {
	Deadline time.Time `json:"deadline"`
	Procs    []Proc    `json:"procs,omitempty"`
}

// Mark records m at MarkerPath, replacing it whole (a temporary file renamed).
func Mark(m Marker) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	tmp := MarkerPath + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, MarkerPath)
}

// Unmark ends the hold's record.
func Unmark() { _ = os.Remove(MarkerPath) }

// Held reports whether a hold is in force at now: commands do not start while it is. A
// hold past its deadline (its quiescer killed before it could end it) is ended here: what it
// stopped is continued and the marker removed. An unreadable marker, or one whose deadline
// is beyond MaxHold, is removed.
func Held(now time.Time) bool {
	f, err := os.Open(MarkerPath)
	if err != nil {
		// Absent (no hold), or unreadable: a hold the helper cannot read is not its own.
		if !errors.Is(err, fs.ErrNotExist) {
			Unmark()
		}
		return false
	}
	var m Marker
	err = json.NewDecoder(io.LimitReader(f, maxMarkerBytes)).Decode(&m)
	f.Close()
	switch {
	case err != nil, m.Deadline.After(now.Add(MaxHold)):
		Unmark()
		return false
	case now.Before(m.Deadline):
		return true
	}
	Continue(m.Procs)
	Unmark()
	return false
}
