package spool

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
)

const (
	stdout = executionv1.OutputStream_OUTPUT_STREAM_STDOUT
	stderr = executionv1.OutputStream_OUTPUT_STREAM_STDERR
)

// openDir opens dir the way the package's callers do; it is closed at the test's end.
func openDir(t testing.TB, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// segmentFor is the segment size docs and doc comments state — an eighth of the cap within
// [4 KiB, 1 MiB] — recomputed here rather than taken from the package.
func segmentFor(limit uint64) uint64 { return min(max(limit/8, 4<<10), 1<<20) }

// output is n bytes of reproducible noise: a byte read from the wrong offset shows.
func output(seed uint64, n int) []byte {
	var key [32]byte
	key[0], key[1], key[2] = byte(seed), byte(n), byte(n>>8)
	b := make([]byte, n)
	_, _ = rand.NewChaCha8(key).Read(b)
	return b
}

// writePattern cuts a stream of total bytes into the sizes of successive writes.
type writePattern struct {
	name   string
	chunks func(total, segment int) []int
}

var writePatterns = []writePattern{
	{"one write", func(total, _ int) []int { return []int{total} }},
	{"small random writes", func(total, _ int) []int {
		r := rand.New(rand.NewPCG(1, uint64(total)))
		var c []int
		for left := total; left > 0; {
			n := min(left, r.IntN(3000)) // zero-length writes included
			c = append(c, n)
			left -= n
		}
		return c
	}},
	{"segment-sized writes", func(total, seg int) []int {
		var c []int
		for left := total; left > 0; left -= min(left, seg) {
			c = append(c, min(left, seg))
		}
		return c
	}},
	{"one short of a boundary, one past it", func(total, seg int) []int {
		var c []int
		for left, i := total, 0; left > 0; i++ {
			n := min(left, seg-1+2*(i%2))
			c = append(c, n)
			left -= n
		}
		return c
	}},
}

// streamBytes sums the sizes of the regular files in a stream's directory.
func streamBytes(t testing.TB, path string) uint64 {
	t.Helper()
	var n uint64
	err := filepath.WalkDir(path, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		n += uint64(info.Size())
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", path, err)
	}
	return n
}

// follow reads a stream from offset 0 to its end in pieces of at most max bytes, the way a
// reattaching caller does (the next offset is the last piece's Offset plus its length). It
// checks each piece on its own — at most max bytes, Offset-Skipped is the offset asked for —
// and returns the pieces. It makes no call on t, so that it can run in a goroutine.
func follow(dir int, s executionv1.OutputStream, max int) ([]Piece, error) {
	var pieces []Piece
	var from uint64
	for calls := 0; ; calls++ {
		if calls > 1<<22 {
			return pieces, fmt.Errorf("no end after %d reads, at %d", calls, from)
		}
		p, err := Read(dir, s, from, max)
		if err != nil {
			return pieces, fmt.Errorf("Read(%d, %d): %w", from, max, err)
		}
		if len(p.Data) > max {
			return pieces, fmt.Errorf("Read(%d, %d) returned %d bytes", from, max, len(p.Data))
		}
		if p.Offset < from || p.Offset-p.Skipped != from {
			return pieces, fmt.Errorf("Read(%d, %d): Offset %d, Skipped %d", from, max, p.Offset, p.Skipped)
		}
		if len(p.Data) == 0 {
			if p.Skipped != 0 {
				return pieces, fmt.Errorf("Read(%d, %d) skipped %d bytes to no data", from, max, p.Skipped)
			}
			return pieces, nil
		}
		pieces = append(pieces, p)
		from = p.Offset + uint64(len(p.Data))
	}
}

// diffBytes describes how got differs from want, or is empty.
func diffBytes(want, got []byte) string {
	if bytes.Equal(want, got) {
		return ""
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	return fmt.Sprintf("%d bytes, want %d; first difference at %d", len(got), len(want), i)
}

// checkStream follows the stream in pieces of max and checks what it gets against everything
// written (want) under the cap: every piece holds want's bytes at its Offset; the whole output
// when it is within the cap, else one gap at most, after at least the head (cap/2) and before
// at least the tail (cap - cap/2); the gap is exactly the bytes missing; and what is read is
// every byte the directory holds.
func checkStream(t *testing.T, dir int, streamPath string, want []byte, limit uint64, max int) {
	t.Helper()
	pieces, err := follow(dir, stdout, max)
	if err != nil {
		t.Fatal(err)
	}
	total := uint64(len(want))
	var got []byte
	gaps := 0
	gapStart, gapEnd := total, total
	for _, p := range pieces {
		if p.Skipped > 0 {
			gaps++
			gapStart, gapEnd = p.Offset-p.Skipped, p.Offset
		}
		if p.Offset+uint64(len(p.Data)) > total {
			t.Fatalf("max %d: a piece of %d bytes at %d, past the total %d", max, len(p.Data), p.Offset, total)
		}
		if d := diffBytes(want[p.Offset:p.Offset+uint64(len(p.Data))], p.Data); d != "" {
			t.Fatalf("max %d: the piece at %d is not the output there: %s", max, p.Offset, d)
		}
		got = append(got, p.Data...)
	}
	var end uint64
	if n := len(pieces); n > 0 {
		end = pieces[n-1].Offset + uint64(len(pieces[n-1].Data))
	}
	if end != total {
		t.Fatalf("max %d: the reads ended at %d, the total is %d", max, end, total)
	}
	switch {
	case gaps > 1:
		t.Fatalf("max %d: %d gaps, want one at most", max, gaps)
	case gaps == 1 && total <= limit:
		t.Fatalf("max %d: %d bytes within the cap %d, yet [%d, %d) skipped", max, total, limit, gapStart, gapEnd)
	case gaps == 1 && gapStart < limit/2:
		t.Fatalf("max %d: the gap starts at %d, inside the head of %d", max, gapStart, limit/2)
	case gaps == 1 && total-gapEnd < limit-limit/2:
		t.Fatalf("max %d: the gap ends at %d, inside the tail of %d (total %d)", max, gapEnd, limit-limit/2, total)
	}
	kept := append(want[:gapStart:gapStart], want[gapEnd:]...)
	if d := diffBytes(kept, got); d != "" {
		t.Fatalf("max %d: the concatenation of the pieces is not head+tail: %s", max, d)
	}
	if onDisk := streamBytes(t, streamPath); onDisk != uint64(len(got)) {
		t.Fatalf("max %d: read %d bytes, the directory holds %d", max, len(got), onDisk)
	}
}

// readMaxes is the piece sizes to read kept bytes in, leaving out those that would take more
// reads than a unit test should.
func readMaxes(kept uint64) []int {
	var out []int
	for _, m := range []int{1, 7, 4096, 1 << 20} {
		if kept/uint64(m) <= 2000 { // a read lists the directory: bounded for the suite's time
			out = append(out, m)
		}
	}
	return out
}

var testCaps = []uint64{2, 100, 3 * 4096, 1 << 20}

// streamTotals are the totals to write under a cap: within it, at it, one past it, and far
// enough past it that segments in the middle are dropped — among those, totals whose tail
// starts exactly at a segment's first byte and at a segment's last byte.
func streamTotals(limit uint64) []int {
	seg := segmentFor(limit)
	far := max(3*limit, 6*seg)
	tail := limit - limit/2
	aligned := far/seg*seg + tail
	totals := []int{int(limit / 2), int(limit), int(limit) + 1, int(aligned), int(aligned) - 1, int(far) + 5}
	slices.Sort(totals)
	return slices.Compact(totals)
}

// A stream written in any pattern reads back, from offset 0 in pieces of any size, as the
// whole output within the cap and as head plus tail past it, with exact offsets and the
// skipped bytes exactly those missing — while the writer is open and after it closed — and
// the writer's total counts every byte.
func TestWriteReadRoundTrip(t *testing.T) {
	for _, limit := range testCaps {
		seg := segmentFor(limit)
		for _, total := range streamTotals(limit) {
			for _, pat := range writePatterns {
				t.Run(fmt.Sprintf("cap=%d/total=%d/%s", limit, total, pat.name), func(t *testing.T) {
					root := t.TempDir()
					dir := openDir(t, root)
					streamPath := filepath.Join(root, "stdout")
					want := output(limit, total)
					w, err := NewWriter(dir, stdout, limit)
					if err != nil {
						t.Fatal(err)
					}
					at := 0
					for _, n := range pat.chunks(total, int(seg)) {
						if got, err := w.Write(want[at : at+n]); got != n || err != nil {
							t.Fatalf("Write(%d bytes) = %d, %v", n, got, err)
						}
						at += n
					}
					if at != total {
						t.Fatalf("the pattern wrote %d bytes, want %d", at, total)
					}
					if w.Total() != uint64(total) || w.Err() != nil {
						t.Fatalf("Total %d, Err %v; want %d, nil", w.Total(), w.Err(), total)
					}
					checkStream(t, dir, streamPath, want, limit, 1<<20) // the writer still open
					if err := w.Close(); err != nil {
						t.Fatal(err)
					}
					if end, err := End(dir, stdout); end != uint64(total) || err != nil {
						t.Fatalf("End = %d, %v; want %d", end, err, total)
					}
					for _, m := range readMaxes(min(uint64(total), limit+2*seg)) {
						checkStream(t, dir, streamPath, want, limit, m)
					}
				})
			}
		}
	}
}

// The stream's directory never holds more than the cap plus two segments (doc.go), checked
// after every write of every pattern and after Close, for a stream far longer than its cap.
func TestWriterDiskBound(t *testing.T) {
	for _, limit := range testCaps {
		seg := segmentFor(limit)
		total := streamTotals(limit)[len(streamTotals(limit))-1]
		bound := limit + 2*seg
		for _, pat := range writePatterns {
			t.Run(fmt.Sprintf("cap=%d/%s", limit, pat.name), func(t *testing.T) {
				root := t.TempDir()
				dir := openDir(t, root)
				streamPath := filepath.Join(root, "stdout")
				data := output(2, total)
				w, err := NewWriter(dir, stdout, limit)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Close()
				at := 0
				for i, n := range pat.chunks(total, int(seg)) {
					w.Write(data[at : at+n])
					at += n
					if got := streamBytes(t, streamPath); got > bound {
						t.Fatalf("after write %d (%d bytes written): %d bytes on disk, over the cap %d plus two segments of %d (%d)",
							i+1, at, got, limit, seg, bound)
					}
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
				if got := streamBytes(t, streamPath); got > bound {
					t.Fatalf("after Close: %d bytes on disk, over %d", got, bound)
				}
			})
		}
	}
}

// A reader following a stream while it is written — from offset 0, until the writer has
// closed and the reader is at End — gets every byte exactly once, in order, when the total
// stays within the cap.
func TestReadWhileWriting(t *testing.T) {
	cases := []struct {
		limit uint64
		total int
		max   int
	}{
		{64 << 10, 64 << 10, 7},
		{1 << 20, 1 << 20, 4096},
		{1 << 20, 1<<20 - 3, 1 << 20},
		{3 * 4096, 3*4096 - 1, 1},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("cap=%d/total=%d/max=%d", tc.limit, tc.total, tc.max), func(t *testing.T) {
			dir := openDir(t, t.TempDir())
			data := output(3, tc.total)
			w, err := NewWriter(dir, stdout, tc.limit)
			if err != nil {
				t.Fatal(err)
			}
			writer := make(chan error, 1)
			go func(done chan<- error) {
				r := rand.New(rand.NewPCG(3, uint64(tc.total)))
				for at := 0; at < tc.total; {
					n := min(tc.total-at, 1+r.IntN(5000))
					w.Write(data[at : at+n])
					at += n
				}
				err := w.Err()
				if w.Total() != uint64(tc.total) {
					err = fmt.Errorf("Total %d, want %d", w.Total(), tc.total)
				}
				if cerr := w.Close(); err == nil {
					err = cerr
				}
				done <- err
			}(writer)
			done := writer // nil once the writer has reported
			defer func() {
				if done != nil {
					<-done // the writer is not left writing into a removed directory
				}
			}()

			h := sha256.New()
			var from uint64
			for {
				p, err := Read(dir, stdout, from, tc.max)
				if err != nil {
					t.Fatalf("Read(%d): %v", from, err)
				}
				if p.Offset != from || p.Skipped != 0 || len(p.Data) > tc.max {
					t.Fatalf("Read(%d, %d): Offset %d, Skipped %d, %d bytes", from, tc.max, p.Offset, p.Skipped, len(p.Data))
				}
				if len(p.Data) > 0 {
					h.Write(p.Data)
					from += uint64(len(p.Data))
					continue
				}
				if done == nil { // the writer closed before this read found nothing
					end, err := End(dir, stdout)
					if err != nil || end != from {
						t.Fatalf("no data at %d after the writer closed; End = %d, %v", from, end, err)
					}
					break
				}
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("writer: %v", err)
					}
					done = nil
				default:
					runtime.Gosched()
				}
			}
			if from != uint64(tc.total) {
				t.Fatalf("read to %d, want %d", from, tc.total)
			}
			want := sha256.Sum256(data)
			if diff := cmp.Diff(hex.EncodeToString(want[:]), hex.EncodeToString(h.Sum(nil))); diff != "" {
				t.Fatalf("sha256 of what was read (-written +read):\n%s", diff)
			}
		})
	}
}

