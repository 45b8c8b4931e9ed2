package supervisor

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Timing of the operations that wait on a supervisor.
const (
	// followPoll is how often a follow looks for new output: well within the 200 ms a
	// line may take to reach its caller, and cheap (a directory listing per stream).
	followPoll = 25 * time.Millisecond
	// aliveCheckEvery is how often a follow proves the supervisor still lives, so that a
	// command abandoned under it ends the follow.
	aliveCheckEvery = time.Second
	// cancelPoll is how often a cancel looks for the final record.
	cancelPoll = 10 * time.Millisecond
	// cancelSlack is what a cancel waits beyond the grace: the kill, the reaping (at most
	// 800 ms), the drain and the final record.
	cancelSlack = 3 * time.Second
)

// Do serves one durable operation; cancel, when closed, answers a follow at once.
func Do(cfg Config, req *helperv1.Request, cancel <-chan struct{}) (*helperv1.DurableResult, error) {
	d := req.GetDurable()
	lim := protocol.DurableLimitsOf(req.GetLimits())
	if err := protocol.ValidateDurable(d, lim); err != nil {
		return nil, err
	}
	one := func(info *executionv1.CommandInfo, err error) (*helperv1.DurableResult, error) {
		if err != nil {
			return nil, err
		}
		return &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{info}}, nil
	}
	ring := ringOf(cfg, d)
	switch op := d.GetOp().(type) {
	case *helperv1.Durable_Start:
		return one(start(cfg, req, op.Start, lim))
	case *helperv1.Durable_Status:
		return status(cfg, op.Status, ring.of(op.Status.GetCommandId()))
	case *helperv1.Durable_Follow:
		return follow(cfg, op.Follow, ring.of(op.Follow.GetCommandId()), cancel)
	case *helperv1.Durable_Cancel:
		id := op.Cancel.GetCommandId()
		return one(cancelCommand(cfg, id, ring.of(id), time.Duration(op.Cancel.GetGraceMillis())*time.Millisecond))
	case *helperv1.Durable_List:
		return list(cfg, ring, op.List.GetMax(), lim)
	case *helperv1.Durable_Revoke:
		return revoke(cfg, ring, op.Revoke.GetBelowGeneration())
	}
	return nil, errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "no durable operation")
}

// opened is one command's directory and record, proved and reconciled.
type opened struct {
	dir     int
	rec     *helperv1.CommandRecord
	trusted bool
}

func (o opened) close() { unix.Close(o.dir) }

func open(cfg Config, id string, keys commandKeys) (opened, error) {
	cmds, err := spool.OpenCommands(cfg.Root, false)
	if err != nil {
		return opened{}, notFound(err)
	}
	defer cmds.Close()
	dir, err := cmds.Open(id)
	if err != nil {
		return opened{}, notFound(err)
	}
	p, err := readRecord(dir, keys)
	if err == nil && p.rec.GetInfo().GetCommandId() != id {
		err = spool.ErrBadRecord
	}
	if err == nil {
		p, err = reconcile(dir, p, keys)
	}
	if err != nil {
		unix.Close(dir)
		return opened{}, recordError(err)
	}
	return opened{dir: dir, rec: p.rec, trusted: p.trusted(keys)}, nil
}

// recordError types what reading a record found.
func recordError(err error) error {
	if errors.Is(err, spool.ErrBadRecord) {
		return errorf(helperv1.ErrorCode_ERROR_CODE_DATA_LOSS, "the command's record is unreadable: the workload changed it")
	}
	return notFound(err)
}

// checkCursor refuses offsets past the end of an ended command's streams.
func checkCursor(rec *helperv1.CommandRecord, from *executionv1.OutputCursor) error {
	if !rec.GetEnded() {
		return nil
	}
	if from.GetStdout() > rec.GetInfo().GetStdoutBytes() || from.GetStderr() > rec.GetInfo().GetStderrBytes() {
		return errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "the cursor is past the end of the command's output (%d, %d bytes)",
			rec.GetInfo().GetStdoutBytes(), rec.GetInfo().GetStderrBytes())
	}
	return nil
}

