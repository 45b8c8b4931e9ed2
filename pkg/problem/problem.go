// Package problem collects validation problems so that a configuration, a profiles file or
// a security bundle reports every problem at once, each naming where it is (a flag, a field
// path), wrapped in the caller's sentinel error. The zero List is ready to use.
package problem

import (
	"errors"
	"fmt"
)

// List is an ordered collection of problems.
type List struct {
	errs []error
}

// Add records one problem at path.
func (l *List) Add(path, format string, args ...any) {
	l.errs = append(l.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// AddErr records an error that names its place already (or needs none).
func (l *List) AddErr(err error) {
	l.errs = append(l.errs, err)
}

// AddAt records err at path, keeping it matchable with errors.Is.
func (l *List) AddAt(path string, err error) {
	l.errs = append(l.errs, fmt.Errorf("%s: %w", path, err))
}

// Len is the number of problems recorded, so a step can tell whether it added any.
func (l *List) Len() int { return len(l.errs) }

// Empty reports whether nothing was recorded.
func (l *List) Empty() bool { return len(l.errs) == 0 }

// Err returns nil when nothing was recorded, or every problem joined and wrapping sentinel.
func (l *List) Err(sentinel error) error {
	if len(l.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", sentinel, errors.Join(l.errs...))
}