// Past the end of a stream, and on a stream never created, Read returns no data at the offset
// asked for and End is where the data ends (0 for none).
func TestReadPastEndAndMissingStream(t *testing.T) {
	dir := openDir(t, t.TempDir())
	w, err := NewWriter(dir, stdout, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(output(4, 10000))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		s    executionv1.OutputStream
		from uint64
	}{
		{"at the end", stdout, 10000},
		{"one past the end", stdout, 10001},
		{"a segment past the end", stdout, 10000 + 1<<20},
		{"far past the end", stdout, 1 << 62},
		{"the last offset", stdout, ^uint64(0)},
		{"never created, from 0", stderr, 0},
		{"never created, from 12345", stderr, 12345},
		{"never created, the last offset", stderr, ^uint64(0)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, m := range []int{0, 1, 1 << 20} {
				got, err := Read(dir, tc.s, tc.from, m)
				if err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(Piece{Offset: tc.from}, got); diff != "" {
					t.Errorf("Read(%d, %d) (-want +got):\n%s", tc.from, m, diff)
				}
			}
		})
	}
	for s, want := range map[executionv1.OutputStream]uint64{stdout: 10000, stderr: 0} {
		if end, err := End(dir, s); end != want || err != nil {
			t.Errorf("End(%v) = %d, %v; want %d", s, end, err, want)
		}
	}
}

