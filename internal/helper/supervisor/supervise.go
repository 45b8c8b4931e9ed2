package supervisor

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// cancelName is the file beside a record in which a cancel leaves its grace (milliseconds,
// decimal) before it signals the supervisor.
const cancelName = "cancel"

// defaultGrace is the grace of a SIGTERM that came without a cancel file (the workload's).
const defaultGrace = 10 * time.Second

// Supervise is a supervisor's life: read the start, run the command with its output going
// to the spool, record it running, report, wait, record how it ended. environ is the base
// environment of the command.
func Supervise(environ []string) error {
	// Inherited without close-on-exec (ProcAttr.Files): the command must inherit neither the
	// report pipe (it could forge a report, or hold the starter waiting) nor the spool.
	unix.CloseOnExec(fdReport)
	unix.CloseOnExec(fdCommand)
	startF := os.NewFile(fdStart, "start")
	report := os.NewFile(fdReport, "report")
	defer report.Close()
	var req helperv1.Request
	err := protocol.ReadFrame(startF, &req, protocol.MaxRequestBytes)
	startF.Close()
	if err != nil {
		return fmt.Errorf("supervisor: the start: %w", err)
	}
	st := req.GetDurable().GetStart()
	lim := protocol.DurableLimitsOf(req.GetLimits())
	// The command's key is the one thing a helper adds to a start; it is checked apart.
	seal := st.GetSeal()
	if st != nil {
		st.Seal = nil
	}
	if err := protocol.ValidateDurable(req.GetDurable(), lim); err != nil || st == nil {
		return fmt.Errorf("supervisor: the start: %v", err)
	}
	var keys []*helperv1.RecordKey
	if seal != nil {
		if err := protocol.ValidateRecordKey(seal); err != nil {
			return fmt.Errorf("supervisor: the command's key: %v", err)
		}
		keys = []*helperv1.RecordKey{seal}
	}
	dir := fdCommand
	rec, sealed, err := spool.ReadRecord(dir, keys)
	if err != nil {
		return fmt.Errorf("supervisor: the record: %w", err)
	}
	if seal != nil && !sealed {
		return fmt.Errorf("supervisor: the record its helper wrote is not sealed")
	}
	write := func(rec *helperv1.CommandRecord) error { return spool.WriteRecord(dir, rec, seal) }
	// Signals first: a cancel that comes while the command starts must not kill us before
	// we record anything.
	terms := make(chan os.Signal, 1)
	signal.Notify(terms, syscall.SIGTERM)
	// Caught, not ignored: an ignored signal stays ignored across exec, and the command must
	// start with every signal at its default.
	ignored := make(chan os.Signal, 1)
	signal.Notify(ignored, syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	go func() {
		for range ignored {
		}
	}()
	// Room for the final record on a volume the command may fill: released just before it
	// is written.
	reserve := reserveRecord(dir)
	if err := process.EnableSubreaper(); err != nil {
		return fail(dir, rec, write, report, fmt.Errorf("subreaper: %w", err))
	}
	err = unix.Fchdir(fdWorkDir)
	unix.Close(fdWorkDir)
	if err != nil {
		return fail(dir, rec, write, report, fmt.Errorf("working directory: %w", err))
	}
	stdout, err := newSink(dir, executionv1.OutputStream_OUTPUT_STREAM_STDOUT, lim.SpoolBytes)
	if err != nil {
		return fail(dir, rec, write, report, err)
	}
	stderr, err := newSink(dir, executionv1.OutputStream_OUTPUT_STREAM_STDERR, lim.SpoolBytes)
	if err != nil {
		return fail(dir, rec, write, report, err)
	}
	stop := make(chan time.Duration, 1)
	var once sync.Once
	var why atomic.Value // why it was stopped, once it was
	stopWith := func(grace time.Duration, reason string) {
		once.Do(func() {
			why.Store(reason)
			stop <- grace
		})
	}
	go func() {
		<-terms
		stopWith(graceOf(dir))
	}()
	done := make(chan struct{})
	defer close(done)
	if !st.GetDetached() {
		go watchLease(dir, time.Duration(st.GetAttachMillis())*time.Millisecond, done, stopWith)
	}
	reported := false
	res, err := process.Run(st.GetCommand(), process.Options{
		Limits:  lim.Command,
		Durable: true,
		Environ: environ,
		Stop:    stop,
		Stdout:  stdout, Stderr: stderr,
		Started: func(pid int) {
			rec.Pgid = int32(pid)
			rec.Info.StartedAt = timestamppb.Now()
			rec.Supervisor = identify(os.Getpid())
			if write(rec) == nil {
				reported = protocol.WriteFrame(report, rec, spool.MaxRecordBytes) == nil
			}
			report.Close() // the starter answers now; we go on alone
		},
	})
	stdout.w.Close()
	stderr.w.Close()
	if err != nil {
		return fail(dir, rec, write, report, err)
	}
	rec.Ended = true
	rec.Info.State = res.GetState()
	rec.Info.Result = res
	rec.Info.StdoutBytes, rec.Info.StderrBytes = stdout.w.Total(), stderr.w.Total()
	if e := errors.Join(stdout.w.Err(), stderr.w.Err()); e != nil {
		rec.Info.Message = process.TruncateUTF8(e.Error(), maxMessageBytes)
	}
	reason, _ := why.Load().(string)
	if m := reasonMessage(reason); m != "" && res.GetState() == executionv1.CommandState_COMMAND_STATE_CANCELLED {
		rec.Info.Message = process.TruncateUTF8(strings.TrimSpace(m+" "+rec.Info.Message), maxMessageBytes)
		res.Message = m
		res.Receipt = process.Receipt(res)
	}
	if res.GetState() == executionv1.CommandState_COMMAND_STATE_START_FAILED {
		rec.Info.StartedAt = res.GetStartedAt()
	}
	reserve()
	if err := write(rec); err != nil {
		return err
	}
	if !reported {
		_ = protocol.WriteFrame(report, rec, spool.MaxRecordBytes)
	}
	return nil
}

// fail records a command that could not be run at all (START_FAILED) and reports it.
func fail(dir int, rec *helperv1.CommandRecord, write func(*helperv1.CommandRecord) error, report *os.File, cause error) error {
	res := &executionv1.CommandResult{
		State: executionv1.CommandState_COMMAND_STATE_START_FAILED, ExitCode: -1,
		Stdout: &executionv1.CapturedOutput{}, Stderr: &executionv1.CapturedOutput{},
		StartedAt: rec.GetInfo().GetStartedAt(), Duration: durationSince(rec.GetInfo().GetStartedAt().AsTime()),
		Message: process.TruncateUTF8("cannot start: "+cause.Error(), maxMessageBytes),
	}
	res.Receipt = process.Receipt(res)
	rec.Ended = true
	rec.Info.State = res.State
	rec.Info.Result = res
	_ = unix.Unlinkat(dir, reserveName, 0)
	if err := write(rec); err != nil {
		return errors.Join(cause, err)
	}
	_ = protocol.WriteFrame(report, rec, spool.MaxRecordBytes)
	return cause
}

// leaseCheck is how often an attached command's supervisor looks at its lease.
const leaseCheck = 250 * time.Millisecond

// watchLease cancels an attached command (at once, as a foreground command whose call ended)
// once no follow has renewed its lease for attach.
func watchLease(dir int, attach time.Duration, done <-chan struct{}, stop func(time.Duration, string)) {
	t := time.NewTicker(leaseCheck)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if age, ok := leaseAge(dir); !ok || age > attach {
				stop(0, reasonCaller)
				return
			}
		}
	}
}

