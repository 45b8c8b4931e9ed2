package helper

import (
	"bufio"
	"encoding/json"
	"io"
	"time"

	"github.com/execplane/execplane/internal/helper/quiesce"
	"github.com/execplane/execplane/internal/helper/supervisor"
	"github.com/execplane/execplane/internal/protocol"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// maxQuiesce bounds --quiesce: a profile's maxQuiesce is at most 30 minutes, and a marker
// further away than quiesce.MaxHold is dropped.
const maxQuiesce = 30 * time.Minute

// QuiesceReport is what --quiesce prints: one JSON line once the processes are stopped (or
// the quiesce failed), and one when they are continued. Error names no path or content.
type QuiesceReport struct {
	Stopped   int       `json:"stopped"`
	Until     time.Time `json:"until,omitzero"`
	Continued int       `json:"continued"`
	Done      bool      `json:"done,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// RunQuiesce stops every process of the executor container but its main process and
// itself (quiesce.Stop), with a marker that keeps commands from starting meanwhile, then
// holds until the release line on stdin (QuiesceRelease) or cfg.Quiesce has passed, and
// continues them. One quiesce at a time: another while one holds is refused. Only in an executor
// container (its own PID namespace, whose PID 1 is the helper's pause): elsewhere — the
// local cluster's fake node runs helpers among the machine's processes — it refuses.
func RunQuiesce(cfg Config, stdin io.Reader, stdout io.Writer) error {
	enc := json.NewEncoder(stdout)
	if !supervisor.InExecutor() {
		err := protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "quiesce runs only in an executor container")
		_ = enc.Encode(QuiesceReport{Error: err.Error()})
		return err
	}
	if quiesce.Held(time.Now()) {
		// Another quiesce holds: two would stop each other, and the first to end would
		// continue what the other still holds.
		err := protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "another quiesce holds this executor")
		_ = enc.Encode(QuiesceReport{Error: err.Error()})
		return err
	}
	until := time.Now().Add(cfg.Quiesce)
	if err := quiesce.Mark(quiesce.Marker{Deadline: until}); err != nil {
		_ = enc.Encode(QuiesceReport{Error: "record the hold: " + err.Error()})
		return err
	}
	procs, err := quiesce.Stop(quiesce.ProcDir)
	if err == nil {
		err = quiesce.Mark(quiesce.Marker{Deadline: until, Procs: procs})
	}
	if err != nil {
		quiesce.Continue(procs)
		quiesce.Unmark()
		_ = enc.Encode(QuiesceReport{Error: err.Error()})
		return err
	}
	released := make(chan struct{})
	go func() {
		// Only the release line ends the hold early: a stream cut before it (the gateway
		// gone mid-cut) holds until the deadline, so that no copy still running sees the
		// processes go on.
		line, _ := bufio.NewReader(io.LimitReader(stdin, 64)).ReadString('\n')
		if line == QuiesceRelease+"\n" {
			close(released)
		}
	}()
	werr := enc.Encode(QuiesceReport{Stopped: len(procs), Until: until})
	if werr == nil {
		timer := time.NewTimer(time.Until(until))
		select {
		case <-released:
		case <-timer.C:
		}
		timer.Stop()
	}
	n := quiesce.Continue(procs)
	quiesce.Unmark()
	if werr != nil {
		return werr
	}
	return enc.Encode(QuiesceReport{Stopped: len(procs), Continued: n, Done: true})
}

// QuiesceRelease is the line on --quiesce's stdin that ends the hold before its deadline.
const QuiesceRelease = "release"

// errHeld refuses a command while a snapshot is being cut: retryable.
var errHeld = protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the workspace is being snapshotted: retry when the snapshot is cut")

// startsProcess reports whether req starts a process: a command, a durable command's start,
// a terminal.
func startsProcess(req *helperv1.Request) bool {
	st := req.GetDurable().GetStart()
	return req.GetCommand() != nil || (st != nil && !st.GetReplayOnly()) || req.GetTerminal() != nil
}

// held is errHeld when req starts a process while a hold is in force (quiesce.Held), nil
// otherwise: nothing new runs while a snapshot is cut; file operations go on (each is a
// rename, whole in any snapshot).
func held(req *helperv1.Request) error {
	if startsProcess(req) && quiesce.Held(time.Now()) {
		return errHeld
	}
	return nil
}