// Read, End and NewWriter refuse a stream that is neither stdout nor stderr, and NewWriter
// refuses a cap under 2 bytes and a stream created already.
func TestStreamArgumentsRefused(t *testing.T) {
	dir := openDir(t, t.TempDir())
	for _, s := range []executionv1.OutputStream{executionv1.OutputStream_OUTPUT_STREAM_UNSPECIFIED, 3} {
		if _, err := Read(dir, s, 0, 10); err == nil {
			t.Errorf("Read(%v) accepted", s)
		}
		if _, err := End(dir, s); err == nil {
			t.Errorf("End(%v) accepted", s)
		}
		if _, err := NewWriter(dir, s, 100); err == nil {
			t.Errorf("NewWriter(%v) accepted", s)
		}
	}
	for _, limit := range []uint64{0, 1} {
		if _, err := NewWriter(dir, stdout, limit); err == nil {
			t.Errorf("NewWriter with a cap of %d accepted", limit)
		}
	}
	w, err := NewWriter(dir, stdout, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := NewWriter(dir, stdout, 2); err == nil {
		t.Error("a second writer of the same stream accepted")
	}
}

// hostileTotal is the stream the hostile cases start from: three segments of 4 KiB.
const (
	hostileCap   = 16 << 10
	hostileTotal = 10000
	pastTheEnd   = "0000000000010000" // a segment's name well past the stream's end
)

// Entries a workload plants in a stream's directory that are not segments are passed by:
// Read returns exactly the stream, in pieces of at most max, follows no link, does not hang,
// and End ignores them.
func TestReadHostileEntries(t *testing.T) {
	writeFile := func(t *testing.T, path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name  string
		plant func(t *testing.T, stream, outside string)
	}{
		{"names that do not parse", func(t *testing.T, stream, _ string) {
			for _, n := range []string{"zz", pastTheEnd + ".tmp", pastTheEnd[1:], "0" + pastTheEnd, "-000000000010000",
				"000000000001000g", "0x00000000010000", " 000000000010000", "+000000000010000", "0000_00000010000"} {
				writeFile(t, filepath.Join(stream, n), []byte("EVIL"))
			}
		}},
		{"an empty file named like a segment", func(t *testing.T, stream, _ string) {
			writeFile(t, filepath.Join(stream, pastTheEnd), nil)
		}},
		{"a symlink to a file outside", func(t *testing.T, stream, outside string) {
			writeFile(t, filepath.Join(outside, "secret"), []byte("SECRET"))
			if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(stream, pastTheEnd)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a symlink to a segment", func(t *testing.T, stream, _ string) {
			if err := os.Symlink("0000000000000000", filepath.Join(stream, pastTheEnd)); err != nil {
				t.Fatal(err)
			}
		}},
		{"a directory", func(t *testing.T, stream, _ string) {
			if err := os.Mkdir(filepath.Join(stream, pastTheEnd), 0o700); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(stream, pastTheEnd, "0000000000000000"), []byte("EVIL"))
		}},
		{"oversized files", func(t *testing.T, stream, _ string) {
			for name, size := range map[string]int64{pastTheEnd: 1<<20 + 1, "0000000000200000": 1 << 34} {
				f, err := os.Create(filepath.Join(stream, name))
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Truncate(size); err != nil {
					t.Fatal(err)
				}
				f.Close()
			}
		}},
		{"segments overlapping kept ones", func(t *testing.T, stream, _ string) {
			writeFile(t, filepath.Join(stream, "0000000000000800"), bytes.Repeat([]byte("EVIL"), 100))
			writeFile(t, filepath.Join(stream, "0000000000001ff0"), bytes.Repeat([]byte("EVIL"), 100))
			writeFile(t, filepath.Join(stream, "0000000000002001"), []byte("EVIL"))
		}},
		{"a FIFO", func(t *testing.T, stream, _ string) {
			if err := unix.Mkfifo(filepath.Join(stream, pastTheEnd), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"a socket", func(t *testing.T, stream, _ string) {
			fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(fd) })
			// A socket's path is bounded (108 bytes): bind it by a path relative to the stream.
			t.Chdir(stream)
			if err := unix.Bind(fd, &unix.SockaddrUnix{Name: pastTheEnd}); err != nil {
				t.Fatal(err)
			}
		}},
		// The writer names segments in lower-case hex; an upper-case name parses to an offset
		// whose segment name is another file.
		{"an upper-case hex name", func(t *testing.T, stream, _ string) {
			writeFile(t, filepath.Join(stream, "000000000001A000"), []byte("EVIL"))
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := openDir(t, root)
			stream := filepath.Join(root, "stdout")
			want := output(5, hostileTotal)
			w, err := NewWriter(dir, stdout, hostileCap)
			if err != nil {
				t.Fatal(err)
			}
			w.Write(want)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			tc.plant(t, stream, t.TempDir())

			for _, m := range []int{1, 7, 4096, 1 << 20} {
				type result struct {
					pieces []Piece
					err    error
				}
				ch := make(chan result, 1)
				go func() {
					pieces, err := follow(dir, stdout, m)
					ch <- result{pieces, err}
				}()
				var r result
				select {
				case r = <-ch:
				case <-time.After(30 * time.Second):
					t.Fatalf("max %d: Read hangs", m)
				}
				if r.err != nil {
					t.Fatalf("max %d: %v", m, r.err)
				}
				var got []byte
				for _, p := range r.pieces {
					if p.Skipped != 0 {
						t.Fatalf("max %d: %d bytes skipped before %d", m, p.Skipped, p.Offset)
					}
					got = append(got, p.Data...)
				}
				if d := diffBytes(want, got); d != "" {
					t.Fatalf("max %d: read %s", m, d)
				}
			}
			if end, err := End(dir, stdout); end != hostileTotal || err != nil {
				t.Fatalf("End = %d, %v; want %d", end, err, hostileTotal)
			}
		})
	}
}

