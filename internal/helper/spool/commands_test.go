package spool

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// names lists a directory's entries, sorted.
func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := []string{}
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func testRecord() *helperv1.CommandRecord {
	return &helperv1.CommandRecord{
		Info: &executionv1.CommandInfo{
			CommandId:   "build-1",
			State:       executionv1.CommandState_COMMAND_STATE_RUNNING,
			Program:     &executionv1.CommandProgram{Argv: []string{"make", "-j8"}, WorkingDirectory: []byte("src"), Cut: true},
			RunId:       "run-7",
			Epoch:       3,
			StartedAt:   timestamppb.New(time.Date(2025, 3, 4, 5, 6, 7, 8, time.UTC)),
			Detached:    true,
			StdoutBytes: 1 << 40,
			StderrBytes: 17,
			Message:     "volume full",
		},
		SpecDigest: "sha256:00ff",
		Supervisor: &helperv1.Supervisor{Pid: 42, StartTicks: 123456789, PidNamespace: "pid:[4026531836]"},
		Ended:      true,
		Pgid:       41,
	}
}

// recordOfSize pads testRecord's digest so that its encoding is exactly n bytes.
func recordOfSize(t *testing.T, n int) *helperv1.CommandRecord {
	t.Helper()
	rec := testRecord()
	for range 10 {
		size := proto.Size(rec)
		if size == n {
			return rec
		}
		rec.SpecDigest = strings.Repeat("d", len(rec.SpecDigest)+n-size)
	}
	t.Fatalf("no record of %d bytes", n)
	return nil
}