// maxMessageBytes bounds a record's message (the API documents 1024).
const maxMessageBytes = 1024

// reserveName holds room for the final record (spool.MaxRecordBytes) on the volume.
const reserveName = "record.reserve"

// reserveRecord sets aside room for the final record, so that a command that fills the
// volume still has its end recorded, and returns what releases it. Best effort: without
// it, a full volume leaves the command to be recorded ABANDONED.
func reserveRecord(dir int) (release func()) {
	fd, err := unix.Openat(dir, reserveName, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return func() {}
	}
	err = unix.Fallocate(fd, 0, 0, spool.MaxRecordBytes)
	unix.Close(fd)
	if err != nil {
		_ = unix.Unlinkat(dir, reserveName, 0)
		return func() {}
	}
	return func() { _ = unix.Unlinkat(dir, reserveName, 0) }
}

// graceOf reads the grace a cancel left, bounded, and why; the default when there is none.
func graceOf(dir int) (time.Duration, string) {
	fd, err := unix.Openat(dir, cancelName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return defaultGrace, reasonCaller
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return defaultGrace, reasonCaller
	}
	defer unix.Close(fd)
	buf := make([]byte, 32)
	n, _ := unix.Read(fd, buf)
	if n <= 0 {
		return defaultGrace, reasonCaller
	}
	ms, reason, _ := strings.Cut(strings.TrimSpace(string(buf[:n])), " ")
	v, err := strconv.ParseUint(ms, 10, 64)
	if err != nil {
		return defaultGrace, reasonCaller
	}
	return min(time.Duration(v)*time.Millisecond, protocol.MaxGrace), reason
}

// reasonMessage is the message a CANCELLED record carries for why it was signalled.
func reasonMessage(reason string) string {
	switch reason {
	case reasonRevoked:
		return "cancelled: the environment's grants were revoked"
	}
	return ""
}

// sink is a stream's spool as the process package sees an output.
type sink struct {
	w     *spool.Writer
	limit uint64
}

func newSink(dir int, s executionv1.OutputStream, limit uint64) (*sink, error) {
	w, err := spool.NewWriter(dir, s, limit)
	if err != nil {
		return nil, err
	}
	return &sink{w: w, limit: limit}, nil
}

func (s *sink) Write(p []byte) (int, error) { return s.w.Write(p) }

// Captured carries totals only: the output itself is read from the spool by offset.
func (s *sink) Captured() *executionv1.CapturedOutput {
	return &executionv1.CapturedOutput{TotalBytes: s.w.Total(), Truncated: s.w.Total() > s.limit || s.w.Err() != nil}
}
