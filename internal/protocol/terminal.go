package protocol

import (
	executionv1 "github.com/execplane/execplane/proto/execution/v1"
	helperv1 "github.com/execplane/execplane/proto/helper/v1"
)

// Bounds on interactive terminals (docs/commands.md, "Interactive terminals").
const (
	// MaxTerminalInputBytes bounds one piece of input: a paste, not a file transfer.
	MaxTerminalInputBytes = 64 << 10
	// MaxTerminalOutputBytes bounds one piece of what a terminal shows (one frame).
	MaxTerminalOutputBytes = 64 << 10
	// MaxTerminalFrameBytes bounds a frame of terminal mode in either direction: a piece of
	// input or output and its envelope.
	MaxTerminalFrameBytes = MaxTerminalOutputBytes + 1<<10
	// MaxTerminalCells bounds a window's rows and columns.
	MaxTerminalCells = 1000
	// DefaultTerminalRows and DefaultTerminalColumns are a window of unset size.
	DefaultTerminalRows, DefaultTerminalColumns = 24, 80
)

// TerminalSize returns the window size asked for, the default when unset, or an error when
// a dimension is out of bounds (or only one is set).
func TerminalSize(s *executionv1.TerminalSize) (rows, columns uint16, err error) {
	if s == nil || (s.GetRows() == 0 && s.GetColumns() == 0) {
		return DefaultTerminalRows, DefaultTerminalColumns, nil
	}
	if s.GetRows() < 1 || s.GetRows() > MaxTerminalCells || s.GetColumns() < 1 || s.GetColumns() > MaxTerminalCells {
		return 0, 0, invalidf("a terminal's rows and columns must each be 1..%d", MaxTerminalCells)
	}
	return uint16(s.GetRows()), uint16(s.GetColumns()), nil
}

// ValidateTerminal checks a terminal's opening against the limits without touching
// anything: the gateway calls it before it execs, and the helper again.
func ValidateTerminal(t *helperv1.TerminalOpen, lim CommandLimits) error {
	if t.GetCommand() == nil {
		return invalidf("a terminal needs a command")
	}
	if len(t.GetCommand().GetStdin()) > 0 {
		return invalidf("a terminal's command takes its input from the terminal: stdin must be empty")
	}
	if err := ValidateWorkingDirectory(t.GetCommand().GetWorkingDirectory()); err != nil {
		return err
	}
	if _, _, err := TerminalSize(t.GetSize()); err != nil {
		return err
	}
	_, _, err := ValidateCommand(t.GetCommand(), lim)
	return err
}

// ValidateTerminalInput checks one piece of a terminal's input.
func ValidateTerminalInput(in *helperv1.TerminalInput) error {
	switch x := in.GetInput().(type) {
	case *helperv1.TerminalInput_Data:
		if len(x.Data) == 0 || len(x.Data) > MaxTerminalInputBytes {
			return invalidf("a terminal's input must come in pieces of 1..%d bytes", MaxTerminalInputBytes)
		}
		return nil
	case *helperv1.TerminalInput_Resize:
		if x.Resize.GetRows() == 0 && x.Resize.GetColumns() == 0 {
			return invalidf("a resize needs a size")
		}
		_, _, err := TerminalSize(x.Resize)
		return err
	default:
		return invalidf("a terminal's input is data or a resize")
	}
}
