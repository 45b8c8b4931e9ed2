package profile

import (
	"errors"
	"strconv"

	"github.com/execplane/execplane/pkg/problem"

	"k8s.io/apimachinery/pkg/util/validation"
)

// ErrInvalidProfile wraps every problem found while decoding or validating profiles: the
// document is malformed, a field is unknown or of the wrong type, or a value breaks a rule.
var ErrInvalidProfile = errors.New("invalid profiles")

// addAll records one problem at path per message, as returned by the
// k8s.io/apimachinery/pkg/util/validation functions.
func addAll(p *problem.List, path, value string, msgs []string) {
	for _, m := range msgs {
		p.Add(path, "%s: %s", strconv.Quote(value), m)
	}
}

// profilePath is the path of the profile called name. Names that are not DNS-1123 labels
// (and are reported as such) are quoted so the path stays unambiguous.
func profilePath(name string) string {
	if len(validation.IsDNS1123Label(name)) == 0 {
		return "profiles." + name
	}
	return "profiles[" + strconv.Quote(name) + "]"
}
