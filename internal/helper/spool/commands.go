package spool

import (
	"crypto/hmac"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// The reserved place of the spool, beneath the workspace root.
const (
	// ReservedName is the root entry the file API refuses and its walks pass by.
	ReservedName = protocol.ReservedDir
	commandsName = "commands"
	recordName   = "record"
	recordTemp   = "record.tmp"
	lockName     = ".lock"
)

// MaxRecordBytes bounds a record file: a record holds a program cut to 1 KiB, a few ids and
// a result without output; anything larger is not one of ours.
const MaxRecordBytes = 64 << 10

// maxCommandsListed bounds the command directories one listing reads: retention keeps far
// fewer; beyond, the workload made them.
const maxCommandsListed = 10000

// resolveStrict confines every open beneath the root and follows no symbolic link at all.
const resolveStrict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// ErrNoCommand is returned for a command id without a directory.
var ErrNoCommand = errors.New("no such command")

// ErrExists is returned by Create for an id that has a directory already.
var ErrExists = errors.New("the command exists")

// Commands is the open directory of a workspace's commands.
type Commands struct {
	fd   int
	lock int // the lock's descriptor while held, else -1
}

// OpenCommands opens <root>/.execplane/commands, creating it when create is set. Without
// create, a workspace that never ran a durable command answers ErrNoCommand.
func OpenCommands(root string, create bool) (*Commands, error) {
	rfd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spool: workspace root: %w", err)
	}
	defer unix.Close(rfd)
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveStrict}
	if create {
		for _, p := range []string{ReservedName, ReservedName + "/" + commandsName} {
			parent, name := rfd, p
			if p != ReservedName {
				pfd, err := unix.Openat2(rfd, ReservedName, how)
				if err != nil {
					return nil, fmt.Errorf("spool: %s: %w", ReservedName, err)
				}
				defer unix.Close(pfd)
				parent, name = pfd, commandsName
			}
			if err := unix.Mkdirat(parent, name, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf("spool: %s: %w", p, err)
			}
		}
	}
	fd, err := unix.Openat2(rfd, ReservedName+"/"+commandsName, how)
	if errors.Is(err, unix.ENOENT) {
		return nil, ErrNoCommand
	}
	if err != nil {
		return nil, fmt.Errorf("spool: %s/%s: %w", ReservedName, commandsName, err)
	}
	return &Commands{fd: fd, lock: -1}, nil
}

// Close releases the directory and any lock taken through it.
func (c *Commands) Close() error {
	c.unlock()
	return unix.Close(c.fd)
}

func (c *Commands) unlock() {
	if c.lock >= 0 {
		unix.Close(c.lock)
		c.lock = -1
	}
}

// lockWait bounds the wait for the command lock: a start holds it for a fork, an exec and
// a few small writes; a workload that holds it itself (it can: it owns the volume) makes
// starts and listings answer UNAVAILABLE instead of hanging.
const lockWait = 10 * time.Second

// lockPoll is how often a waiting lock is tried again.
const lockPoll = 5 * time.Millisecond

// ErrLockBusy is returned by Lock when the lock was not free within lockWait.
var ErrLockBusy = errors.New("the workspace's command lock is held by someone else")

// Lock takes the workspace's command lock (flock, exclusive, tried for at most lockWait):
// starts count the running commands under it. The returned function releases it, as does
// Close.
func (c *Commands) Lock() (unlock func(), err error) {
	if c.lock >= 0 {
		return nil, errors.New("spool: the lock is held already")
	}
	fd, err := openRegular(c.fd, lockName, unix.O_RDWR|unix.O_CREAT)
	if err != nil {
		return nil, fmt.Errorf("spool: lock: %w", err)
	}
	deadline := time.Now().Add(lockWait)
	for {
		err = unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB)
		if errors.Is(err, unix.EWOULDBLOCK) && time.Now().Before(deadline) {
			time.Sleep(lockPoll)
			continue
		}
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if errors.Is(err, unix.EWOULDBLOCK) {
		err = ErrLockBusy
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("spool: lock: %w", err)
	}
	c.lock = fd
	return c.unlock, nil
}

// openRegular opens a name of dir that must be a regular file, never blocking on what a
// workload may have put there instead (a FIFO, a device) and never following a link.
func openRegular(dir int, name string, flags int) (int, error) {
	fd, err := unix.Openat(dir, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = fmt.Errorf("%s is not a regular file", name)
		}
		return -1, err
	}
	return fd, nil
}

// Create makes a command's directory and returns a descriptor of it.
func (c *Commands) Create(id string) (int, error) {
	if err := unix.Mkdirat(c.fd, id, 0o700); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return -1, ErrExists
		}
		return -1, fmt.Errorf("spool: command directory: %w", err)
	}
	return c.Open(id)
}

// Open returns a descriptor of a command's directory.
func (c *Commands) Open(id string) (int, error) {
	fd, err := unix.Openat(c.fd, id, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP) {
		return -1, ErrNoCommand
	}
	if err != nil {
		return -1, fmt.Errorf("spool: command directory: %w", err)
	}
	return fd, nil
}

// IDs lists the command directories' names, at most maxCommandsListed, unvalidated: the
// caller keeps those that are ids.
func (c *Commands) IDs() ([]string, error) {
	names, err := readNames(c.fd, maxCommandsListed)
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if n != lockName {
			out = append(out, n)
		}
	}
	return out, nil
}

