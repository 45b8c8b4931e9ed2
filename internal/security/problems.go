package security

import (
	"errors"
	"fmt"
)

// problems collects everything wrong with a bundle so that it is reported at once, each
// problem naming where it is (grantKeys[1].privateKeyFile). The zero value is ready to use.
type problems struct {
	errs []error
}

// add records a problem at path.
func (p *problems) add(path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// addErr records an error that names its place already (or needs no place).
func (p *problems) addErr(err error) {
	p.errs = append(p.errs, err)
}

// addAt records err at path, keeping it matchable with errors.Is.
func (p *problems) addAt(path string, err error) {
	p.errs = append(p.errs, fmt.Errorf("%s: %w", path, err))
}

func (p *problems) empty() bool { return len(p.errs) == 0 }

// err returns nil when nothing was recorded, or every problem joined and wrapping
// ErrInvalidBundle.
func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalidBundle, errors.Join(p.errs...))
}
