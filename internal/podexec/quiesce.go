package podexec

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"k8s.io/client-go/tools/remotecommand"

	"github.com/execplane/execplane/pkg/apierror"
)

// quiesceFlag starts the helper's quiesce (fixed argv; its duration follows).
const quiesceFlag = "--quiesce"

// maxQuiesceLine bounds one line of the quiescer's report: it is the executor's output,
// untrusted.
const maxQuiesceLine = 4096

// quiesceReport is the helper's --quiesce report (helper.QuiesceReport), untrusted.
type quiesceReport struct {
	Stopped   int       `json:"stopped"`
	Until     time.Time `json:"until"`
	Continued int       `json:"continued"`
	Done      bool      `json:"done"`
	Error     string    `json:"error"`
}

// Hold is an executor's processes held stopped for a snapshot's cut, until Release or its
// bound. Its end — Release, the stream's, the gateway's — continues them.
type Hold struct {
	// Stopped is how many processes the helper stopped (as it says).
	Stopped int
	in      io.WriteCloser
	lines   *bufio.Scanner
	ended   chan error
	abort   func()
}

// Quiesce stops the processes of pod's executor for at most d — one exec, the helper's
// --quiesce — and returns once the helper says they are stopped. Refused (not an executor,
// processes that would not stop) it is apierror.ErrUnavailable; a stream that never came up
// is ErrExecutorUnreachable.
func (e *Exec) Quiesce(ctx context.Context, pod PodRef, d time.Duration) (*Hold, error) {
	if err := e.checkPod(ctx, pod); err != nil {
		return nil, err
	}
	exec, err := e.helperExec(pod, quiesceFlag, strconv.FormatInt(int64(d/time.Second), 10)+"s")
	if err != nil {
		return nil, err
	}
	ctx, abort := context.WithCancel(ctx)
	stdinR, stdinW := io.Pipe()
	stdoutR, stdoutW := io.Pipe()
	h := &Hold{in: stdinW, ended: make(chan error, 1), abort: abort}
	timer := time.AfterFunc(firstReportWait, abort)
	defer timer.Stop()
	go func() {
		err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: stdinR, Stdout: stdoutW, Stderr: &capped{limit: stderrCap}})
		stdoutW.CloseWithError(io.EOF)
		stdinR.Close()
		h.ended <- err
	}()
	h.lines = bufio.NewScanner(stdoutR)
	h.lines.Buffer(make([]byte, 0, 512), maxQuiesceLine)
	first, err := h.next()
	switch {
	case err != nil:
		h.end()
		return nil, fmt.Errorf("%w: quiesce: %v", ErrExecutorUnreachable, err)
	case first.Error != "":
		h.end()
		return nil, fmt.Errorf("%w: the executor cannot be quiesced: %s", apierror.ErrUnavailable, truncate(first.Error, 256))
	case first.Stopped < 0 || first.Until.IsZero():
		h.end()
		return nil, fmt.Errorf("%w: the quiescer's report is malformed", apierror.ErrUnavailable)
	}
	h.Stopped = first.Stopped
	return h, nil
}

// next reads one report line.
func (h *Hold) next() (quiesceReport, error) {
	var r quiesceReport
	if !h.lines.Scan() {
		if err := h.lines.Err(); err != nil {
			return r, err
		}
		return r, io.ErrUnexpectedEOF
	}
	return r, json.Unmarshal(h.lines.Bytes(), &r)
}

// Release ends the hold: the helper continues what it stopped and says so. It reports
// whether the helper said everything it stopped was continued.
func (h *Hold) Release() bool {
	timer := time.AfterFunc(releaseWait, h.abort) // a stream that stalls ends, and so does the write
	defer timer.Stop()
	_, werr := h.in.Write([]byte(quiesceRelease + "\n"))
	last, err := h.next()
	h.end()
	return werr == nil && err == nil && last.Done && last.Continued == h.Stopped
}

// quiesceRelease is the helper's release line (helper.QuiesceRelease).
const quiesceRelease = "release"

// Bounds on the quiescer's reports: the workload (the same user) could stop the quiescer
// itself; a silent one is given up, and holds until its own deadline.
const (
	firstReportWait = 30 * time.Second
	releaseWait     = 10 * time.Second
)

// end closes the stream and waits for it.
func (h *Hold) end() {
	h.in.Close()
	h.abort()
	<-h.ended
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// quiescer is the Exec's side of Pool.Quiesce.
type quiescer interface {
	Quiesce(ctx context.Context, pod PodRef, d time.Duration) (*Hold, error)
}

// Quiesce holds t's executor quiesced (Exec.Quiesce): one exec of its own, never a session.
func (p *Pool) Quiesce(ctx context.Context, t Target, d time.Duration) (*Hold, error) {
	q, ok := p.exec.(quiescer)
	if !ok {
		return nil, fmt.Errorf("%w: this executor cannot be quiesced", apierror.ErrUnimplemented)
	}
	return q.Quiesce(ctx, t.Pod, d)
}
