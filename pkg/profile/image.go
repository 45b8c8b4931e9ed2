package profile

import (
	"regexp"
	"strings"

	"github.com/execplane/execplane/pkg/problem"
)

// maxImageNameBytes is the distribution specification's limit on a repository name
// (registry host included); registries refuse longer names.
const maxImageNameBytes = 255

// imageReferencePattern is the grammar of github.com/distribution/reference (the one
// container runtimes parse): [domain[:port]/]path[:tag][@algorithm:hex]. Path components
// are lowercase; tags are at most 128 characters. Submatches: 1 name, 2 tag, 3 digest.
var imageReferencePattern = func() *regexp.Regexp {
	const (
		alphanumeric    = `[a-z0-9]+`
		separator       = `(?:[._]|__|[-]+)`
		pathComponent   = alphanumeric + `(?:` + separator + alphanumeric + `)*`
		domainComponent = `(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])`
		domainName      = domainComponent + `(?:\.` + domainComponent + `)*`
		ipv6            = `\[[a-fA-F0-9:]+\]`
		domain          = `(?:` + domainName + `|` + ipv6 + `)(?::[0-9]+)?`
		name            = `(?:` + domain + `/)?` + pathComponent + `(?:/` + pathComponent + `)*`
		tag             = `[\w][\w.-]{0,127}`
		digest          = `[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[0-9a-zA-Z]+`
	)
	return regexp.MustCompile(`^(` + name + `)(?::(` + tag + `))?(?:@(` + digest + `))?$`)
}()

// digestHexLength maps the digest algorithms the OCI image specification registers to the
// length of their lowercase hex encoding. Anything else is refused: a runtime would.
var digestHexLength = map[string]int{"sha256": 64, "sha512": 128}

// checkImage records every problem with an image reference. pinned requires a sha256 digest.
func checkImage(p *problem.List, path, image string, pinned bool) {
	if image == "" {
		p.Add(path, "is required")
		return
	}
	m := imageReferencePattern.FindStringSubmatch(image)
	if m == nil {
		p.Add(path, "%q is not an image reference ([registry/]repository[:tag][@digest], lowercase repository)", image)
		return
	}
	name, digest := m[1], m[3]
	if len(name) > maxImageNameBytes {
		p.Add(path, "repository name is %d bytes, more than %d", len(name), maxImageNameBytes)
	}
	if digest != "" {
		algorithm, hex, _ := strings.Cut(digest, ":")
		want, known := digestHexLength[algorithm]
		switch {
		case !known:
			p.Add(path, "digest algorithm %q is not sha256 or sha512", algorithm)
		case len(hex) != want || !isLowerHex(hex):
			p.Add(path, "%s digest must be %d lowercase hex digits", algorithm, want)
		}
	}
	if pinned && !strings.HasPrefix(digest, "sha256:") {
		p.Add(path, "%q is not pinned by digest (want ...@sha256:<64 hex>; digest-pinned images are required)", image)
	}
}

func isLowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
