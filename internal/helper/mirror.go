package helper

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/execplane/execplane/internal/helper/fileops"
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
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
// result. It fails (a non-zero exit, the container's, which restarts it) when the mirror
// fails for a reason that may pass (I/O); run again, it goes on from where it stopped. A
// refusal the same mirror would meet again (an unreadable file, ENOSPC, a bound) is
// reported with a zero exit.
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
	if permanent(err) {
		// A refusal a retry would meet again (an unreadable file, a bound): reported, and the
		// container ends 0 so that its Pod is not restarted until its deadline.
		err = nil
	}
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

// permanent reports whether a mirror's failure is one the same mirror would meet again.
func permanent(err error) bool {
	var e *protocol.Error
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case helperv1.ErrorCode_ERROR_CODE_PERMISSION_DENIED, helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED,
		helperv1.ErrorCode_ERROR_CODE_PATH_ESCAPE, helperv1.ErrorCode_ERROR_CODE_WRONG_TYPE, helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT:
		return true
	}
	return false
}