// Remove deletes a command's directory and what it holds (two levels: streams and their
// segments; anything deeper is the workload's and makes the removal fail).
func (c *Commands) Remove(id string) error {
	dir, err := c.Open(id)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	names, err := readNames(dir, maxSegmentsListed)
	if err != nil {
		return err
	}
	for _, n := range names {
		if err := unix.Unlinkat(dir, n, 0); errors.Is(err, unix.EISDIR) {
			if sub, err := unix.Openat(dir, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
				inner, _ := readNames(sub, maxSegmentsListed)
				for _, m := range inner {
					_ = unix.Unlinkat(sub, m, 0)
				}
				unix.Close(sub)
			}
			_ = unix.Unlinkat(dir, n, unix.AT_REMOVEDIR)
		}
	}
	return unix.Unlinkat(c.fd, id, unix.AT_REMOVEDIR)
}

// WriteRecord replaces a command's record whole: a temporary file, fsync, rename, and an
// fsync of the directory. With a key it is sealed (helperv1.SealedRecord) under it; without
// one (a gateway of an older release gave none) it is written unsealed, and reads as
// unverified.
func WriteRecord(commandDir int, rec *helperv1.CommandRecord, key *helperv1.RecordKey) error {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(rec)
	if err != nil {
		return err
	}
	if key != nil {
		data, err = proto.MarshalOptions{Deterministic: true}.Marshal(&helperv1.SealedRecord{
			Format: protocol.RecordFormatSealed, Record: data, KeyId: key.GetId(), Mac: protocol.RecordMAC(key.GetKey(), data)})
		if err != nil {
			return err
		}
	}
	if len(data) > MaxRecordBytes {
		return fmt.Errorf("spool: a record of %d bytes is over %d", len(data), MaxRecordBytes)
	}
	// A name of its own per write (helpers may record the same abandoned command at once),
	// created exclusively (nothing the workload put there is written through).
	var suffix [8]byte
	_, _ = rand.Read(suffix[:])
	temp := recordTemp + "." + hex.EncodeToString(suffix[:])
	fd, err := unix.Openat(commandDir, temp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("spool: record: %w", err)
	}
	err = writeAll(fd, data)
	if err == nil {
		err = unix.Fsync(fd)
	}
	unix.Close(fd)
	if err == nil {
		err = unix.Renameat(commandDir, temp, commandDir, recordName)
	}
	if err != nil {
		_ = unix.Unlinkat(commandDir, temp, 0)
		return fmt.Errorf("spool: record: %w", err)
	}
	_ = unix.Fsync(commandDir) // the rename's durability; the record itself is safe
	return nil
}

// ReadRecord reads and strictly decodes a command's record, and proves it: a sealed record
// must verify under the key of its id among keys (the command's keys), or it is
// ErrUnverified; an unsealed one (an older helper's, or the workload's) is answered with
// sealed false. A missing record (a start that died before its first write) is
// ErrNoCommand.
func ReadRecord(commandDir int, keys []*helperv1.RecordKey) (rec *helperv1.CommandRecord, sealed bool, err error) {
	fd, err := unix.Openat(commandDir, recordName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, false, ErrNoCommand
	}
	if errors.Is(err, unix.ELOOP) {
		return nil, false, ErrBadRecord // a symbolic link: not a record a supervisor wrote
	}
	if err != nil {
		return nil, false, fmt.Errorf("spool: record: %w", err)
	}
	f := os.NewFile(uintptr(fd), recordName)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, false, err
	}
	if !st.Mode().IsRegular() || st.Size() > MaxRecordBytes {
		return nil, false, ErrBadRecord
	}
	buf := make([]byte, st.Size()+1)
	n, _ := f.ReadAt(buf, 0)
	if n > int(st.Size()) {
		return nil, false, ErrBadRecord // grew while read
	}
	return decodeRecord(buf[:n], keys)
}

// decodeRecord decodes and proves a record file's content (see ReadRecord).
func decodeRecord(data []byte, keys []*helperv1.RecordKey) (*helperv1.CommandRecord, bool, error) {
	var seal helperv1.SealedRecord
	if err := (proto.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &seal); err == nil && seal.GetFormat() != 0 {
		if seal.GetFormat() != protocol.RecordFormatSealed || protocol.DecodeFrame(data, &seal) != nil {
			return nil, false, ErrBadRecord
		}
		var key []byte
		for _, k := range keys {
			if k.GetId() == seal.GetKeyId() {
				key = k.GetKey()
			}
		}
		if key == nil || !hmac.Equal(protocol.RecordMAC(key, seal.GetRecord()), seal.GetMac()) {
			return nil, false, ErrUnverified
		}
		rec := &helperv1.CommandRecord{}
		if err := protocol.DecodeFrame(seal.GetRecord(), rec); err != nil || rec.GetInfo() == nil {
			return nil, false, ErrBadRecord // sealed by us, yet not a record: never written so
		}
		return rec, true, nil
	}
	rec := &helperv1.CommandRecord{}
	if err := protocol.DecodeFrame(data, rec); err != nil || rec.GetInfo() == nil {
		return nil, false, ErrBadRecord
	}
	return rec, false, nil
}

// ErrUnverified is returned for a sealed record that no key given verifies: altered or
// planted by the workload, or sealed under a key the security material no longer holds.
var ErrUnverified = errors.New("the command's record is not its supervisor's")

// ErrBadRecord is returned for a record that is not one a supervisor wrote: too large, not a
// regular file, undecodable.
var ErrBadRecord = errors.New("the command's record is unreadable")
