package spool

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// fuzzByte is the content every planted file has at stream offset x: whichever file Read
// takes a byte from, the byte at a given offset is the same, so a byte read from the wrong
// place in a file shows.
func fuzzByte(x uint64) byte { return byte((x * 0x9e3779b97f4a7c15) >> 56) }

// fuzzName makes a name for an entry from its kind and an offset.
func fuzzName(kind byte, off uint64) string {
	switch kind % 6 {
	case 0: // a name the writer makes
		return fmt.Sprintf("%016x", off)
	case 1: // near the start, so that entries touch and overlap
		return fmt.Sprintf("%016x", off%(1<<17))
	case 2: // upper-case hex
		return fmt.Sprintf("%016X", off%(1<<17))
	default: // anything: short, long, near-hex
		const alphabet = "0123456789abcdefABCDEFxg-_. +"
		n := 1 + int(off%20)
		b := make([]byte, n)
		for i := range b {
			off = off*6364136223846793005 + 1442695040888963407
			b[i] = alphabet[(off>>33)%uint64(len(alphabet))]
		}
		if s := string(b); s != "." && s != ".." {
			return s
		}
		return "x"
	}
}

// FuzzRead builds a stream's directory from fuzzed entries — each a kind (which name, and
// whether a regular file, a symlink, a directory or a FIFO), an offset and a size — and reads
// it from a fuzzed offset for a fuzzed max: Read neither panics nor hangs, returns at most max
// bytes, from Offset >= from with Offset-Skipped = from, and every byte it returns is the
// byte of that stream offset.
func FuzzRead(f *testing.F) {
	entry := func(kind byte, off uint64, size uint16) []byte {
		b := []byte{kind}
		b = binary.BigEndian.AppendUint64(b, off)
		return binary.BigEndian.AppendUint16(b, size)
	}
	cat := func(es ...[]byte) []byte {
		var b []byte
		for _, e := range es {
			b = append(b, e...)
		}
		return b
	}
	f.Add(cat(entry(0, 0, 4096), entry(0, 4096, 4096), entry(0, 8192, 100)), uint64(0), uint16(10000))
	f.Add(cat(entry(0, 0, 100), entry(0, 50, 100), entry(0, 100, 10)), uint64(60), uint16(7))
	f.Add(cat(entry(0, 0, 10), entry(0, 1000, 10)), uint64(5), uint16(100))
	f.Add(cat(entry(0, ^uint64(0)-5, 100), entry(0, ^uint64(0), 1)), uint64(1<<63), uint16(1))
	f.Add(cat(entry(1, 0, 10), entry(2, 10, 10), entry(3, 16, 0)), uint64(0), uint16(0))
	f.Add(cat(entry(0|0x40, 0, 10), entry(0|0x80, 10, 10), entry(0|0xc0, 20, 10), entry(0, 30, 10)), uint64(0), uint16(1000))
	f.Fuzz(func(t *testing.T, spec []byte, from uint64, max uint16) {
		root := t.TempDir()
		stream := filepath.Join(root, "stdout")
		if err := os.Mkdir(stream, 0o700); err != nil {
			t.Fatal(err)
		}
		for i := 0; len(spec) >= 11 && i < 16; i++ {
			kind, off, size := spec[0], binary.BigEndian.Uint64(spec[1:9]), binary.BigEndian.Uint16(spec[9:11])
			spec = spec[11:]
			name := fuzzName(kind, off)
			path := filepath.Join(stream, name)
			switch kind >> 6 { // errors ignored: a name may repeat, the first entry stands
			case 0, 3:
				start, _ := strconv.ParseUint(name, 16, 64)
				b := make([]byte, size)
				for j := range b {
					b[j] = fuzzByte(start + uint64(j))
				}
				// Never through a link planted before, nor over an earlier entry.
				if f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600); err == nil {
					_, _ = f.Write(b)
					f.Close()
				}
			case 1:
				_ = os.Symlink("0000000000000000", path)
			case 2:
				if size%2 == 0 {
					_ = os.Mkdir(path, 0o700)
				} else {
					_ = unix.Mkfifo(path, 0o600)
				}
			}
		}
		dir := openDir(t, root)
		p, err := Read(dir, stdout, from, int(max))
		if err != nil {
			return // an error is an answer; only a wrong piece is not
		}
		if len(p.Data) > int(max) {
			t.Fatalf("Read(%d, %d) returned %d bytes", from, max, len(p.Data))
		}
		if p.Offset < from || p.Offset-p.Skipped != from {
			t.Fatalf("Read(%d, %d): Offset %d, Skipped %d", from, max, p.Offset, p.Skipped)
		}
		if len(p.Data) > 0 && p.Offset+uint64(len(p.Data)) < p.Offset {
			t.Fatalf("Read(%d, %d): %d bytes at %d wrap around", from, max, len(p.Data), p.Offset)
		}
		for j, b := range p.Data {
			if want := fuzzByte(p.Offset + uint64(j)); b != want {
				t.Fatalf("Read(%d, %d): byte %d (offset %d) is %#x, want %#x", from, max, j, p.Offset+uint64(j), b, want)
			}
		}
		if _, err := End(dir, stdout); err != nil {
			t.Fatalf("End: %v", err)
		}
	})
}