// newCommand makes a workspace root and one command's directory in it.
func newCommand(t *testing.T) (path string, dir int) {
	t.Helper()
	root := t.TempDir()
	c, err := OpenCommands(root, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	dir, err = c.Create("cmd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(dir) })
	return filepath.Join(root, ReservedName, "commands", "cmd"), dir
}

// A record written reads back equal, a second write replaces it whole, a record of exactly
// MaxRecordBytes is accepted, and no write leaves record.tmp behind.
func TestRecordRoundTrip(t *testing.T) {
	path, dir := newCommand(t)
	second := testRecord()
	second.Info.State = executionv1.CommandState_COMMAND_STATE_FAILED
	second.Supervisor = nil
	for _, rec := range []*helperv1.CommandRecord{testRecord(), second, {Info: &executionv1.CommandInfo{}}, recordOfSize(t, MaxRecordBytes)} {
		if err := WriteRecord(dir, rec, nil); err != nil {
			t.Fatalf("WriteRecord: %v", err)
		}
		got, _, err := ReadRecord(dir, nil)
		if err != nil {
			t.Fatalf("ReadRecord: %v", err)
		}
		if diff := cmp.Diff(rec, got, protocmp.Transform()); diff != "" {
			t.Fatalf("(-written +read):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"record"}, names(t, path)); diff != "" {
			t.Fatalf("the command's directory (-want +got):\n%s", diff)
		}
	}
}

// A record WriteRecord cannot make — over MaxRecordBytes, or a rename onto a directory the
// workload made — fails, leaves the record that was there, and leaves no record.tmp.
func TestWriteRecordFailures(t *testing.T) {
	t.Run("over the cap", func(t *testing.T) {
		path, dir := newCommand(t)
		if err := WriteRecord(dir, testRecord(), nil); err != nil {
			t.Fatal(err)
		}
		if err := WriteRecord(dir, recordOfSize(t, MaxRecordBytes+1), nil); err == nil {
			t.Fatal("a record over MaxRecordBytes written")
		}
		got, _, err := ReadRecord(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(testRecord(), got, protocmp.Transform()); diff != "" {
			t.Fatalf("the record was changed (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]string{"record"}, names(t, path)); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
	t.Run("the record is a directory", func(t *testing.T) {
		path, dir := newCommand(t)
		if err := os.MkdirAll(filepath.Join(path, "record", "x"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := WriteRecord(dir, testRecord(), nil); err == nil {
			t.Fatal("WriteRecord renamed onto a non-empty directory")
		}
		if diff := cmp.Diff([]string{"record"}, names(t, path)); diff != "" {
			t.Fatalf("(-want +got):\n%s", diff)
		}
	})
	t.Run("record.tmp is a symlink", func(t *testing.T) {
		path, dir := newCommand(t)
		outside := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(outside, []byte("untouched"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(outside, filepath.Join(path, "record.tmp")); err != nil {
			t.Fatal(err)
		}
		_ = WriteRecord(dir, testRecord(), nil) // may fail: the workload broke its own record
		if b, err := os.ReadFile(outside); err != nil || string(b) != "untouched" {
			t.Fatalf("the link's target is now %q, %v", b, err)
		}
	})
}

// withUnknown appends a field no version of CommandRecord has to an encoding.
func withUnknown(b []byte) []byte {
	b = protowire.AppendTag(b, 999, protowire.BytesType)
	return protowire.AppendBytes(b, []byte("x"))
}

// A record that is not one a supervisor wrote — a symlink (even to a valid record), a
// directory, a FIFO, too large, undecodable, with unknown fields, without its info — is
// ErrBadRecord; a missing one is ErrNoCommand. ReadRecord never hangs or panics.
func TestReadRecordHostile(t *testing.T) {
	valid, err := proto.Marshal(testRecord())
	if err != nil {
		t.Fatal(err)
	}
	info, err := proto.Marshal(testRecord().GetInfo())
	if err != nil {
		t.Fatal(err)
	}
	nestedUnknown := protowire.AppendTag(nil, 1, protowire.BytesType) // CommandRecord.info
	nestedUnknown = protowire.AppendBytes(nestedUnknown, withUnknown(info))
	padded, err := proto.Marshal(recordOfSize(t, MaxRecordBytes+1))
	if err != nil {
		t.Fatal(err)
	}
	noInfo, err := proto.Marshal(&helperv1.CommandRecord{SpecDigest: "x", Ended: true})
	if err != nil {
		t.Fatal(err)
	}
	file := func(b []byte) func(*testing.T, string) {
		return func(t *testing.T, p string) {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	cases := []struct {
		name  string
		plant func(t *testing.T, path string)
		want  error
	}{
		{"missing", func(*testing.T, string) {}, ErrNoCommand},
		{"a symlink to a valid record", func(t *testing.T, p string) {
			file(valid)(t, p+".real")
			if err := os.Symlink(filepath.Base(p)+".real", p); err != nil {
				t.Fatal(err)
			}
		}, ErrBadRecord},
		{"a dangling symlink", func(t *testing.T, p string) {
			if err := os.Symlink("/nonexistent/record", p); err != nil {
				t.Fatal(err)
			}
		}, ErrBadRecord},
		{"a directory", func(t *testing.T, p string) {
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
		}, ErrBadRecord},
		{"a FIFO", func(t *testing.T, p string) {
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, ErrBadRecord},
		{"one byte over MaxRecordBytes", file(padded), ErrBadRecord},
		{"a sparse GiB", func(t *testing.T, p string) {
			file(valid)(t, p)
			if err := os.Truncate(p, 1<<30); err != nil {
				t.Fatal(err)
			}
		}, ErrBadRecord},
		{"empty", file(nil), ErrBadRecord},
		{"garbage", file([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02}), ErrBadRecord},
		{"truncated", file(valid[:len(valid)-3]), ErrBadRecord},
		{"an unknown field", file(withUnknown(valid)), ErrBadRecord},
		{"an unknown field in the info", file(nestedUnknown), ErrBadRecord},
		{"no info", file(noInfo), ErrBadRecord},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, dir := newCommand(t)
			tc.plant(t, filepath.Join(path, "record"))
			type result struct {
				rec *helperv1.CommandRecord
				err error
			}
			ch := make(chan result, 1)
			go func() {
				rec, _, err := ReadRecord(dir, nil)
				ch <- result{rec, err}
			}()
			select {
			case r := <-ch:
				if r.rec != nil || !errors.Is(r.err, tc.want) {
					t.Fatalf("ReadRecord = %v, %v; want nil, %v", r.rec, r.err, tc.want)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("ReadRecord hangs")
			}
		})
	}
}

// On a root that never ran a durable command, OpenCommands without create is ErrNoCommand and
// makes nothing; with create it makes .execplane/commands (directories of mode 0700), again
// without error, and it opens afterwards without create.
func TestOpenCommands(t *testing.T) {
	root := t.TempDir()
	if c, err := OpenCommands(root, false); !errors.Is(err, ErrNoCommand) {
		t.Fatalf("OpenCommands(fresh, false) = %v, %v; want ErrNoCommand", c, err)
	}
	if diff := cmp.Diff([]string{}, names(t, root)); diff != "" {
		t.Fatalf("the fresh root (-want +got):\n%s", diff)
	}
	for _, create := range []bool{true, true, false} {
		c, err := OpenCommands(root, create)
		if err != nil {
			t.Fatalf("OpenCommands(%v): %v", create, err)
		}
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{ReservedName, filepath.Join(ReservedName, "commands")} {
		st, err := os.Lstat(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		if !st.IsDir() || st.Mode().Perm() != 0o700 {
			t.Errorf("%s: mode %v, want a directory of 0700", p, st.Mode())
		}
	}
	if _, err := OpenCommands(filepath.Join(root, "missing"), true); err == nil {
		t.Error("OpenCommands on a missing root succeeded")
	}
}

// A symbolic link at <root>/.execplane or <root>/.execplane/commands — to a directory inside
// the root or outside it, even one that holds a valid layout, or dangling — makes
// OpenCommands fail, with or without create, and nothing is created through it.
func TestOpenCommandsFollowsNoSymlink(t *testing.T) {
	cases := []struct {
		name string
		// plant makes the link in root and returns the directory it points at.
		plant func(t *testing.T, root, outside string) string
	}{
		{".execplane to a directory inside the root", func(t *testing.T, root, _ string) string {
			mustMkdir(t, filepath.Join(root, "inside"))
			mustSymlink(t, "inside", filepath.Join(root, ReservedName))
			return filepath.Join(root, "inside")
		}},
		{".execplane to a directory inside holding commands", func(t *testing.T, root, _ string) string {
			mustMkdir(t, filepath.Join(root, "inside", "commands"))
			mustSymlink(t, filepath.Join(root, "inside"), filepath.Join(root, ReservedName))
			return filepath.Join(root, "inside")
		}},
		{".execplane to a directory outside", func(t *testing.T, root, outside string) string {
			mustSymlink(t, outside, filepath.Join(root, ReservedName))
			return outside
		}},
		{".execplane to a directory outside holding commands", func(t *testing.T, root, outside string) string {
			mustMkdir(t, filepath.Join(outside, "commands"))
			mustSymlink(t, outside, filepath.Join(root, ReservedName))
			return outside
		}},
		{".execplane dangling outside", func(t *testing.T, root, outside string) string {
			mustSymlink(t, filepath.Join(outside, "made"), filepath.Join(root, ReservedName))
			return outside
		}},
		{"commands to a directory outside", func(t *testing.T, root, outside string) string {
			mustMkdir(t, filepath.Join(root, ReservedName))
			mustSymlink(t, outside, filepath.Join(root, ReservedName, "commands"))
			return outside
		}},
		{"commands dangling outside", func(t *testing.T, root, outside string) string {
			mustMkdir(t, filepath.Join(root, ReservedName))
			mustSymlink(t, filepath.Join(outside, "made"), filepath.Join(root, ReservedName, "commands"))
			return outside
		}},
	}
	for _, tc := range cases {
		for _, create := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/create=%v", tc.name, create), func(t *testing.T) {
				root, outside := t.TempDir(), t.TempDir()
				target := tc.plant(t, root, outside)
				before := names(t, target)
				c, err := OpenCommands(root, create)
				if err == nil {
					c.Close()
					t.Fatalf("OpenCommands(create=%v) followed the link", create)
				}
				if diff := cmp.Diff(before, names(t, target)); diff != "" {
					t.Fatalf("create=%v: the link's target changed (-before +after):\n%s", create, diff)
				}
			})
		}
	}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o700); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, link string) {
	t.Helper()
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

func openCommands(t *testing.T, root string) *Commands {
	t.Helper()
	c, err := OpenCommands(root, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Create makes a command's directory once (ErrExists the second time); Open opens it and
// answers ErrNoCommand for a missing id, a file, and a symlink (to a directory outside).
func TestCreateOpen(t *testing.T) {
	root := t.TempDir()
	c := openCommands(t, root)
	fd, err := c.Create("a")
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	if fd, err := c.Create("a"); !errors.Is(err, ErrExists) {
		t.Fatalf("Create twice = %d, %v; want ErrExists", fd, err)
	}
	fd, err = c.Open("a")
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	unix.Close(fd)
	commands := filepath.Join(root, ReservedName, "commands")
	if err := os.WriteFile(filepath.Join(commands, "file"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	mustSymlink(t, t.TempDir(), filepath.Join(commands, "link"))
	for _, id := range []string{"missing", "file", "link"} {
		if fd, err := c.Open(id); !errors.Is(err, ErrNoCommand) {
			t.Errorf("Open(%q) = %d, %v; want ErrNoCommand", id, fd, err)
		}
	}
}

// IDs lists every command directory made, and not the lock file.
func TestIDs(t *testing.T) {
	c := openCommands(t, t.TempDir())
	if ids, err := c.IDs(); err != nil || len(ids) != 0 {
		t.Fatalf("IDs of none = %v, %v", ids, err)
	}
	want := []string{"a", "b-2", "c.3"}
	for _, id := range want {
		fd, err := c.Create(id)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
	}
	unlock, err := c.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	got, err := c.IDs()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("IDs (-want +got):\n%s", diff)
	}
}

// Remove deletes a command's directory with its record, its streams and their segments,
// follows no link it finds there (their targets stay), and leaves other commands; a missing
// id is ErrNoCommand; something deeper than a stream's segments makes it fail.
func TestRemove(t *testing.T) {
	root := t.TempDir()
	c := openCommands(t, root)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	commands := filepath.Join(root, ReservedName, "commands")
	for _, id := range []string{"gone", "kept"} {
		dir, err := c.Create(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range []executionv1.OutputStream{stdout, stderr} {
			w, err := NewWriter(dir, s, 100)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(output(7, 5*4096+1)) // several segments, some dropped
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		}
		if err := WriteRecord(dir, testRecord(), nil); err != nil {
			t.Fatal(err)
		}
		unix.Close(dir)
	}
	gone := filepath.Join(commands, "gone")
	mustSymlink(t, outside, filepath.Join(gone, "link"))
	mustSymlink(t, filepath.Join(outside, "keep"), filepath.Join(gone, "stdout", "link"))
	if err := os.WriteFile(filepath.Join(gone, "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Remove("gone"); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if fd, err := c.Open("gone"); !errors.Is(err, ErrNoCommand) {
		t.Fatalf("Open after Remove = %d, %v", fd, err)
	}
	if _, err := os.Lstat(gone); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the directory is still there: %v", err)
	}
	ids, err := c.IDs()
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"kept"}, ids); diff != "" {
		t.Fatalf("IDs (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"keep"}, names(t, outside)); diff != "" {
		t.Fatalf("outside the root (-want +got):\n%s", diff)
	}
	if err := c.Remove("gone"); !errors.Is(err, ErrNoCommand) {
		t.Fatalf("Remove of a missing id = %v, want ErrNoCommand", err)
	}
	mustMkdir(t, filepath.Join(commands, "kept", "stdout", "deeper", "still"))
	if err := c.Remove("kept"); err == nil {
		t.Fatal("Remove of a command holding a deeper tree succeeded")
	}
}

// tryLock reports whether the command lock of root is free, taking and releasing it through
// a descriptor of its own without waiting.
func tryLock(t *testing.T, root string) bool {
	t.Helper()
	fd, err := unix.Open(filepath.Join(root, ReservedName, "commands", ".lock"), unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if errors.Is(err, unix.EWOULDBLOCK) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// The command lock is exclusive between two Commands opened on the same root: while one
// holds it, another's Lock waits, and it gets the lock once the first unlocks.
func TestLockExclusive(t *testing.T) {
	root := t.TempDir()
	first, second := openCommands(t, root), openCommands(t, root)
	unlock, err := first.Lock()
	if err != nil {
		t.Fatal(err)
	}
	if tryLock(t, root) {
		t.Fatal("the lock is free while held")
	}
	type result struct {
		unlock func()
		err    error
	}
	got := make(chan result, 1)
	go func() {
		u, err := second.Lock()
		got <- result{u, err}
	}()
	select {
	case r := <-got:
		if r.err == nil {
			r.unlock()
		}
		t.Fatalf("the second Lock returned (%v) while the first holds it", r.err)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	select {
	case r := <-got:
		if r.err != nil {
			t.Fatalf("the second Lock: %v", r.err)
		}
		if tryLock(t, root) {
			t.Fatal("the lock is free while the second holds it")
		}
		r.unlock()
	case <-time.After(30 * time.Second):
		t.Fatal("the second Lock still waits after the first unlocked")
	}
	if !tryLock(t, root) {
		t.Fatal("the lock is held after both unlocked")
	}
}

// Closing a Commands releases a lock taken through it (Close's and Lock's doc comments).
func TestCloseReleasesLock(t *testing.T) {
	root := t.TempDir()
	c, err := OpenCommands(root, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Lock(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if !tryLock(t, root) {
		t.Fatal("the lock is still held after Close")
	}
}

// A sealed record reads back sealed under its key, and under no other: another key of the
// same id, a key of another id, a flipped byte of the sealed bytes or of the seal, and a
// format this helper does not know are refused; an unsealed record reads unsealed.
func TestSealedRecords(t *testing.T) {
	key := &helperv1.RecordKey{Id: "k1", Key: bytes.Repeat([]byte{1}, protocol.RecordKeyBytes)}
	other := &helperv1.RecordKey{Id: "k1", Key: bytes.Repeat([]byte{2}, protocol.RecordKeyBytes)}
	otherID := &helperv1.RecordKey{Id: "k2", Key: key.Key}
	path, dir := newCommand(t)
	if err := WriteRecord(dir, testRecord(), key); err != nil {
		t.Fatal(err)
	}
	got, sealed, err := ReadRecord(dir, []*helperv1.RecordKey{other, key})
	if err == nil && !sealed {
		err = errors.New("read as unsealed")
	}
	if err != nil {
		t.Fatalf("ReadRecord under its key: %v", err)
	}
	if diff := cmp.Diff(testRecord(), got, protocmp.Transform()); diff != "" {
		t.Fatalf("(-written +read):\n%s", diff)
	}
	for name, keys := range map[string][]*helperv1.RecordKey{"none": nil, "another key": {other}, "another id": {otherID}} {
		if _, _, err := ReadRecord(dir, keys); !errors.Is(err, ErrUnverified) {
			t.Errorf("%s: ReadRecord = %v, want ErrUnverified", name, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(path, "record"))
	if err != nil {
		t.Fatal(err)
	}
	var seal helperv1.SealedRecord
	if err := proto.Unmarshal(data, &seal); err != nil {
		t.Fatal(err)
	}
	tamper := func(name string, change func(*helperv1.SealedRecord), want error) {
		s := proto.CloneOf(&seal)
		change(s)
		b, err := proto.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(path, "record"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, _, err := ReadRecord(dir, []*helperv1.RecordKey{key}); !errors.Is(err, want) {
			t.Errorf("%s: ReadRecord = %v, want %v", name, err, want)
		}
	}
	tamper("a flipped record byte", func(s *helperv1.SealedRecord) { s.Record[len(s.Record)/2] ^= 1 }, ErrUnverified)
	tamper("a flipped seal byte", func(s *helperv1.SealedRecord) { s.Mac[0] ^= 1 }, ErrUnverified)
	tamper("no seal", func(s *helperv1.SealedRecord) { s.Mac = nil }, ErrUnverified)
	tamper("format 3", func(s *helperv1.SealedRecord) { s.Format = 3 }, ErrBadRecord)
	if err := WriteRecord(dir, testRecord(), nil); err != nil {
		t.Fatal(err)
	}
	if _, sealed, err := ReadRecord(dir, []*helperv1.RecordKey{key}); err != nil || sealed {
		t.Fatalf("an unsealed record: sealed %v, %v", sealed, err)
	}
}