// A stream's directory that is a symlink (to a directory holding a valid segment) or not a
// directory at all is not followed: Read and End return none of its data.
func TestReadStreamDirectoryNotFollowed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plant func(t *testing.T, path, outside string) error
	}{
		{"a symlink to a directory outside", func(t *testing.T, path, outside string) error {
			if err := os.WriteFile(filepath.Join(outside, "0000000000000000"), []byte("SECRET"), 0o600); err != nil {
				t.Fatal(err)
			}
			return os.Symlink(outside, path)
		}},
		{"a regular file", func(t *testing.T, path, _ string) error {
			return os.WriteFile(path, []byte("SECRET"), 0o600)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := tc.plant(t, filepath.Join(root, "stdout"), t.TempDir()); err != nil {
				t.Fatal(err)
			}
			dir := openDir(t, root)
			p, err := Read(dir, stdout, 0, 100)
			if len(p.Data) != 0 {
				t.Fatalf("Read returned %q (err %v)", p.Data, err)
			}
			if end, _ := End(dir, stdout); end != 0 {
				t.Fatalf("End = %d, want 0", end)
			}
		})
	}
}

// After spooling fails (here: the stream's directory is gone, so the next segment cannot be
// created), Write still consumes and reports everything, Total counts every byte, Err says
// spooling stopped, and Close succeeds.
func TestWriterCountsAfterError(t *testing.T) {
	const limit = 1 << 20
	seg := int(segmentFor(limit))
	for _, tc := range []struct {
		name   string
		before int // bytes written before the directory is removed
		writes []int
	}{
		{"the next write rolls", seg, []int{1, 100, seg * 3}},
		{"a roll inside a write", seg - 10, []int{seg + 20, 5}},
		{"a roll after many writes", 3*seg + 7, []int{seg, seg, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir := openDir(t, root)
			w, err := NewWriter(dir, stdout, limit)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := w.Write(output(6, tc.before)); n != tc.before || err != nil || w.Err() != nil {
				t.Fatalf("Write = %d, %v; Err %v", n, err, w.Err())
			}
			if err := os.RemoveAll(filepath.Join(root, "stdout")); err != nil {
				t.Fatal(err)
			}
			total := uint64(tc.before)
			for _, n := range tc.writes {
				got, err := w.Write(make([]byte, n))
				total += uint64(n)
				if got != n || err != nil {
					t.Fatalf("Write(%d bytes) = %d, %v; want %d, nil", n, got, err, n)
				}
				if w.Total() != total {
					t.Fatalf("Total %d, want %d", w.Total(), total)
				}
			}
			if w.Err() == nil {
				t.Fatal("Err is nil after the stream's directory went away")
			}
			if err := w.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			if w.Total() != total {
				t.Fatalf("Total after Close %d, want %d", w.Total(), total)
			}
		})
	}
}

