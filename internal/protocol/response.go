package protocol

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"

	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// ErrViolation: the executor answered outside the helper protocol (a bad length, a frame
// over the cap, an undecodable or second response, trailing bytes, a non-zero exit). Its
// output is never trusted.
var ErrViolation = errors.New("executor protocol violation")

// ReadResult is what ReadResponse read: one response, or why there is none.
type ReadResult struct {
	Resp *helperv1.Response
	Err  error
}

// exitGrace bounds how long the helper may take to exit after its response: it has nothing
// left to do but return.
const exitGrace = 5 * time.Second

// ReadResponse reads heartbeats, then exactly one Response, then requires the stream to end
// (the helper exits once stdin closes) within exitGrace. Every frame is bounded by
// responseCap; any violation aborts the stream.
func ReadResponse(r io.Reader, responseCap int, closeStdin, abort func()) ReadResult {
	defer io.Copy(io.Discard, io.LimitReader(r, 1<<20)) //nolint:errcheck // drain so the stream can finish
	for {
		var f helperv1.Frame
		err := ReadFrame(r, &f, responseCap)
		switch {
		case errors.Is(err, io.EOF):
			return ReadResult{}
		case err != nil:
			abort()
			return ReadResult{Err: fmt.Errorf("%w: %v", ErrViolation, err)}
		}
		if f.GetHeartbeat() != nil {
			continue
		}
		resp := f.GetResponse()
		if resp == nil {
			abort()
			return ReadResult{Err: fmt.Errorf("%w: an empty frame", ErrViolation)}
		}
		closeStdin()
		var late atomic.Bool
		timer := time.AfterFunc(exitGrace, func() { late.Store(true); abort() })
		var extra [1]byte
		n, _ := io.ReadFull(r, extra[:])
		timer.Stop()
		switch {
		case n > 0:
			abort()
			return ReadResult{Err: fmt.Errorf("%w: bytes after the response", ErrViolation)}
		case late.Load():
			return ReadResult{Err: fmt.Errorf("%w: the helper did not exit after its response", ErrViolation)}
		}
		return ReadResult{Resp: resp}
	}
}
