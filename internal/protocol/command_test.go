package protocol

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

func TestValidateBounds(t *testing.T) {
	lim := CommandLimits{MaxOutputBytes: 16, MaxDuration: time.Minute}
	ok := &executionv1.CommandSpec{Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"ls"}}}}
	if _, timeout, err := ValidateCommand(ok, lim); err != nil || timeout != time.Minute {
		t.Fatalf("valid spec: %v %v", timeout, err)
	}
	bad := map[string]*executionv1.CommandSpec{
		"no program":   {},
		"empty argv":   {Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{}}},
		"too many":     {Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: make([]string, maxArgs+1)}}},
		"huge arg":     {Program: &executionv1.CommandSpec_Argv{Argv: &executionv1.Argv{Args: []string{"x", strings.Repeat("a", maxArgBytes+1)}}}},
		"empty shell":  {Program: &executionv1.CommandSpec_Shell{}},
		"stdin":        {Program: ok.Program, Stdin: bytes.Repeat([]byte("x"), 17)},
		"long timeout": {Program: ok.Program, Timeout: durationpb.New(2 * time.Minute)},
		"bad timeout":  {Program: ok.Program, Timeout: &durationpb.Duration{Seconds: 1, Nanos: -5}},
		"env count":    {Program: ok.Program, Environment: make([]*executionv1.EnvironmentVariable, maxEnvVars+1)},
	}
	for name, spec := range bad {
		if _, _, err := ValidateCommand(spec, lim); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

func TestEnvAllowed(t *testing.T) {
	for _, n := range []string{"PATH", "HOME", "_X", "a1", "LDX"} {
		if !EnvAllowed(n) {
			t.Errorf("%s refused", n)
		}
	}
	for _, n := range []string{"LD_PRELOAD", "LD_AUDIT", "BASH_ENV", "ENV", "IFS", "BASH_FUNC_f%%", "A=B", "", "9X", "DYLD_INSERT_LIBRARIES"} {
		if EnvAllowed(n) {
			t.Errorf("%s allowed", n)
		}
	}
}

// A request's limits past the helper's ceilings are refused, never wrapped around: a huge
// max_command_millis must not overflow into a small duration that passes.
func TestCommandLimitsOfRefusesPastTheCeilings(t *testing.T) {
	for name, lim := range map[string]*helperv1.Limits{
		"millis at uint64 max":   {MaxCommandBytes: 1024, MaxCommandMillis: ^uint64(0)},
		"millis one past":        {MaxCommandBytes: 1024, MaxCommandMillis: uint64(MaxDurationCeiling/time.Millisecond) + 1},
		"output past":            {MaxCommandBytes: MaxOutputBytesCeiling + 1, MaxCommandMillis: 60_000},
		"no output":              {MaxCommandMillis: 60_000},
		"duration under minimum": {MaxCommandBytes: 1024, MaxCommandMillis: 10},
	} {
		if err := CommandLimitsOf(lim).Check(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: %v, want an invalid-argument refusal", name, err)
		}
	}
	if err := CommandLimitsOf(&helperv1.Limits{MaxCommandBytes: 1024, MaxCommandMillis: uint64(MaxDurationCeiling / time.Millisecond)}).Check(); err != nil {
		t.Errorf("the ceiling itself: %v", err)
	}
}
