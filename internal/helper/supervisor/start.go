package supervisor

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/helper/fileops"
	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Argv0 names a supervisor in ps; Flag makes the helper one.
const (
	Argv0 = "execplane-helper-supervisor"
	Flag  = "--supervise"
)

// startReportTimeout bounds the wait for a new supervisor to say that its command runs: a
// start is a fork and an exec.
const startReportTimeout = 10 * time.Second

// The descriptors a supervisor is started with, beyond stdin, stdout and stderr (all three
// /dev/null: it answers nobody).
const (
	fdStart   = 3 // the start request, one frame, then EOF
	fdReport  = 4 // the record once the command runs (or could not start), one frame
	fdCommand = 5 // the command's spool directory
	fdWorkDir = 6 // the working directory, resolved beneath the root by the kernel
)

// Config is what durable operations need.
type Config struct {
	// Root is the workspace root.
	Root string
	// Self is the helper executable a supervisor is started from ("/proc/self/exe").
	Self string
	// Spawn starts a supervisor; a session passes one that keeps it from its sweeps. Nil
	// means os.StartProcess.
	Spawn func(name string, argv []string, attr *os.ProcAttr) (*os.Process, error)
	// RefuseKeys makes the operations ignore the record keys a request gives: this helper
	// was dumpable from its exec, so the keys may have been read on their way. Records are
	// then written unsealed and answered unverified.
	RefuseKeys bool
}

func (c Config) spawn(name string, argv []string, attr *os.ProcAttr) (*os.Process, error) {
	if c.Spawn != nil {
		return c.Spawn(name, argv, attr)
	}
	return os.StartProcess(name, argv, attr)
}

func durationSince(t time.Time) *durationpb.Duration { return durationpb.New(time.Since(t)) }

// start serves a DurableStart.
func start(cfg Config, req *helperv1.Request, st *helperv1.DurableStart, lim protocol.DurableLimits) (*executionv1.CommandInfo, error) {
	digest, err := specDigest(st)
	if err != nil {
		return nil, err
	}
	// The working directory first: a refusal of it leaves nothing behind. A replay-only
	// start begins nothing and needs none (its command's may be gone since it began).
	work := -1
	if !st.GetReplayOnly() {
		root, err := fileops.OpenRoot(cfg.Root)
		if err != nil {
			return nil, err
		}
		defer root.Close()
		if work, err = root.OpenDir(st.GetCommand().GetWorkingDirectory()); err != nil {
			return nil, err
		}
		defer unix.Close(work)
	}
	cmds, err := spool.OpenCommands(cfg.Root, true)
	if err != nil {
		return nil, unavailable(err)
	}
	defer cmds.Close()
	unlock, err := cmds.Lock()
	if err != nil {
		return nil, unavailable(err)
	}
	defer unlock()

	ring := ringOf(cfg, req.GetDurable())
	id := st.GetCommandId()
	keys := ring.of(id)
	if dir, err := cmds.Open(id); err == nil {
		p, err := readRecord(dir, keys)
		switch {
		case errors.Is(err, spool.ErrNoCommand):
			// No record under the lock: a start that died before its first write left the
			// directory; nothing runs there.
			unix.Close(dir)
			if err := cmds.Remove(id); err != nil {
				return nil, unavailable(err)
			}
		case err != nil && !errors.Is(err, spool.ErrBadRecord) && protocol.CodeOf(err) != helperv1.ErrorCode_ERROR_CODE_DATA_LOSS:
			unix.Close(dir)
			return nil, unavailable(err) // the volume, not the id: retryable
		case err != nil || !p.trusted(keys) || p.rec.GetSpecDigest() != digest || !sameStart(p.rec, st):
			// Another program's or another run's, or a record the keys do not prove
			// (planted by the workload, or altered): the id is taken, and nothing is
			// answered from it. (A sealed record of an earlier run put back under a reused
			// id is another run's: only a retry of the same run's start is answered.)
			unix.Close(dir)
			return nil, errorf(helperv1.ErrorCode_ERROR_CODE_ALREADY_EXISTS, "command %s exists with another program or run, or with a record its supervisor did not write", id)
		default:
			defer unix.Close(dir)
			if p, err = reconcile(dir, p, keys); err != nil {
				return nil, err
			}
			return p.rec.GetInfo(), nil // the same start again: the command it started
		}
	} else if !errors.Is(err, spool.ErrNoCommand) {
		return nil, unavailable(err)
	}
	if st.GetReplayOnly() {
		// Checked under the lock that retires records: a record gone by now begins nothing.
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, "command %s has no record: a replay-only start begins nothing", id)
	}

	entries, err := scan(cmds, ring)
	if err != nil {
		return nil, unavailable(err)
	}
	// Commands of a revoked generation end here too, should every gateway have missed the
	// revocation (docs/commands.md "Revocation").
	if gen := req.GetDurable().GetGrantGeneration(); gen > 0 {
		signalRevoked(cmds, entries, gen)
	}
	running := 0
	for _, e := range entries {
		// Only proved records count: an unsealed one (planted, or an older helper's that no
		// supervisor of this executor runs) must not hold the workspace's starts.
		if !e.rec.GetEnded() && e.trusted {
			running++
		}
	}
	if running >= lim.MaxDetached {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "%d durable commands run already, the most the profile allows", running)
	}
	retain(cmds, entries, lim, time.Now())

	dir, err := cmds.Create(id)
	if err != nil {
		return nil, unavailable(err)
	}
	defer unix.Close(dir)
	info, handed, err := launch(cfg, req, st, digest, keys, dir, work)
	if err != nil && !handed {
		_ = cmds.Remove(id) // nothing ran: nothing is left
	}
	return info, err
}

