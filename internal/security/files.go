package security

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
)

// readCapped reads the file name beneath root. It refuses anything but a regular file
// (opened non-blocking, so a FIFO cannot hang the reader) and anything over limit bytes,
// checked on the size before reading and on the bytes read. os.Root resolves name beneath
// the root and refuses symbolic links that lead out of it.
func readCapped(root *os.Root, name string, limit int64) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, errors.New("not a regular file")
	}
	if fi.Size() > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	// One byte past the cap tells a file that grew after the stat from one that fits.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("larger than %d bytes", limit)
	}
	return data, nil
}