func status(cfg Config, st *helperv1.DurableStatus, keys commandKeys) (*helperv1.DurableResult, error) {
	o, err := open(cfg, st.GetCommandId(), keys)
	if err != nil {
		return nil, err
	}
	defer o.close()
	if err := checkCursor(o.rec, st.GetFrom()); err != nil {
		return nil, err
	}
	budget := int(st.GetMaxBytes())
	if budget == 0 {
		budget = protocol.DefaultStatusBytes
	}
	res := &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{o.rec.GetInfo()}}
	if err := gather(o.dir, st.GetFrom(), budget, res); err != nil {
		return nil, err
	}
	return res, nil
}

// follow answers output from the cursor as soon as there is some, the end once everything
// kept was answered, or nothing after the wait. The record is read before each look: a look
// that finds nothing new after a record that said ended has answered it all (the supervisor
// closes the streams before it writes the final record). Each follow renews an attached
// command's lease.
func follow(cfg Config, f *helperv1.DurableFollow, keys commandKeys, cancel <-chan struct{}) (*helperv1.DurableResult, error) {
	o, err := open(cfg, f.GetCommandId(), keys)
	if err != nil {
		return nil, err
	}
	defer o.close()
	if err := checkCursor(o.rec, f.GetFrom()); err != nil {
		return nil, err
	}
	touchLease(o.dir)
	budget := int(f.GetMaxBytes())
	if budget == 0 {
		budget = protocol.DefaultStatusBytes
	}
	deadline := time.NewTimer(time.Duration(f.GetWaitMillis()) * time.Millisecond)
	defer deadline.Stop()
	poll := time.NewTicker(followPoll)
	defer poll.Stop()
	rec, lastProof := o.rec, time.Now()
	for {
		ended := rec.GetEnded()
		res := &helperv1.DurableResult{Commands: []*executionv1.CommandInfo{rec.GetInfo()}}
		if err := gather(o.dir, f.GetFrom(), budget, res); err != nil {
			return nil, err
		}
		if len(res.Output) > 0 {
			return res, nil
		}
		if ended {
			res.Complete = true
			return res, nil
		}
		select {
		case <-cancel:
			return res, nil
		case <-deadline.C:
			return res, nil
		case <-poll.C:
		}
		next, err := readRecord(o.dir, keys)
		if err != nil {
			return nil, recordError(err)
		}
		if !next.rec.GetEnded() && time.Since(lastProof) > aliveCheckEvery {
			lastProof = time.Now()
			if next, err = reconcile(o.dir, next, keys); err != nil {
				return nil, err
			}
		}
		rec = next.rec
	}
}

// gather adds to res the output from the cursor, at most budget bytes in all, stdout first.
func gather(dir int, from *executionv1.OutputCursor, budget int, res *helperv1.DurableResult) error {
	for _, s := range protocol.Streams {
		at := protocol.CursorOf(from, s)
		for budget > 0 {
			p, err := spool.Read(dir, s, at, budget)
			if err != nil {
				return unavailable(err)
			}
			if len(p.Data) == 0 && p.Skipped == 0 {
				break
			}
			res.Output = append(res.Output, &executionv1.OutputChunk{Stream: s, Offset: p.Offset, Data: p.Data, Skipped: p.Skipped})
			budget -= len(p.Data)
			at = p.Offset + uint64(len(p.Data))
		}
	}
	return nil
}

// leaseName is the file a follow touches: an attached command whose lease is older than its
// attach time is cancelled by its supervisor.
const leaseName = "followed"

// touchLease renews an attached command's lease (best effort: a command whose lease cannot
// be written is cancelled, which is what a caller that cannot follow would want).
func touchLease(dir int) {
	fd, err := unix.Openat(dir, leaseName, unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return
	}
	_ = unix.Futimes(fd, nil)
	unix.Close(fd)
}