// sameStart reports whether a record is that of this start: the same run and epoch (its
// spec digest compared apart).
func sameStart(rec *helperv1.CommandRecord, st *helperv1.DurableStart) bool {
	return rec.GetInfo().GetRunId() == st.GetRunId() && rec.GetInfo().GetEpoch() == st.GetEpoch()
}

// handoverTimeout bounds writing the start to a new supervisor (a pipe's buffer holds it
// unless the start carries a large stdin).
const handoverTimeout = 10 * time.Second

// launch starts the supervisor, records it, hands it the start and waits for its report.
// handed reports whether the start reached the supervisor: from then on the command may
// run, and its directory stays whatever happens.
func launch(cfg Config, req *helperv1.Request, st *helperv1.DurableStart, digest string, keys commandKeys, dir, work int) (info *executionv1.CommandInfo, handed bool, err error) {
	// The supervisor is given its command's key only, never the environment's.
	handover := proto.CloneOf(st)
	handover.Seal = keys.seal()
	frame, err := protocol.Marshal(&helperv1.Request{
		Version: helperv1.ProtocolVersion_PROTOCOL_VERSION_1, RequestId: req.GetRequestId(), Limits: req.GetLimits(),
		Operation: &helperv1.Request_Durable{Durable: &helperv1.Durable{
			Op: &helperv1.Durable_Start{Start: handover}, GrantGeneration: req.GetDurable().GetGrantGeneration()}},
	})
	if err != nil {
		return nil, false, err
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		return nil, false, err
	}
	defer null.Close()
	startR, startW, err := os.Pipe()
	if err != nil {
		return nil, false, err
	}
	defer startW.Close()
	reportR, reportW, err := os.Pipe()
	if err != nil {
		startR.Close()
		return nil, false, err
	}
	defer reportR.Close()
	dirF, err := dupFile(dir, "command")
	if err != nil {
		startR.Close()
		reportW.Close()
		return nil, false, err
	}
	defer dirF.Close()
	workF, err := dupFile(work, "work")
	if err != nil {
		startR.Close()
		reportW.Close()
		return nil, false, err
	}
	defer workF.Close()
	p, err := cfg.spawn(cfg.Self, []string{Argv0, Flag, "--root", cfg.Root}, &os.ProcAttr{
		Env:   os.Environ(),
		Files: []*os.File{null, null, null, startR, reportW, dirF, workF},
		// Its own session: no signal meant for the helper's group reaches it, and it
		// outlives the call.
		Sys: &syscall.SysProcAttr{Setsid: true},
	})
	startR.Close()
	reportW.Close()
	if err != nil {
		if errors.Is(err, unix.EAGAIN) {
			return nil, false, errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "cannot start the command's supervisor: the executor's process limit is reached")
		}
		return nil, false, fmt.Errorf("starting the command's supervisor: %w", err)
	}
	_ = p.Release()
	rec := &helperv1.CommandRecord{
		Info: &executionv1.CommandInfo{
			CommandId: st.GetCommandId(), State: executionv1.CommandState_COMMAND_STATE_RUNNING,
			Program: programOf(st.GetCommand()), RunId: st.GetRunId(), Epoch: st.GetEpoch(),
			StartedAt: timestamppb.Now(), Detached: st.GetDetached(),
		},
		SpecDigest:      digest,
		Supervisor:      identify(p.Pid),
		GrantGeneration: req.GetDurable().GetGrantGeneration(),
	}
	touchLease(dir) // the first follow has the attach time to come
	if err := spool.WriteRecord(dir, rec, keys.seal()); err != nil {
		_ = unix.Kill(p.Pid, unix.SIGKILL) // it has not been told to start anything
		return nil, false, unavailable(err)
	}
	_ = startW.SetWriteDeadline(time.Now().Add(handoverTimeout))
	if err := protocol.WritePayload(startW, frame, protocol.MaxRequestBytes); err != nil {
		_ = unix.Kill(p.Pid, unix.SIGKILL) // it never read a whole start: nothing ran
		return nil, false, fmt.Errorf("handing the start to its supervisor: %w", err)
	}
	startW.Close()
	_ = reportR.SetReadDeadline(time.Now().Add(startReportTimeout))
	var reported helperv1.CommandRecord
	if err := protocol.ReadFrame(reportR, &reported, spool.MaxRecordBytes); err == nil && reported.GetInfo() != nil {
		return reported.GetInfo(), true, nil
	}
	// No report: the supervisor died (or is slow); the record says what is known.
	got, err := readRecord(dir, keys)
	if err != nil {
		return nil, true, err
	}
	if got, err = reconcile(dir, got, keys); err != nil {
		return nil, true, err
	}
	return got.rec.GetInfo(), true, nil
}

// unavailable types an error of the spool itself: the workspace cannot keep records now.
func unavailable(err error) error {
	var c interface{ HelperCode() helperv1.ErrorCode }
	if errors.As(err, &c) {
		return err
	}
	if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.EDQUOT) {
		return errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, "the workspace volume is full: %v", err)
	}
	return errorf(helperv1.ErrorCode_ERROR_CODE_UNAVAILABLE, "the command records cannot be used: %v", err)
}

// dupFile is a descriptor of its own for an *os.File (which closes it), leaving fd to its
// owner.
func dupFile(fd int, name string) (*os.File, error) {
	d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(d), name), nil
}
