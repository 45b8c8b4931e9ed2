package spool

import (
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

// maxSegmentsListed bounds the names read from a stream's directory: a writer keeps at most
// cap/segment + 2 of them — 10 for caps up to 8 MiB, 1026 at the 1 GiB ceiling; the rest
// are the workload's.
const maxSegmentsListed = 4096

// readRetries bounds the re-listing when a segment vanished between the listing and the
// open (the writer dropped it from the middle).
const readRetries = 4

// Piece is what Read found: data from Offset on; Skipped bytes before Offset were asked for
// but are no longer kept.
type Piece struct {
	Offset  uint64
	Skipped uint64
	Data    []byte
}

// segment is a kept segment as listed: its first offset and its size.
type segment struct {
	start, size uint64
}

func (s segment) end() uint64 { return s.start + s.size }

// Read returns up to max bytes of a stream from offset from: from there when it is kept,
// else from the first kept byte after it. Past the end of what is kept it returns no data
// and Offset = from. Segments are append-only, so what a reader gets is what the command
// wrote, wherever the writer is.
func Read(commandDir int, s executionv1.OutputStream, from uint64, max int) (Piece, error) {
	name, err := streamDir(s)
	if err != nil {
		return Piece{}, err
	}
	dir, err := unix.Openat(commandDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return Piece{Offset: from}, nil // nothing written yet
	}
	if err != nil {
		return Piece{}, fmt.Errorf("spool: %s: %w", name, err)
	}
	defer unix.Close(dir)
	for attempt := 0; ; attempt++ {
		p, err := read(dir, from, max)
		if errors.Is(err, unix.ENOENT) && attempt < readRetries {
			continue
		}
		return p, err
	}
}

func read(dir int, from uint64, max int) (Piece, error) {
	segs, err := list(dir)
	if err != nil {
		return Piece{}, err
	}
	p := Piece{Offset: from}
	i := slices.IndexFunc(segs, func(s segment) bool { return s.end() > from })
	if i < 0 {
		return p, nil
	}
	if segs[i].start > from {
		p.Offset, p.Skipped = segs[i].start, segs[i].start-from
	}
	at := p.Offset
	for ; i < len(segs) && len(p.Data) < max && segs[i].start <= at; i++ {
		if segs[i].end() <= at {
			continue
		}
		want := min(uint64(max-len(p.Data)), segs[i].end()-at)
		got, err := readSegment(dir, segs[i], at, int(want))
		if err != nil {
			if len(p.Data) > 0 && errors.Is(err, unix.ENOENT) {
				break // what was read stands; the rest is gone
			}
			return Piece{}, err
		}
		p.Data = append(p.Data, got...)
		at += uint64(len(got))
		if uint64(len(got)) < want {
			break // the segment was shorter than listed: a workload's doing
		}
	}
	return p, nil
}

// readSegment reads up to max bytes of seg from the stream offset at.
func readSegment(dir int, seg segment, at uint64, max int) ([]byte, error) {
	fd, err := unix.Openat(dir, segmentName(seg.start), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), segmentName(seg.start))
	defer f.Close()
	n := min(uint64(max), seg.end()-at)
	buf := make([]byte, n)
	got, err := f.ReadAt(buf, int64(at-seg.start))
	if got > 0 || err == nil {
		return buf[:got], nil
	}
	return nil, err
}

// list returns a stream's kept segments in order: only regular files with a segment's name,
// sized at most a segment each, that do not overlap — the first of two overlapping is kept.
func list(dir int) ([]segment, error) {
	names, err := readNames(dir, maxSegmentsListed)
	if err != nil {
		return nil, err
	}
	var segs []segment
	for _, n := range names {
		start, ok := parseSegmentName(n)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dir, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
			continue
		}
		size := uint64(st.Size)
		if size == 0 || size > maxSegmentBytes || start+size < start {
			continue
		}
		segs = append(segs, segment{start: start, size: size})
	}
	slices.SortFunc(segs, func(a, b segment) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	out := segs[:0]
	for _, s := range segs {
		if len(out) > 0 && s.start < out[len(out)-1].end() {
			continue
		}
		out = append(out, s)
	}
	return out, nil
}

// End is the offset just past the last kept byte of a stream: what a reader can have.
func End(commandDir int, s executionv1.OutputStream) (uint64, error) {
	name, err := streamDir(s)
	if err != nil {
		return 0, err
	}
	dir, err := unix.Openat(commandDir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer unix.Close(dir)
	segs, err := list(dir)
	if err != nil || len(segs) == 0 {
		return 0, err
	}
	return segs[len(segs)-1].end(), nil
}

// readNames reads at most max entry names of a directory descriptor (a dup: the caller's
// stays open).
func readNames(dir, max int) ([]string, error) {
	fd, err := unix.Openat(dir, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), ".")
	defer f.Close()
	names, err := f.Readdirnames(max)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}
