package helper

import (
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/execplane/execplane/internal/helper/fileops"
)

// MirrorReport is what a mirror prints, one JSON line, and writes to --mirror-report: the
// controller reads it from the copy Pod's termination message (as untrusted input, bounded
// and parsed strictly). Error is set when the mirror failed; it never names a path or holds
// file contents.
type MirrorReport struct {
	fileops.MirrorResult
	Error string `json:"error,omitempty"`
}

// RunMirror makes cfg.Root equal to the tree at cfg.Mirror (fileops.Mirror) and reports the
// result. It fails (a non-zero exit, the container's) when the mirror does; run again, it
// goes on from where it stopped.
func RunMirror(cfg Config, stdout io.Writer) error {
	res, err := mirror(cfg)
	rep := MirrorReport{MirrorResult: res}
	if err != nil {
		rep.Error = err.Error()
	}
	line, merr := json.Marshal(rep)
	if merr != nil {
		return merr
	}
	line = append(line, '\n')
	if cfg.MirrorReport != "" {
		if werr := os.WriteFile(cfg.MirrorReport, line, 0o644); werr != nil && err == nil {
			err = fmt.Errorf("helper: write the mirror's report: %w", werr)
		}
	}
	if _, werr := stdout.Write(line); werr != nil && err == nil {
		err = werr
	}
	return err
}

func mirror(cfg Config) (fileops.MirrorResult, error) {
	src, err := fileops.OpenRoot(cfg.Mirror)
	if err != nil {
		return fileops.MirrorResult{}, err
	}
	defer src.Close()
	dst, err := fileops.OpenRoot(cfg.Root)
	if err != nil {
		return fileops.MirrorResult{}, err
	}
	defer dst.Close()
	return fileops.Mirror(src, dst, cfg.MirrorMaxEntries)
}
