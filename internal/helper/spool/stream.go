package spool

import (
	"errors"
	"fmt"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// Segment sizes: an eighth of the cap, so that what a stream keeps beyond its cap (at most
// two segments) stays a quarter of it, within bounds that keep the file count small and a
// segment cheap to re-read.
const (
	minSegmentBytes = 4 << 10
	maxSegmentBytes = 1 << 20
)

// segmentNameLen is the length of a segment's name: the offset in 16 hex digits.
const segmentNameLen = 16

// streamDir names a stream's directory inside a command's.
func streamDir(s executionv1.OutputStream) (string, error) {
	switch s {
	case executionv1.OutputStream_OUTPUT_STREAM_STDOUT:
		return "stdout", nil
	case executionv1.OutputStream_OUTPUT_STREAM_STDERR:
		return "stderr", nil
	}
	return "", fmt.Errorf("spool: no stream %v", s)
}

func segmentBytes(limit uint64) uint64 {
	return min(max(limit/8, minSegmentBytes), maxSegmentBytes)
}

func segmentName(offset uint64) string {
	return fmt.Sprintf("%016x", offset)
}

// parseSegmentName reads a name exactly as segmentName writes it (lower-case hex): any
// other spelling of an offset is another file, and not ours.
func parseSegmentName(name string) (uint64, bool) {
	if len(name) != segmentNameLen {
		return 0, false
	}
	v, err := strconv.ParseUint(name, 16, 64)
	return v, err == nil && segmentName(v) == name
}

// Writer appends one stream of a command's output to its spool, keeping the head and the
// tail within the cap. It is not safe for concurrent use.
type Writer struct {
	dir     int // the stream's directory
	limit   uint64
	segment uint64
	// starts are the kept segments' first offsets, oldest first; the last is being written.
	starts []uint64
	cur    int // the segment being written, or -1
	curLen uint64
	total  uint64
	err    error // the first write error: nothing more is spooled, the total still counts
}

// NewWriter creates the stream's directory in a command's directory and returns its writer.
// limit is the stream's cap (head plus tail), at least 2 bytes.
func NewWriter(commandDir int, s executionv1.OutputStream, limit uint64) (*Writer, error) {
	name, err := streamDir(s)
	if err != nil {
		return nil, err
	}
	if limit < 2 {
		return nil, errors.New("spool: a stream's cap must be at least 2 bytes")
	}
	if err := unix.Mkdirat(commandDir, name, 0o700); err != nil {
		return nil, fmt.Errorf("spool: %s: %w", name, err)
	}
	fd, err := unix.Openat(commandDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("spool: %s: %w", name, err)
	}
	return &Writer{dir: fd, limit: limit, segment: segmentBytes(limit), cur: -1}, nil
}

// Write spools p and always reports it written: the command's output is consumed whatever
// happens to its spool. After a write error (the volume full), nothing more is spooled; Err
// says why.
func (w *Writer) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && w.err == nil {
		if w.cur < 0 || w.curLen == w.segment {
			if err := w.roll(); err != nil {
				w.fail(err)
				break
			}
		}
		take := min(uint64(len(p)), w.segment-w.curLen)
		if err := writeAll(w.cur, p[:take]); err != nil {
			w.fail(err)
			break
		}
		w.curLen += take
		w.total += take
		p = p[take:]
	}
	w.total += uint64(len(p)) // what could not be spooled still counts
	// The tail moves with every byte: a full segment it has left goes now, not at the next
	// roll, so that the bound holds between rolls too.
	w.trim()
	return n, nil
}

// roll closes the segment being written, starts the next one at the total, and drops the
// oldest segments no longer in the head or the tail.
func (w *Writer) roll() error {
	if w.cur >= 0 {
		unix.Close(w.cur)
		w.cur = -1
	}
	fd, err := unix.Openat(w.dir, segmentName(w.total), unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	w.cur, w.curLen = fd, 0
	w.starts = append(w.starts, w.total)
	w.trim()
	return nil
}

// trim drops every segment that lies wholly after the head and before the tail. A segment
// is head while it starts within the first half of the cap; the tail is the last half of the
// cap before the total.
func (w *Writer) trim() {
	head := w.limit / 2
	tail := w.limit - head
	for i := 0; i+1 < len(w.starts); { // never the last: it is being written
		start := w.starts[i]
		end := start + w.segment // every segment but the last is full
		if start >= head && end+tail <= w.total {
			_ = unix.Unlinkat(w.dir, segmentName(start), 0)
			w.starts = slices.Delete(w.starts, i, i+1)
			continue
		}
		i++
	}
}

func (w *Writer) fail(err error) {
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		err = ErrVolumeFull
	}
	w.err = err
	if w.cur >= 0 {
		unix.Close(w.cur)
		w.cur = -1
	}
}

// ErrVolumeFull is Err when the workspace volume had no room for more output.
var ErrVolumeFull = errors.New("the workspace volume is full: no more output was kept")

// Total is every byte written to the stream, spooled or not.
func (w *Writer) Total() uint64 { return w.total }

// Err is the first error that stopped spooling, or nil.
func (w *Writer) Err() error { return w.err }

// Close trims to the final total and releases the stream's descriptors; the segments were
// written with write(2), so the page cache holds them for every reader. Sync makes them
// durable first.
func (w *Writer) Close() error {
	if w.cur >= 0 {
		// The tail is measured against the final total: the last roll may have left a
		// segment the bytes since have pushed out.
		w.trim()
		unix.Close(w.cur)
		w.cur = -1
	}
	return unix.Close(w.dir)
}

// Sync flushes the segment being written to the volume.
func (w *Writer) Sync() error {
	if w.cur < 0 {
		return nil
	}
	return unix.Fsync(w.cur)
}

func writeAll(fd int, p []byte) error {
	for len(p) > 0 {
		n, err := unix.Write(fd, p)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}
