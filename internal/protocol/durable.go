package protocol

import (
	"time"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds on durable commands (docs/commands.md). The helper refuses a request beyond them
// whatever the profile says.
const (
	// MaxSpoolBytesCeiling bounds each stream's spool: 1 GiB keeps a spool a small share of
	// any workspace volume worth having.
	MaxSpoolBytesCeiling = 1 << 30
	// MaxDetachedCeiling bounds the detached commands running at once: each is a supervisor
	// process of a few MiB.
	MaxDetachedCeiling = 64
	// MaxDetachedDurationCeiling bounds a detached command's life: a dev server across a
	// week of an agent's turns, not forever.
	MaxDetachedDurationCeiling = 7 * 24 * time.Hour
	// MaxRetainRecordsCeiling bounds the ended records kept (a listing reads them all).
	MaxRetainRecordsCeiling = 1000
	// MaxGrace bounds a cancel's wait between SIGTERM and SIGKILL.
	MaxGrace = time.Minute
	// MaxCommandIDBytes bounds a command id: it names a directory.
	MaxCommandIDBytes = 64
	// MaxListCommands bounds one listing.
	MaxListCommands = 1000
	// MaxStatusOutputBytes bounds the output one status or follow answers: it travels in
	// one response beside the record.
	MaxStatusOutputBytes = 4 << 20
	// DefaultStatusBytes is the output a status or follow answers when it does not say.
	DefaultStatusBytes = 1 << 20
	// MaxFollowWait bounds a follow's long poll.
	MaxFollowWait = time.Minute
	// MinAttach and MaxAttach bound how long an attached command may go unfollowed before
	// its supervisor cancels it: longer than a follow's wait and its round trip, short
	// enough that a vanished caller does not leave its command running for long.
	MinAttach = time.Second
	MaxAttach = 10 * time.Minute
)

// DurableLimits are a durable operation's bounds, from the environment's profile.
type DurableLimits struct {
	// Command bounds the command: stdin by MaxOutputBytes, the timeout by MaxDuration (the
	// detached maximum).
	Command CommandLimits
	// SpoolBytes caps each stream's spool, head and tail kept.
	SpoolBytes uint64
	// MaxDetached bounds the commands running at once.
	MaxDetached int
	// RetainRecords and RetainAge bound the ended records kept.
	RetainRecords int
	RetainAge     time.Duration
}

// DurableLimitsOf reads a request's durable limits; values past a ceiling stay past it
// (Check refuses them) instead of overflowing.
func DurableLimitsOf(lim *helperv1.Limits) DurableLimits {
	millis := min(lim.GetMaxDetachedMillis(), uint64(MaxDetachedDurationCeiling/time.Millisecond)+1)
	retain := min(lim.GetRetainMillis(), uint64(365*24*time.Hour/time.Millisecond))
	return DurableLimits{
		Command:       CommandLimits{MaxOutputBytes: lim.GetMaxCommandBytes(), MaxDuration: time.Duration(millis) * time.Millisecond},
		SpoolBytes:    lim.GetMaxSpoolBytes(),
		MaxDetached:   int(min(lim.GetMaxDetached(), MaxDetachedCeiling+1)),
		RetainRecords: int(min(lim.GetRetainRecords(), MaxRetainRecordsCeiling+1)),
		RetainAge:     time.Duration(retain) * time.Millisecond,
	}
}

// Check refuses limits beyond the helper's ceilings.
func (l DurableLimits) Check() error {
	switch {
	case l.Command.MaxOutputBytes == 0 || l.Command.MaxOutputBytes > MaxOutputBytesCeiling:
		return invalidf("max_command_bytes must be 1..%d", MaxOutputBytesCeiling)
	case l.Command.MaxDuration < MinTimeout || l.Command.MaxDuration > MaxDetachedDurationCeiling:
		return invalidf("max_detached_millis must be within [%s, %s]", MinTimeout, MaxDetachedDurationCeiling)
	case l.SpoolBytes < 2 || l.SpoolBytes > MaxSpoolBytesCeiling:
		return invalidf("max_spool_bytes must be 2..%d", MaxSpoolBytesCeiling)
	case l.MaxDetached < 1 || l.MaxDetached > MaxDetachedCeiling:
		return invalidf("max_detached must be 1..%d", MaxDetachedCeiling)
	case l.RetainRecords < 1 || l.RetainRecords > MaxRetainRecordsCeiling:
		return invalidf("retain_records must be 1..%d", MaxRetainRecordsCeiling)
	case l.RetainAge < time.Minute:
		return invalidf("retain_millis must be at least a minute")
	}
	return nil
}

// ValidateCommandID refuses an id that could not name a command's directory: 1..64 bytes of
// [A-Za-z0-9._-], not starting with '.' or '-'.
func ValidateCommandID(id string) error {
	if id == "" || len(id) > MaxCommandIDBytes || id[0] == '.' || id[0] == '-' {
		return invalidf("command_id must be 1..%d bytes of [A-Za-z0-9._-], not starting with '.' or '-'", MaxCommandIDBytes)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return invalidf("command_id must be 1..%d bytes of [A-Za-z0-9._-], not starting with '.' or '-'", MaxCommandIDBytes)
		}
	}
	return nil
}