// leaseAge is how long ago the lease was last renewed.
func leaseAge(dir int) (time.Duration, bool) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, leaseName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, false
	}
	return time.Since(time.Unix(st.Mtim.Unix())), true
}

// cancelCommand stops a running command — its grace beside the record, SIGTERM to its
// supervisor — and waits for the final record. An ended command is answered as it is; a
// running one whose record the keys do not prove is not signalled (its "supervisor" may be
// any process the workload named).
func cancelCommand(cfg Config, id string, keys commandKeys, grace time.Duration) (*executionv1.CommandInfo, error) {
	o, err := open(cfg, id, keys)
	if err != nil {
		return nil, err
	}
	defer o.close()
	if o.rec.GetEnded() {
		return o.rec.GetInfo(), nil
	}
	if !o.trusted {
		return nil, errorf(helperv1.ErrorCode_ERROR_CODE_DATA_LOSS, "the command's record is not sealed: its supervisor cannot be proved, and nothing was signalled")
	}
	if err := writeGrace(o.dir, grace, reasonCaller); err != nil {
		return nil, unavailable(err)
	}
	if err := signalSupervisor(o.rec.GetSupervisor(), unix.SIGTERM); err != nil {
		return nil, fmt.Errorf("signalling the supervisor: %w", err)
	}
	deadline := time.Now().Add(grace + cancelSlack)
	poll := time.NewTicker(cancelPoll)
	defer poll.Stop()
	for {
		p, err := readRecord(o.dir, keys)
		if err != nil {
			return nil, recordError(err)
		}
		if p, err = reconcile(o.dir, p, keys); err != nil {
			return nil, err
		}
		if p.rec.GetEnded() || time.Now().After(deadline) {
			return p.rec.GetInfo(), nil
		}
		<-poll.C
	}
}

// revokeGrace is the grace of a command ended by a revocation: short, since whoever holds
// the revoked grants may be the one running it, yet room to flush.
const revokeGrace = 2 * time.Second

// revoke ends every running command started under a grant generation below gen whose
// record is proved, and answers them once recorded. A command that is not recorded ended
// after the grace and its slack — its supervisor stopped, or holding a longer grace the
// workload gave it — is killed with everything under its supervisor, and recorded
// CANCELLED by the revoke. Then, in an executor container (PID 1 is the helper's pause),
// every process reparented to PID 1 that no proved record of a running command names is
// killed with its descendants: what a command left behind by killing its own supervisor,
// or hid by removing its record.
func revoke(cfg Config, ring keyring, gen uint64) (*helperv1.DurableResult, error) {
	cmds, err := spool.OpenCommands(cfg.Root, false)
	if errors.Is(err, spool.ErrNoCommand) {
		sweepOrphans(nil)
		return &helperv1.DurableResult{}, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	defer cmds.Close()
	entries, err := scanLocked(cmds, ring)
	if err != nil {
		return nil, unavailable(err)
	}
	ids := signalRevoked(cmds, entries, gen)
	deadline := time.Now().Add(revokeGrace + cancelSlack)
	res := &helperv1.DurableResult{}
	for _, id := range ids {
		keys := ring.of(id)
		for {
			p, err := readReconciled(cmds, id, keys)
			if err != nil {
				break
			}
			if p.rec.GetEnded() {
				res.Commands = append(res.Commands, p.rec.GetInfo())
				break
			}
			if time.Now().After(deadline) {
				if info, err := killRevoked(cmds, id, p, keys); err == nil {
					res.Commands = append(res.Commands, info)
				}
				break
			}
			time.Sleep(cancelPoll)
		}
	}
	if after, err := scanLocked(cmds, ring); err == nil {
		sweepOrphans(after)
	}
	return res, nil
}

// revokedKilledMessage is the message of a revoked command killed after its grace.
const revokedKilledMessage = "cancelled: the environment's grants were revoked; killed after its grace"

// killRevoked kills a revoked command that outlived its grace — its supervisor and
// everything under it — and records it CANCELLED (its supervisor cannot any more).
func killRevoked(cmds *spool.Commands, id string, p proved, keys commandKeys) (*executionv1.CommandInfo, error) {
	if sup := p.rec.GetSupervisor(); alive(sup) {
		killTree(int(sup.GetPid()))
	}
	dir, err := cmds.Open(id)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dir)
	again, err := readRecord(dir, keys)
	if err != nil || again.rec.GetEnded() || !again.sealed {
		return again.rec.GetInfo(), err
	}
	info := again.rec.GetInfo()
	info.StdoutBytes, info.StderrBytes = ends(dir)
	info.State = executionv1.CommandState_COMMAND_STATE_CANCELLED
	info.Message = revokedKilledMessage
	res := &executionv1.CommandResult{
		State: executionv1.CommandState_COMMAND_STATE_CANCELLED, ExitCode: -1, Signal: int32(unix.SIGKILL),
		Stdout:    &executionv1.CapturedOutput{TotalBytes: info.StdoutBytes},
		Stderr:    &executionv1.CapturedOutput{TotalBytes: info.StderrBytes},
		StartedAt: info.GetStartedAt(), Message: revokedKilledMessage,
	}
	if started := info.GetStartedAt().AsTime(); !started.IsZero() {
		res.Duration = durationSince(started)
	}
	res.Receipt = process.Receipt(res)
	info.Result = res
	again.rec.Ended = true
	if err := spool.WriteRecord(dir, again.rec, keys.seal()); err != nil {
		return nil, err
	}
	return info, nil
}