// A full volume (ENOSPC) or quota (EDQUOT), however wrapped, is reported as ErrVolumeFull;
// another error as itself; and the first error stays.
func TestWriterFailReportsVolumeFull(t *testing.T) {
	for _, tc := range []struct {
		errs []error
		want error
	}{
		{[]error{unix.ENOSPC}, ErrVolumeFull},
		{[]error{unix.EDQUOT}, ErrVolumeFull},
		{[]error{fmt.Errorf("write: %w", unix.ENOSPC)}, ErrVolumeFull},
		{[]error{unix.EIO}, unix.EIO},
		{[]error{unix.EIO, unix.ENOSPC}, unix.EIO},
	} {
		w := &Writer{cur: -1}
		for _, err := range tc.errs {
			if w.err == nil {
				w.fail(err)
			}
		}
		if !errors.Is(w.Err(), tc.want) {
			t.Errorf("after %v: Err %v, want %v", tc.errs, w.Err(), tc.want)
		}
	}
}

// Sync flushes the segment being written and is harmless before the first byte.
func TestWriterSync(t *testing.T) {
	dir := openDir(t, t.TempDir())
	w, err := NewWriter(dir, stdout, 100)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatalf("Sync before any write: %v", err)
	}
	w.Write([]byte("hello"))
	if err := w.Sync(); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p, err := Read(dir, stdout, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(Piece{Data: []byte("hello")}, p); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
}