// ValidateDurable checks a durable operation against the limits without touching anything:
// the gateway calls it before it execs, and the helper again.
func ValidateDurable(d *helperv1.Durable, lim DurableLimits) error {
	if err := lim.Check(); err != nil {
		return err
	}
	if err := ValidateRecordKeys(d.GetRecordKeys()); err != nil {
		return err
	}
	switch op := d.GetOp().(type) {
	case *helperv1.Durable_Start:
		if err := ValidateCommandID(op.Start.GetCommandId()); err != nil {
			return err
		}
		if op.Start.GetSeal() != nil {
			return invalidf("seal: only a helper gives it, to its supervisor")
		}
		if a := time.Duration(op.Start.GetAttachMillis()) * time.Millisecond; !op.Start.GetDetached() && (a < MinAttach || a > MaxAttach) {
			return invalidf("attach_millis must be within [%s, %s] for a command that is not detached", MinAttach, MaxAttach)
		}
		if err := ValidateWorkingDirectory(op.Start.GetCommand().GetWorkingDirectory()); err != nil {
			return err
		}
		_, _, err := ValidateCommand(op.Start.GetCommand(), lim.Command)
		return err
	case *helperv1.Durable_Status:
		if op.Status.GetMaxBytes() > MaxStatusOutputBytes {
			return invalidf("max_bytes must be at most %d", MaxStatusOutputBytes)
		}
		return ValidateCommandID(op.Status.GetCommandId())
	case *helperv1.Durable_Follow:
		if op.Follow.GetMaxBytes() > MaxStatusOutputBytes || op.Follow.GetWaitMillis() > uint64(MaxFollowWait/time.Millisecond) {
			return invalidf("max_bytes must be at most %d, wait at most %s", MaxStatusOutputBytes, MaxFollowWait)
		}
		return ValidateCommandID(op.Follow.GetCommandId())
	case *helperv1.Durable_Cancel:
		if op.Cancel.GetGraceMillis() > uint64(MaxGrace/time.Millisecond) {
			return invalidf("grace must be at most %s", MaxGrace)
		}
		return ValidateCommandID(op.Cancel.GetCommandId())
	case *helperv1.Durable_List:
		if op.List.GetMax() < 1 || op.List.GetMax() > MaxListCommands {
			return invalidf("max must be 1..%d", MaxListCommands)
		}
		return nil
	case *helperv1.Durable_Revoke:
		if op.Revoke.GetBelowGeneration() == 0 {
			return invalidf("below_generation: at least 1")
		}
		return nil
	}
	return invalidf("no durable operation")
}

// Streams are a command's output streams in the order they are read.
var Streams = []executionv1.OutputStream{executionv1.OutputStream_OUTPUT_STREAM_STDOUT, executionv1.OutputStream_OUTPUT_STREAM_STDERR}

// CursorOf reads one stream's offset of a cursor.
func CursorOf(c *executionv1.OutputCursor, s executionv1.OutputStream) uint64 {
	if s == executionv1.OutputStream_OUTPUT_STREAM_STDERR {
		return c.GetStderr()
	}
	return c.GetStdout()
}
