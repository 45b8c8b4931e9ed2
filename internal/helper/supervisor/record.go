package supervisor

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"slices"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/execplane/execplane/internal/helper/process"
	"github.com/execplane/execplane/internal/helper/spool"
	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// maxProgramBytes bounds the program a record shows (argv or script).
const maxProgramBytes = 1 << 10

// abandonedMessage says why a command is ABANDONED.
const abandonedMessage = "its supervisor is gone without recording an end: the executor stopped (replaced, suspended, retired or deleted) or the supervisor was killed"

// specDigest identifies a start: a second start of an id is the same command only when its
// spec and how it is held (detached or attached) are equal — a streamed call must never
// take over a detached command and cancel it when it ends.
func specDigest(st *helperv1.DurableStart) (string, error) {
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(&helperv1.DurableStart{
		Command: st.GetCommand(), Detached: st.GetDetached(), AttachMillis: st.GetAttachMillis()})
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// programOf is what a record shows of a spec: argv or the script, cut to maxProgramBytes.
func programOf(spec *executionv1.CommandSpec) *executionv1.CommandProgram {
	p := &executionv1.CommandProgram{WorkingDirectory: spec.GetWorkingDirectory()}
	budget := maxProgramBytes
	if sh, ok := spec.GetProgram().(*executionv1.CommandSpec_Shell); ok {
		p.Shell = process.TruncateUTF8(sh.Shell, budget)
		p.Cut = len(p.Shell) < len(sh.Shell)
		return p
	}
	for _, a := range spec.GetArgv().GetArgs() {
		if budget <= 0 {
			p.Cut = true
			break
		}
		c := process.TruncateUTF8(a, budget)
		p.Argv = append(p.Argv, c)
		p.Cut = p.Cut || len(c) < len(a)
		budget -= len(c)
	}
	return p
}

// reconcile returns the record as it stands: a running command's totals are what its spool
// holds; a command whose supervisor is proved gone is recorded ABANDONED (its output kept),
// sealed only if the record it read again was.
func reconcile(dir int, p proved, keys commandKeys) (proved, error) {
	rec := p.rec
	if rec.GetEnded() || !p.trusted(keys) {
		// An unproved record is answered as it is: what it says of a supervisor is not
		// acted on, not even to record it abandoned.
		return p, nil
	}
	if alive(rec.GetSupervisor()) {
		rec.Info.StdoutBytes, rec.Info.StderrBytes = ends(dir)
		return p, nil
	}
	// Read again after the proof: a supervisor writes its final record before it exits.
	again, err := readRecord(dir, keys)
	if err != nil {
		return proved{}, err
	}
	if again.rec.GetEnded() {
		return again, nil
	}
	info := again.rec.GetInfo()
	info.StdoutBytes, info.StderrBytes = ends(dir)
	info.State = executionv1.CommandState_COMMAND_STATE_ABANDONED
	info.Message = abandonedMessage
	started := info.GetStartedAt().AsTime()
	res := &executionv1.CommandResult{
		State: executionv1.CommandState_COMMAND_STATE_ABANDONED, ExitCode: -1,
		Stdout:    &executionv1.CapturedOutput{TotalBytes: info.StdoutBytes},
		Stderr:    &executionv1.CapturedOutput{TotalBytes: info.StderrBytes},
		StartedAt: info.GetStartedAt(), Message: abandonedMessage,
	}
	if !started.IsZero() {
		res.Duration = durationSince(started)
	}
	res.Receipt = process.Receipt(res)
	info.Result = res
	again.rec.Ended = true
	if err := spool.WriteRecord(dir, again.rec, again.writeKey(keys)); err != nil {
		return proved{}, err
	}
	return again, nil
}

// ends are the streams' ends as the spool holds them.
func ends(dir int) (stdout, stderr uint64) {
	stdout, _ = spool.End(dir, executionv1.OutputStream_OUTPUT_STREAM_STDOUT)
	stderr, _ = spool.End(dir, executionv1.OutputStream_OUTPUT_STREAM_STDERR)
	return stdout, stderr
}

// entry is one command as a listing sees it.
type entry struct {
	id  string
	rec *helperv1.CommandRecord
	// trusted: what the record says of its supervisor may be acted on.
	trusted bool
}

// scan reads every command's record, proved and reconciled; directories that are not
// commands (a bad id, no record, an unreadable or unproved one) are passed by.
func scan(c *spool.Commands, ring keyring) ([]entry, error) {
	ids, err := c.IDs()
	if err != nil {
		return nil, err
	}
	var out []entry
	for _, id := range ids {
		if protocol.ValidateCommandID(id) != nil {
			continue
		}
		keys := ring.of(id)
		p, err := readReconciled(c, id, keys)
		if err != nil {
			continue
		}
		out = append(out, entry{id: id, rec: p.rec, trusted: p.trusted(keys)})
	}
	return out, nil
}

// readReconciled reads one command's record, proves it and reconciles it.
func readReconciled(c *spool.Commands, id string, keys commandKeys) (proved, error) {
	dir, err := c.Open(id)
	if err != nil {
		return proved{}, err
	}
	defer unix.Close(dir)
	p, err := readRecord(dir, keys)
	if err != nil {
		return proved{}, err
	}
	if p.rec.GetInfo().GetCommandId() != id {
		return proved{}, spool.ErrBadRecord
	}
	return reconcile(dir, p, keys)
}

// retain removes ended records beyond the limits: older than the age first, then the oldest
// ended until at most the count is left. Running commands are never touched. The caller
// holds the lock.
func retain(c *spool.Commands, entries []entry, lim protocol.DurableLimits, now time.Time) []entry {
	var ended []entry
	kept := entries[:0:0]
	for _, e := range entries {
		if e.rec.GetEnded() {
			ended = append(ended, e)
		} else {
			kept = append(kept, e)
		}
	}
	slices.SortFunc(ended, func(a, b entry) int { return endOf(a.rec).Compare(endOf(b.rec)) })
	for i, e := range ended {
		old := now.Sub(endOf(e.rec)) > lim.RetainAge
		over := len(ended)-i > lim.RetainRecords
		if (old || over) && c.Remove(e.id) == nil {
			continue
		}
		kept = append(kept, e)
	}
	return kept
}

// endOf is when a command ended (its start for one without a duration).
func endOf(rec *helperv1.CommandRecord) time.Time {
	t := rec.GetInfo().GetStartedAt().AsTime()
	if d := rec.GetInfo().GetResult().GetDuration(); d != nil {
		t = t.Add(d.AsDuration())
	}
	return t
}

// errorf is a typed refusal.
func errorf(code helperv1.ErrorCode, format string, args ...any) error {
	return protocol.Errorf(code, format, args...)
}

// notFound answers an absent command, exactly as an id that never existed.
func notFound(err error) error {
	if errors.Is(err, spool.ErrNoCommand) {
		return errorf(helperv1.ErrorCode_ERROR_CODE_NOT_FOUND, "no such command")
	}
	return err
}
