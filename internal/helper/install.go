package helper

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// maxHelperBytes bounds the executable Install copies: the static helper is about 5 MiB; a
// file far larger is not the helper.
const maxHelperBytes = 64 << 20

// Install copies the running helper executable to dest (mode 0555), atomically: a
// temporary file in dest's directory, synced, then renamed. It is what the helper image's
// init container runs to put the helper into an executor Pod's shared volume, so that any
// executor image can be used without the helper baked in; the copy needs no shell or cp.
func Install(dest string) error {
	if !filepath.IsAbs(dest) || filepath.Clean(dest) != dest {
		return fmt.Errorf("--install %q: want an absolute, clean path", dest)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	src, err := os.Open(self)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, io.LimitReader(src, maxHelperBytes+1))
	if err == nil && n > maxHelperBytes {
		err = errors.New("the running executable is larger than any helper")
	}
	if err == nil {
		// Execute-only: the kernel makes each helper started from it not dumpable at exec
		// (docs/commands.md "Sealed records").
		err = tmp.Chmod(0o111)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("installing the helper at %s: %w", dest, err)
	}
	return os.Rename(tmp.Name(), dest)
}
