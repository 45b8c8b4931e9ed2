package protocol

import (
	"strings"
	"time"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds on command specs (the API documents each).
const (
	maxArgs          = 1024
	maxArgBytes      = 32 << 10
	maxArgvBytes     = 256 << 10
	maxShellBytes    = 256 << 10
	maxEnvVars       = 128
	maxEnvValueBytes = 32 << 10
	// MinTimeout is the shortest timeout accepted.
	MinTimeout = time.Second
	// MaxOutputBytesCeiling and MaxDurationCeiling are the helper's own ceilings on the
	// request's limits: 8 MiB per stream (two streams must fit a frame), one hour.
	MaxOutputBytesCeiling = 8 << 20
	MaxDurationCeiling    = time.Hour
)

// maxEnvNameBytes bounds a variable name.
const maxEnvNameBytes = 256

// validEnvName reports whether name matches [A-Za-z_][A-Za-z0-9_]*, 1..maxEnvNameBytes
// bytes. Hand-written: a regular expression would cost the helper ~0.7 ms of start-up.
func validEnvName(name string) bool {
	if name == "" || len(name) > maxEnvNameBytes {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}

// deniedEnv are names that change how the dynamic loader, the C library or shells start a
// program before its own code runs; deniedEnvPrefixes are families of them.
var (
	deniedEnv         = []string{"BASH_ENV", "ENV", "IFS", "PS4", "SHELLOPTS", "BASHOPTS", "GLIBC_TUNABLES", "PROMPT_COMMAND", "CDPATH", "GCONV_PATH", "LOCPATH", "NLSPATH", "HOSTALIASES", "RES_OPTIONS"}
	deniedEnvPrefixes = []string{"LD_", "BASH_FUNC_", "DYLD_"}
)

// reservedEnvPrefix is execplane's own: the executor's configuration (the workspace root) and
// the local cluster's marks, which a request may not override.
const reservedEnvPrefix = "EXECPLANE_"

// EnvAllowed reports whether a variable name is accepted.
func EnvAllowed(name string) bool {
	if !validEnvName(name) {
		return false
	}
	for _, d := range deniedEnv {
		if name == d {
			return false
		}
	}
	for _, p := range deniedEnvPrefixes {
		if strings.HasPrefix(name, p) {
			return false
		}
	}
	return true
}

// ValidateWorkingDirectory refuses a working directory no helper would resolve (too long,
// NUL); empty means the workspace root. Where it resolves is the kernel's business.
func ValidateWorkingDirectory(wd []byte) error {
	if len(wd) > 0 && !validPath(wd) {
		return invalidf("command.working_directory: at most %d bytes without NUL", MaxPathBytes)
	}
	return nil
}

// CommandLimits are a command request's bounds, from the environment's profile.
type CommandLimits struct {
	// MaxOutputBytes bounds each output stream (and stdin).
	MaxOutputBytes uint64
	// MaxDuration bounds the timeout.
	MaxDuration time.Duration
}

// CommandLimitsOf reads a request's command limits. A duration past the helper's ceiling
// stays past it (Check refuses it) instead of overflowing.
func CommandLimitsOf(lim *helperv1.Limits) CommandLimits {
	millis := min(lim.GetMaxCommandMillis(), uint64(MaxDurationCeiling/time.Millisecond)+1)
	return CommandLimits{MaxOutputBytes: lim.GetMaxCommandBytes(), MaxDuration: time.Duration(millis) * time.Millisecond}
}

// Check refuses limits beyond the helper's own ceilings, which keep both captured streams
// within one frame and a call within an hour whatever the request says.
func (l CommandLimits) Check() error { return l.CheckUpTo(MaxDurationCeiling) }

// CheckUpTo is Check with another ceiling on the duration: a durable command's
// (MaxDetachedDurationCeiling).
func (l CommandLimits) CheckUpTo(longest time.Duration) error {
	if l.MaxOutputBytes == 0 || l.MaxOutputBytes > MaxOutputBytesCeiling {
		return invalidf("max_command_bytes must be 1..%d", MaxOutputBytesCeiling)
	}
	if l.MaxDuration < MinTimeout || l.MaxDuration > longest {
		return invalidf("the command's duration limit must be within [%s, %s]", MinTimeout, longest)
	}
	return nil
}

// ValidateCommand checks spec against the limits without running anything and returns the
// program's argv and timeout: the gateway calls it before it execs into an executor, so that
// a malformed command is refused with no side effect; the helper checks again (it trusts
// nobody).
func ValidateCommand(spec *executionv1.CommandSpec, lim CommandLimits) (argv []string, timeout time.Duration, err error) {
	switch p := spec.GetProgram().(type) {
	case *executionv1.CommandSpec_Argv:
		args := p.Argv.GetArgs()
		if len(args) == 0 || len(args) > maxArgs {
			return nil, 0, invalidf("argv must have 1..%d arguments", maxArgs)
		}
		total := 0
		for _, a := range args {
			if len(a) > maxArgBytes || strings.IndexByte(a, 0) >= 0 {
				return nil, 0, invalidf("an argument is over %d bytes or contains NUL", maxArgBytes)
			}
			total += len(a)
		}
		if args[0] == "" {
			return nil, 0, invalidf("empty program name")
		}
		if total > maxArgvBytes {
			return nil, 0, invalidf("argv over %d bytes", maxArgvBytes)
		}
		argv = args
	case *executionv1.CommandSpec_Shell:
		if p.Shell == "" || len(p.Shell) > maxShellBytes || strings.IndexByte(p.Shell, 0) >= 0 {
			return nil, 0, invalidf("shell script must be 1..%d bytes without NUL", maxShellBytes)
		}
		argv = []string{"/bin/sh", "-c", p.Shell}
	default:
		return nil, 0, invalidf("no program: set argv or shell")
	}
	if len(spec.GetEnvironment()) > maxEnvVars {
		return nil, 0, invalidf("more than %d environment variables", maxEnvVars)
	}
	for _, e := range spec.GetEnvironment() {
		if !EnvAllowed(e.GetName()) || strings.HasPrefix(e.GetName(), reservedEnvPrefix) {
			return nil, 0, invalidf("environment variable name %q is not allowed", e.GetName())
		}
		if len(e.GetValue()) > maxEnvValueBytes || strings.IndexByte(e.GetValue(), 0) >= 0 {
			return nil, 0, invalidf("environment variable %s: value over %d bytes or contains NUL", e.GetName(), maxEnvValueBytes)
		}
	}
	if uint64(len(spec.GetStdin())) > lim.MaxOutputBytes {
		return nil, 0, exhaustedf("stdin of %d bytes exceeds the limit %d", len(spec.GetStdin()), lim.MaxOutputBytes)
	}
	timeout = lim.MaxDuration
	if spec.GetTimeout() != nil {
		if err := spec.GetTimeout().CheckValid(); err != nil {
			return nil, 0, invalidf("timeout: %v", err)
		}
		timeout = spec.GetTimeout().AsDuration()
		if timeout < MinTimeout || timeout > lim.MaxDuration {
			return nil, 0, invalidf("timeout %s outside [%s, %s]", timeout, MinTimeout, lim.MaxDuration)
		}
	}
	return argv, timeout, nil
}

func invalidf(format string, args ...any) error {
	return Errorf(helperv1.ErrorCode_ERROR_CODE_INVALID_ARGUMENT, format, args...)
}

func exhaustedf(format string, args ...any) error {
	return Errorf(helperv1.ErrorCode_ERROR_CODE_RESOURCE_EXHAUSTED, format, args...)
}
