package logging

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/hashicorp/go-hclog"
)

// Format is the output encoding.
type Format string

// The supported formats.
const (
	FormatJSON Format = "json"
	FormatText Format = "text"
)

// Options configure a root logger.
type Options struct {
	// Name is the binary ("gateway", "controller", ...), recorded as @module.
	Name string
	// Format is json (default, for production) or text.
	Format Format
	// Level is trace, debug, info (default), warn or error.
	Level string
	// Output receives the log lines; it must be safe for concurrent writes (os.Stderr is).
	Output io.Writer
}

// ErrInvalidOptions is returned for an unknown format or level.
var ErrInvalidOptions = errors.New("invalid logging options")

// Validate reports every problem with the format and level at once.
func (o Options) Validate() error {
	var errs []error
	switch o.Format {
	case "", FormatJSON, FormatText:
	default:
		errs = append(errs, fmt.Errorf("%w: log format %q is not json or text", ErrInvalidOptions, o.Format))
	}
	if o.Level != "" && hclog.LevelFromString(o.Level) == hclog.NoLevel {
		errs = append(errs, fmt.Errorf("%w: log level %q is not trace, debug, info, warn or error", ErrInvalidOptions, o.Level))
	}
	return errors.Join(errs...)
}

// New builds a root logger.
func New(o Options) (hclog.Logger, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Output == nil {
		return nil, fmt.Errorf("%w: no output", ErrInvalidOptions)
	}
	level := hclog.Info
	if o.Level != "" {
		level = hclog.LevelFromString(o.Level)
	}
	return hclog.New(&hclog.LoggerOptions{
		Name:               o.Name,
		Level:              level,
		Output:             o.Output,
		JSONFormat:         o.Format != FormatText,
		IncludeLocation:    false,
		DisableTime:        false,
		Color:              hclog.ColorOff,
		TimeFormat:         "2006-01-02T15:04:05.000Z07:00",
		JSONEscapeDisabled: false,
	}), nil
}

// Escape renders untrusted bytes (a file name, a command's argument) for a log line: valid
// printable UTF-8 passes through, anything else is quoted so it cannot forge log structure.
func Escape(b []byte) string {
	s := string(b)
	for _, r := range s {
		if r == '\uFFFD' || r < 0x20 || r == 0x7f {
			return fmt.Sprintf("%q", s)
		}
	}
	return s
}

// RegisterFlags registers --log-format and --log-level on fs, bound to o.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar((*string)(&o.Format), "log-format", string(FormatJSON), "log encoding: json or text")
	fs.StringVar(&o.Level, "log-level", "info", "log level: trace, debug, info, warn or error")
}
