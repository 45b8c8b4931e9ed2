package profile

import (
	"errors"
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalidProfile wraps every problem found while decoding or validating profiles: the
// document is malformed, a field is unknown or of the wrong type, or a value breaks a rule.
var ErrInvalidProfile = errors.New("invalid profiles")

// problems collects validation problems so that every one is reported at once, each naming
// its field path (profiles.python.cpuLimit). The zero value is ready to use.
type problems struct {
	errs []error
}

// add records one problem at path.
func (p *problems) add(path, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s: %s", path, fmt.Sprintf(format, args...)))
}

// addErr records an error that already names its path.
func (p *problems) addErr(err error) {
	p.errs = append(p.errs, err)
}

// addAll records one problem at path per message, as returned by the
// k8s.io/apimachinery/pkg/util/validation functions.
func (p *problems) addAll(path, value string, msgs []string) {
	for _, m := range msgs {
		p.add(path, "%s: %s", strconv.Quote(value), m)
	}
}

// err returns nil when nothing was recorded, or every problem joined and wrapping
// ErrInvalidProfile.
func (p *problems) err() error {
	if len(p.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalidProfile, errors.Join(p.errs...))
}

// profilePath is the path of the profile called name. Names that are not DNS-1123 labels
// (and are reported as such) are quoted so the path stays unambiguous.
func profilePath(name string) string {
	if len(validation.IsDNS1123Label(name)) == 0 {
		return "profiles." + name
	}
	return "profiles[" + strconv.Quote(name) + "]"
}
