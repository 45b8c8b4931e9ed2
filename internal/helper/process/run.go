package process

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/execplane/execplane/internal/protocol"
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Limits are the request's bounds (from the profile): the protocol's, so the gateway and
// the helper read them alike.
type Limits = protocol.CommandLimits

// Options configure Run.
type Options struct {
	Limits Limits
	// Dir is the working directory, already resolved beneath the workspace root.
	Dir string
	// Environ is the base environment (the helper's own); the request's variables override it.
	Environ []string
	// Cancel is closed when the call is cancelled (EOF on the helper's stdin): the command's
	// tree is killed at once.
	Cancel <-chan struct{}
	// Stop, when it delivers a grace, stops the command gently: SIGTERM to its group, then,
	// once the grace has passed, SIGKILL to everything it started (a durable command's
	// cancel). The result is CANCELLED either way.
	Stop <-chan time.Duration
	// Stdout and Stderr, when set, receive the output as it comes (a durable command's
	// spool) instead of captures of Limits.MaxOutputBytes; the result carries what they
	// render.
	Stdout, Stderr Output
	// Started, when set, is called with the command's pid (its process group) once it runs.
	Started func(pid int)
	// Durable: a durable command's supervisor runs it, under the durable ceiling on its
	// duration (protocol.MaxDetachedDurationCeiling).
	Durable bool
	// Terminal, when set, runs the command on a pseudo-terminal (an interactive terminal):
	// its input and output are the terminal's, so Stdout, Stderr and the spec's stdin are
	// unused (a stdin is refused), and the result counts what the terminal showed.
	Terminal *Terminal
	// Dir, when empty, starts the command in the helper's working directory: the helper
	// fchdir's to the kernel-resolved working directory first (see helper.runCommand), so
	// no path string is ever resolved again.
}

// EnableSubreaper makes this process the reaper of its orphaned descendants. The helper
// calls it once before Run.
func EnableSubreaper() error {
	return unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
}

// Run runs the command and returns its result once it and every descendant are gone.
//
// A refused request or a helper fault (no pipes) is an error; a command that could not be
// started is a result in the START_FAILED state, so the caller gets a receipt for it too.
func Run(spec *executionv1.CommandSpec, opts Options) (*executionv1.CommandResult, error) {
	longest := protocol.MaxDurationCeiling
	if opts.Durable {
		longest = protocol.MaxDetachedDurationCeiling
	}
	if err := opts.Limits.CheckUpTo(longest); err != nil {
		return nil, err
	}
	argv, timeout, err := protocol.ValidateCommand(spec, opts.Limits)
	if err != nil {
		return nil, err
	}
	env := mergeEnv(opts.Environ, spec.GetEnvironment())
	started := time.Now()
	res := &executionv1.CommandResult{StartedAt: timestamppb.New(started), ExitCode: -1}
	program, err := lookPath(argv[0], envValue(env, "PATH"))
	if err != nil {
		return startFailed(res, started, err), nil
	}

	l := launch{program: program, argv: argv, env: env, dir: opts.Dir}
	// Read last thing before the start, so that only kills during the command count.
	var oom oomCount
	var cmd *command
	if opts.Terminal != nil {
		if len(spec.GetStdin()) > 0 {
			return nil, protocol.Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, "a terminal's command takes its input from the terminal: stdin must be empty")
		}
		oom = readOOMKills()
		cmd, err = startTerminal(l, opts.Terminal)
	} else {
		var p pipes
		if p, err = openPipes(); err != nil {
			return nil, err
		}
		l.stdin, l.stdout, l.stderr = spec.GetStdin(), opts.Stdout, opts.Stderr
		if l.stdout == nil {
			l.stdout = newCapture(int(opts.Limits.MaxOutputBytes))
		}
		if l.stderr == nil {
			l.stderr = newCapture(int(opts.Limits.MaxOutputBytes))
		}
		oom = readOOMKills()
		cmd, err = start(l, p)
	}
	if err != nil {
		return startFailed(res, started, err), nil
	}
	defer cmd.proc.Release()
	if opts.Started != nil {
		opts.Started(cmd.pid)
	}
	cmd.follow()

	end := cmd.wait(timeout, opts.Cancel, opts.Stop)
	res.Message = cmd.reap()
	cmd.drain()

	res.Duration = durationpb.New(time.Since(started))
	res.Stdout, res.Stderr = cmd.stdout.Captured(), cmd.stderr.Captured()
	classify(res, end, oom.grew)
	res.Receipt = Receipt(res)
	return res, nil
}

func startFailed(res *executionv1.CommandResult, started time.Time, err error) *executionv1.CommandResult {
	res.State = executionv1.CommandState_COMMAND_STATE_START_FAILED
	res.Message = startMessage(err)
	res.Duration = durationpb.New(time.Since(started))
	res.Stdout, res.Stderr = &executionv1.CapturedOutput{}, &executionv1.CapturedOutput{}
	res.Receipt = Receipt(res)
	return res
}

func startMessage(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	return TruncateUTF8("cannot start: "+err.Error(), maxMessageBytes)
}

// Receipt is "sha256:" + hex of SHA-256 over the deterministic protobuf encoding of the
// result with its receipt field empty.
func Receipt(res *executionv1.CommandResult) string {
	c := proto.Clone(res).(*executionv1.CommandResult)
	c.Receipt = ""
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// maxMessageBytes bounds messages in results (the API documents 1024).
const maxMessageBytes = 1024

// TruncateUTF8 cuts s to at most n bytes without splitting a character, and replaces invalid
// UTF-8 (a protobuf string must be valid, or the response could not be encoded at all).
func TruncateUTF8(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