// killTree SIGKILLs root and every descendant it has, again until none is found (a fork
// between a look and a kill is caught by the next look).
func killTree(root int) {
	for range killRounds {
		var tree []int
		frontier := []int{root}
		for len(frontier) > 0 && len(tree) < maxKilled {
			pid := frontier[0]
			frontier = frontier[1:]
			tree = append(tree, pid)
			frontier = append(frontier, process.Children(pid)...)
		}
		alive := 0
		for _, pid := range tree {
			if unix.Kill(pid, unix.SIGKILL) == nil {
				alive++
			}
		}
		if alive == 0 {
			return
		}
		time.Sleep(cancelPoll)
	}
}

// Bounds of killTree: rounds against forks, and processes per round (the Pod's pid limit
// is far below).
const (
	killRounds = 5
	maxKilled  = 1 << 15
)

// sweepOrphans kills, in an executor container only, each process reparented to PID 1 that
// is not the supervisor of a proved running command (entries): an escaped descendant, or a
// supervisor whose record the workload removed. Nothing else has PID 1 as its parent there:
// the helpers the gateway starts are the runtime's exec's children, commands descend from
// their helper or supervisor.
func sweepOrphans(entries []entry) {
	if !InExecutor() {
		return
	}
	keep := map[int]bool{os.Getpid(): true}
	for _, e := range entries {
		if e.trusted && !e.rec.GetEnded() {
			keep[int(e.rec.GetSupervisor().GetPid())] = true
		}
	}
	for _, pid := range process.Children(1) {
		if !keep[pid] {
			killTree(pid)
		}
	}
}

// InExecutor reports whether this process runs in an executor container: its PID 1 is the
// helper's pause (`<helper> --pause`), which the workload cannot rename. Elsewhere (the
// local cluster's fake node runs helpers as processes of the machine) PID 1 is the
// machine's, and nothing is swept.
func InExecutor() bool {
	data, err := os.ReadFile("/proc/1/cmdline")
	if err != nil {
		return false
	}
	argv := strings.Split(strings.TrimRight(string(data), "\x00"), "\x00")
	return len(argv) == 2 && argv[1] == pauseFlag
}

// isSupervisor reports whether pid's command line is a supervisor's (Argv0 Flag ...).
func isSupervisor(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return false
	}
	argv := strings.SplitN(string(data), "\x00", 3)
	return len(argv) >= 2 && argv[0] == Argv0 && argv[1] == Flag
}