// A stream's directory holds only segments named by the 16 lower-case hex digits of their
// first byte's offset, each starting where a segment of clamp(cap/8, 4 KiB, 1 MiB) bytes
// starts and full but for the last, which ends at the total.
func TestSegmentLayout(t *testing.T) {
	for _, limit := range slices.Concat(testCaps, []uint64{64 << 20}) {
		t.Run(fmt.Sprintf("cap=%d", limit), func(t *testing.T) {
			seg := segmentFor(limit)
			total := min(3*limit, 20<<20) + 5
			root := t.TempDir()
			dir := openDir(t, root)
			w, err := NewWriter(dir, stdout, limit)
			if err != nil {
				t.Fatal(err)
			}
			chunk := make([]byte, 64<<10)
			for left := total; left > 0; left -= min(left, uint64(len(chunk))) {
				w.Write(chunk[:min(left, uint64(len(chunk)))])
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			entries, err := os.ReadDir(filepath.Join(root, "stdout"))
			if err != nil {
				t.Fatal(err)
			}
			for i, e := range entries { // sorted by name: by offset
				info, err := e.Info()
				if err != nil {
					t.Fatal(err)
				}
				var start uint64
				if _, err := fmt.Sscanf(e.Name(), "%x", &start); err != nil || e.Name() != fmt.Sprintf("%016x", start) || !info.Mode().IsRegular() {
					t.Fatalf("entry %q (%v) is not a segment", e.Name(), info.Mode())
				}
				size := seg
				if i == len(entries)-1 {
					size = total - start
				}
				if start%seg != 0 || uint64(info.Size()) != size {
					t.Fatalf("segment %s holds %d bytes, want %d at a multiple of %d", e.Name(), info.Size(), size, seg)
				}
			}
		})
	}
}