// pauseFlag is the executor container's main process's flag (internal/executor).
const pauseFlag = "--pause"

// scanLocked is scan under the workspace's command lock.
func scanLocked(cmds *spool.Commands, ring keyring) ([]entry, error) {
	unlock, err := cmds.Lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	return scan(cmds, ring)
}

// signalRevoked leaves a revocation's grace beside each running, proved command of a
// generation below gen and signals its supervisor; it returns their ids.
func signalRevoked(cmds *spool.Commands, entries []entry, gen uint64) []string {
	var ids []string
	for _, e := range entries {
		if e.rec.GetEnded() || !e.trusted || e.rec.GetGrantGeneration() >= gen {
			continue
		}
		dir, err := cmds.Open(e.id)
		if err != nil {
			continue
		}
		if writeGrace(dir, revokeGrace, reasonRevoked) == nil && signalSupervisor(e.rec.GetSupervisor(), unix.SIGTERM) == nil {
			ids = append(ids, e.id)
		}
		unix.Close(dir)
	}
	return ids
}

// signalSupervisor signals a record's supervisor through a pidfd, after proving again that
// the pid is still that supervisor: between the proof of open() and the signal it may have
// ended and its pid been given to another process. A supervisor gone meanwhile is no error.
func signalSupervisor(sup *helperv1.Supervisor, sig unix.Signal) error {
	fd, err := unix.PidfdOpen(int(sup.GetPid()), 0)
	if errors.Is(err, unix.ESRCH) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	// The pidfd pins the process: if it is still the supervisor now, the signal reaches it.
	// A process that is no supervisor at all (its command line says so: it cannot be
	// changed from outside) is never signalled, whatever a record says.
	if !alive(sup) || !isSupervisor(int(sup.GetPid())) {
		return nil
	}
	if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
		return err
	}
	return nil
}

// Why a supervisor was signalled, as the cancel file says after its grace; the final
// record's message follows it. The workload may write the file too (it may signal its own
// supervisor): the message is what the file said, the state CANCELLED either way.
const (
	reasonCaller  = ""
	reasonRevoked = "revoked"
)

// writeGrace leaves a cancel's grace (and why) for the supervisor to read when it is
// signalled.
func writeGrace(dir int, grace time.Duration, reason string) error {
	fd, err := unix.Openat(dir, cancelName, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("the cancel file is not a regular file")
	}
	content := strconv.FormatInt(grace.Milliseconds(), 10)
	if reason != "" {
		content += " " + reason
	}
	_, err = unix.Write(fd, []byte(content))
	return err
}

// list answers the newest commands first; it applies retention on the way.
func list(cfg Config, ring keyring, max uint32, lim protocol.DurableLimits) (*helperv1.DurableResult, error) {
	cmds, err := spool.OpenCommands(cfg.Root, false)
	if errors.Is(err, spool.ErrNoCommand) {
		return &helperv1.DurableResult{}, nil
	}
	if err != nil {
		return nil, unavailable(err)
	}
	defer cmds.Close()
	unlock, err := cmds.Lock()
	if err != nil {
		return nil, unavailable(err)
	}
	defer unlock()
	entries, err := scan(cmds, ring)
	if err != nil {
		return nil, unavailable(err)
	}
	entries = retain(cmds, entries, lim, time.Now())
	slices.SortFunc(entries, func(a, b entry) int {
		if c := b.rec.GetInfo().GetStartedAt().AsTime().Compare(a.rec.GetInfo().GetStartedAt().AsTime()); c != 0 {
			return c
		}
		switch {
		case a.id < b.id:
			return -1
		case a.id > b.id:
			return 1
		}
		return 0
	})
	res := &helperv1.DurableResult{}
	for i, e := range entries {
		if i == int(max) {
			res.More = true
			break
		}
		res.Commands = append(res.Commands, e.rec.GetInfo())
	}
	return res, nil
}
